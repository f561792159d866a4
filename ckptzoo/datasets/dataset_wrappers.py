"""Dataset wrappers: ``RepeatDataset``, ``ConcatDataset``, ``ClassBalancedDataset`` and
``MultiImageMixDataset`` (mmdet 2.x).

All accept already-built datasets or dataset configs (built with ``build_dataset``), so a
config built straight through the registry works too. A seeded index (:mod:`.sample_seed`)
runs the inner dataset's item under its seed, so inner datasets of any kind draw from it.
"""
import bisect
import copy
import math
from collections import defaultdict

import numpy as np
from mmengine.logging import print_log
from torch.utils.data.dataset import ConcatDataset as _ConcatDataset

from ..registry import DATASETS
from .sample_seed import sample_rng


def _built(dataset):
    """A wrapper wraps datasets, as mmdet 2.x's do: ``build_dataset`` builds the configs it
    names first (building here too would make the builder and the wrappers import each
    other)."""
    if isinstance(dataset, dict):
        raise TypeError(f'a dataset wrapper takes built datasets, got the config {dataset!r}: '
                        'build the wrapper\'s config with ckptzoo.datasets.build_dataset, '
                        'which builds the datasets it names')
    return dataset


@DATASETS.register_module()
class ConcatDataset(_ConcatDataset):
    """Datasets one after another; ``flag`` concatenated for ``GroupSampler``.

    ``evaluate`` with ``separate_eval=True`` evaluates each part on its slice of the results
    and prefixes the keys with the part's index (``'0_mAP'``, ``'1_mAP'``); with ``False`` it
    evaluates everything at once with the first part's metric (all parts must be the same
    type). Unlike mmdet 2.x, the joint evaluation reads each image's annotation from its own
    part (mmdet re-read them through the first part, wrong for VOC07+12 whose parts have
    different ``img_prefix``).
    """

    def __init__(self, datasets, separate_eval=True):
        datasets = [_built(d) for d in datasets]
        if not datasets:
            raise ValueError('ConcatDataset needs at least one dataset, got []')
        super().__init__(datasets)
        self.CLASSES = getattr(datasets[0], 'CLASSES', None)
        self.separate_eval = separate_eval
        if not separate_eval and len({type(d) for d in datasets}) != 1:
            raise NotImplementedError(
                f'separate_eval=False needs datasets of one type, got '
                f'{sorted({type(d).__name__ for d in datasets})}')
        if all(hasattr(d, 'flag') for d in datasets):
            self.flag = np.concatenate([d.flag for d in datasets])

    def __getitem__(self, idx):
        with sample_rng(idx):
            return super().__getitem__(int(idx))

    def _locate(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise IndexError(f'index {idx} out of range for length {len(self)}')
            idx = len(self) + idx
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return dataset_idx, sample_idx

    def get_ann_info(self, idx):
        d, i = self._locate(idx)
        return self.datasets[d].get_ann_info(i)

    def get_cat_ids(self, idx):
        d, i = self._locate(idx)
        return self.datasets[d].get_cat_ids(i)

    def evaluate(self, results, logger=None, **kwargs):
        if len(results) != self.cumulative_sizes[-1]:
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{self.cumulative_sizes[-1]}')
        for dataset in self.datasets:
            if not hasattr(dataset, 'evaluate'):
                raise TypeError(f'{type(dataset).__name__} has no evaluate()')
        if self.separate_eval:
            total = dict()
            start = 0
            for i, (end, dataset) in enumerate(zip(self.cumulative_sizes, self.datasets)):
                part = results[start:end]
                print_log(f'\nEvaluating {getattr(dataset, "ann_file", i)} with {len(part)} '
                          f'images now', logger=logger)
                for k, v in dataset.evaluate(part, logger=logger, **kwargs).items():
                    total[f'{i}_{k}'] = v
                start = end
            return total
        first = self.datasets[0]
        if not hasattr(first, '_evaluate'):
            raise NotImplementedError(
                f'separate_eval=False needs a ckptzoo CustomDataset subclass, got '
                f'{type(first).__name__}')
        annotations = [self.get_ann_info(i) for i in range(len(self))]
        return first._evaluate(results, annotations, logger=logger, **kwargs)


@DATASETS.register_module()
class RepeatDataset:
    """``times`` passes over ``dataset`` per epoch (cheap long epochs for small sets)."""

    def __init__(self, dataset, times):
        if not isinstance(times, int) or times < 1:
            raise ValueError(f'times must be a positive int, got {times!r}')
        self.dataset = _built(dataset)
        self.times = times
        self.CLASSES = getattr(self.dataset, 'CLASSES', None)
        if hasattr(self.dataset, 'flag'):
            self.flag = np.tile(self.dataset.flag, times)
        self._ori_len = len(self.dataset)

    def __getitem__(self, idx):
        with sample_rng(idx):
            return self.dataset[int(idx) % self._ori_len]

    def get_ann_info(self, idx):
        return self.dataset.get_ann_info(idx % self._ori_len)

    def get_cat_ids(self, idx):
        return self.dataset.get_cat_ids(idx % self._ori_len)

    def __len__(self):
        return self.times * self._ori_len


@DATASETS.register_module()
class ClassBalancedDataset:
    """Repeat factor sampling (mmdet 2.x's, LVIS's): image ``I`` appears ``ceil(r(I))`` times
    per epoch, ``r(I) = max over its classes c of max(1, sqrt(oversample_thr / f(c)))`` with
    ``f(c)`` the fraction of images holding ``c``. With ``filter_empty_gt=False`` images without
    an object count as one more class (background) and are oversampled by the same rule.

    Frequencies are counted over labels (``get_cat_ids``); mmdet counted COCO category ids,
    and its background key ``len(CLASSES)`` could be a real category id (COCO's 80 is
    'toaster'), merging the two: not here.
    """

    def __init__(self, dataset, oversample_thr, filter_empty_gt=True):
        if isinstance(oversample_thr, bool) or not isinstance(oversample_thr, (int, float)) \
                or oversample_thr < 0:
            raise ValueError(f'oversample_thr must be a non-negative number, got '
                             f'{oversample_thr!r}')
        self.dataset = _built(dataset)
        if not hasattr(self.dataset, 'get_cat_ids'):
            raise TypeError(f'ClassBalancedDataset needs a dataset with get_cat_ids, '
                            f'{type(self.dataset).__name__} has none')
        self.oversample_thr = oversample_thr
        self.filter_empty_gt = filter_empty_gt
        self.CLASSES = getattr(self.dataset, 'CLASSES', None)
        self.PALETTE = getattr(self.dataset, 'PALETTE', None)
        self.repeat_factors = self._get_repeat_factors(self.dataset, oversample_thr)
        self.repeat_indices = [i for i, r in enumerate(self.repeat_factors)
                               for _ in range(math.ceil(r))]
        if hasattr(self.dataset, 'flag'):
            self.flag = np.asarray([f for f, r in zip(self.dataset.flag, self.repeat_factors)
                                    for _ in range(math.ceil(r))], dtype=np.uint8)

    def _get_repeat_factors(self, dataset, repeat_thr):
        background = object()  # a key no label can equal
        image_cats = []
        for idx in range(len(dataset)):
            cats = set(dataset.get_cat_ids(idx))
            if not cats and not self.filter_empty_gt:
                cats = {background}
            image_cats.append(cats)
        freq = defaultdict(int)
        for cats in image_cats:
            for c in cats:
                freq[c] += 1
        repeat = {c: max(1.0, math.sqrt(repeat_thr / (n / len(dataset))))
                  for c, n in freq.items()}
        return [max(repeat[c] for c in cats) if cats else 1 for cats in image_cats]

    def __getitem__(self, idx):
        with sample_rng(idx):
            return self.dataset[self.repeat_indices[int(idx)]]

    def get_ann_info(self, idx):
        return self.dataset.get_ann_info(self.repeat_indices[idx])

    def get_cat_ids(self, idx):
        return self.dataset.get_cat_ids(self.repeat_indices[idx])

    def __len__(self):
        return len(self.repeat_indices)


@DATASETS.register_module()
class MultiImageMixDataset:
    """mmdet 2.x: runs ``pipeline`` on the items of ``dataset``; a transform with
    ``get_indexes`` (``Mosaic``, ``MixUp``) gets its partner items in
    ``results['mix_results']``. ``skip_type_keys`` (and ``update_skip_type_keys``, which
    ``YOLOXModeSwitchHook`` calls) leave out the transforms of those types. A transform that
    returns None is retried on the same input up to ``max_refetch`` times (random
    transforms draw again).

    A seeded index (:mod:`.sample_seed`) runs the whole item, partner draws included, under
    its seed, so a resumed run mixes the same images the same way. ``dynamic_scale`` is
    refused as in mmdet 2.28 (deprecated: resize in the pipeline)."""

    def __init__(self, dataset, pipeline, dynamic_scale=None, skip_type_keys=None,
                 max_refetch=15):
        from ..registry import build_transform
        if dynamic_scale is not None:
            raise ValueError('MultiImageMixDataset dynamic_scale is deprecated (mmdet 2.x): '
                             'resize with a Resize transform in the pipeline')
        if not isinstance(pipeline, (list, tuple)) or \
                not all(isinstance(t, dict) for t in pipeline):
            raise TypeError(f'MultiImageMixDataset pipeline must be a list of transform '
                            f'configs (dicts), got {pipeline!r}')
        if not (isinstance(max_refetch, int) and max_refetch > 0):
            raise ValueError(f'max_refetch must be a positive int, got {max_refetch!r}')
        self._check_skip(skip_type_keys)
        self._skip_type_keys = skip_type_keys
        self.pipeline_types = [t['type'] if isinstance(t['type'], str) else t['type'].__name__
                               for t in pipeline]
        self.pipeline = [build_transform(t) for t in pipeline]
        self._check_mosaic_border()
        self.dataset = _built(dataset)
        self.CLASSES = getattr(self.dataset, 'CLASSES', None)
        self.PALETTE = getattr(self.dataset, 'PALETTE', None)
        if hasattr(self.dataset, 'flag'):
            self.flag = self.dataset.flag
        self.num_samples = len(self.dataset)
        self.max_refetch = max_refetch

    def _check_mosaic_border(self):
        """``RandomAffine`` after ``Mosaic`` must crop the 2h x 2w mosaic back to ``img_scale``
        (``border=(-h // 2, -w // 2)``, as every mmdet config sets it); another border trains
        at another size, found here rather than in the model's input."""
        mosaic = None
        for transform, kind in zip(self.pipeline, self.pipeline_types):
            if kind == 'Mosaic':
                mosaic = transform
            elif kind == 'RandomAffine' and mosaic is not None:
                h, w = mosaic.img_scale
                want = (-h // 2, -w // 2)
                border = tuple(transform.border)
                if border != want:
                    raise ValueError(
                        f'RandomAffine border={border} does not match Mosaic '
                        f'img_scale={tuple(mosaic.img_scale)}: the {2 * h}x{2 * w} mosaic would '
                        f'become {2 * h + 2 * border[0]}x{2 * w + 2 * border[1]}, not {h}x{w}; '
                        f'set border=(-img_scale[0] // 2, -img_scale[1] // 2) = {want}')
                mosaic = None

    @staticmethod
    def _check_skip(skip_type_keys):
        if skip_type_keys is not None and not (
                isinstance(skip_type_keys, (list, tuple)) and
                all(isinstance(k, str) for k in skip_type_keys)):
            raise TypeError(f'skip_type_keys must be a list of transform type names, got '
                            f'{skip_type_keys!r}')

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        with sample_rng(idx):
            return self._mix(int(idx))

    def _mix(self, idx):
        results = copy.deepcopy(self.dataset[idx])
        for transform, kind in zip(self.pipeline, self.pipeline_types):
            if self._skip_type_keys is not None and kind in self._skip_type_keys:
                continue
            if hasattr(transform, 'get_indexes'):
                for _ in range(self.max_refetch):
                    indexes = transform.get_indexes(self.dataset)
                    if not isinstance(indexes, (list, tuple)):
                        indexes = [indexes]
                    mix = [copy.deepcopy(self.dataset[i]) for i in indexes]
                    if None not in mix:
                        results['mix_results'] = mix
                        break
                else:
                    raise RuntimeError(f'the loading pipeline of {type(self.dataset).__name__} '
                                       f'returned None {self.max_refetch} times for the '
                                       f'partners of {kind}: check the dataset and its pipeline')
            for _ in range(self.max_refetch):
                updated = transform(copy.deepcopy(results))
                if updated is not None:
                    results = updated
                    break
            else:
                raise RuntimeError(f'{kind} returned None {self.max_refetch} times in '
                                   f'MultiImageMixDataset: check its pipeline')
            results.pop('mix_results', None)
        return results

    def get_ann_info(self, idx):
        return self.dataset.get_ann_info(idx)

    def update_skip_type_keys(self, skip_type_keys):
        """Leave out the transforms of these types from now on (a hook's switch)."""
        self._check_skip(skip_type_keys)
        self._skip_type_keys = skip_type_keys
