"""``CustomDataset``: mmdet 2.x's base detection dataset (middle format, filtering, grouping).

Middle format, one dict per image::

    dict(filename='a.jpg', width=1280, height=720,
         ann=dict(bboxes=<float32 [n, 4]>, labels=<int64 [n]>,
                  bboxes_ignore=<float32 [k, 4]>, labels_ignore=<int64 [k]>))
"""
import os.path as osp
import warnings
from collections import OrderedDict

import numpy as np
from mmengine.fileio import load
from mmengine.logging import print_log
from torch.utils.data import Dataset

from ..evaluation import eval_map
from ..registry import DATASETS
from .mask_ann import mask_ann_problem
from .pipelines import Compose
from .pipelines.loading import LoadAnnotations
from .sample_seed import sample_rng


def list_from_file(filename):
    with open(filename, encoding='utf-8') as f:
        return [line.rstrip('\n\r') for line in f if line.strip()]


@DATASETS.register_module()
class CustomDataset(Dataset):
    """Args as mmdet 2.x: ``ann_file`` (a path; a list of paths is split into a
    ``ConcatDataset`` by ``build_dataset``), ``pipeline`` (transform configs), ``classes``
    (names or a file of names; default ``CLASSES``), ``data_root`` (joined to the relative
    ``ann_file``, ``img_prefix``, ``seg_prefix``, ``proposal_file``), ``test_mode`` (no
    filtering, no group flag, ``__getitem__`` gives test data), ``filter_empty_gt``.

    In training, images with a short side < 32 px (and, for subclasses that can tell, images
    without a gt box) are dropped, and ``flag`` groups images by aspect ratio (1 if w / h > 1)
    for ``GroupSampler``.

    Fix over mmdet 2.x (which failed in the sampler with numpy's "need at least one array to
    concatenate"): an annotation file listing no image is an error naming it when the dataset is
    built; a training set whose images are all filtered out is empty, and ``build_dataloader``
    refuses it with ``empty_reason``, which names the file and why; likewise a training set
    none of whose images has a box to train on (``no_objects_reason``: all crowd, say).
    """

    #: the shortest image side kept in training (mmdet 2.x's fixed 32; CocoDataset's min_size)
    min_img_size = 32
    #: why the dataset is empty (every image filtered out), for the data loader's error
    empty_reason = None
    #: why no training image has a box to train on (e.g. every annotation a crowd), for the
    #: data loader's error: a training set of such images trains on nothing, every box loss 0
    no_objects_reason = None

    CLASSES = None
    #: the ``metric`` values ``evaluate`` takes (mmdet 2.x also had 'recall': not implemented)
    METRICS = ('mAP', )
    #: +1 in box widths/heights when evaluating (mmdet 2.x: False here, True for VOC).
    use_legacy_coordinate = False

    def __init__(self, ann_file, pipeline, classes=None, data_root=None, img_prefix='',
                 seg_prefix=None, seg_suffix='.png', proposal_file=None, test_mode=False,
                 filter_empty_gt=True, file_client_args=dict(backend='disk')):
        if isinstance(ann_file, (list, tuple)):
            raise TypeError(
                f'{type(self).__name__} takes one ann_file, got a list {ann_file!r}; build it '
                f'with ckptzoo.datasets.build_dataset, which makes a ConcatDataset of one '
                f'dataset per file (as mmdet 2.x)')
        self.ann_file = ann_file
        self.data_root = data_root
        self.img_prefix = img_prefix
        self.seg_prefix = seg_prefix
        self.seg_suffix = seg_suffix
        self.proposal_file = proposal_file
        self.test_mode = test_mode
        self.filter_empty_gt = filter_empty_gt
        self.CLASSES = self.get_classes(classes)

        if self.data_root is not None:
            if not osp.isabs(self.ann_file):
                self.ann_file = osp.join(self.data_root, self.ann_file)
            if not (self.img_prefix is None or osp.isabs(self.img_prefix)):
                self.img_prefix = osp.join(self.data_root, self.img_prefix)
            if not (self.seg_prefix is None or osp.isabs(self.seg_prefix)):
                self.seg_prefix = osp.join(self.data_root, self.seg_prefix)
            if not (self.proposal_file is None or osp.isabs(self.proposal_file)):
                self.proposal_file = osp.join(self.data_root, self.proposal_file)

        self.data_infos = self.load_annotations(self.ann_file)
        if not self.data_infos:
            raise ValueError(f'{type(self).__name__}: the annotation file {self.ann_file!r} '
                             f'lists no images')
        self.proposals = (self.load_proposals(self.proposal_file)
                          if self.proposal_file is not None else None)

        if not test_mode:
            valid_inds = self._filter_imgs()
            if not valid_inds:
                self.empty_reason = self._all_filtered_message()
            self.data_infos = [self.data_infos[i] for i in valid_inds]
            if self.proposals is not None:
                self.proposals = [self.proposals[i] for i in valid_inds]
            self._set_group_flag()
            if self.data_infos:
                self.no_objects_reason = self._no_objects_message()

        self.pipeline = Compose(pipeline)
        if any(isinstance(t, LoadAnnotations) and t.with_mask for t in self.pipeline.transforms):
            self.check_mask_annotations()
        if any(isinstance(t, LoadAnnotations) and t.with_seg for t in self.pipeline.transforms):
            self.check_semantic_maps()

    def __len__(self):
        return len(self.data_infos)

    def load_annotations(self, ann_file):
        """A json/pickle/yaml file of middle-format dicts (box lists become arrays)."""
        infos = load(ann_file)
        for info in infos:
            ann = info.get('ann')
            if ann is None:
                continue
            for key, shape, dtype in (('bboxes', (-1, 4), np.float32),
                                      ('bboxes_ignore', (-1, 4), np.float32),
                                      ('labels', (-1,), np.int64),
                                      ('labels_ignore', (-1,), np.int64)):
                if key in ann:
                    ann[key] = np.asarray(ann[key], dtype=dtype).reshape(shape)
        return infos

    def load_proposals(self, proposal_file):
        """A pickle (or json) of per-image ``[n, 4 or 5]`` arrays, in the order of the
        annotation file's images (mmdet's ``mmcv.load``); another length fails here, before
        any training, naming the file (mmdet would misalign or fail later)."""
        proposals = load(proposal_file)
        if not isinstance(proposals, (list, tuple)):
            raise TypeError(f'{type(self).__name__}: the proposal file {proposal_file!r} must '
                            f'hold a list of per-image arrays, got {type(proposals).__name__}')
        if len(proposals) != len(self.data_infos):
            raise ValueError(f'{type(self).__name__}: the proposal file {proposal_file!r} has '
                             f'{len(proposals)} entries but the annotation file '
                             f'{self.ann_file!r} lists {len(self.data_infos)} images; it '
                             f'needs one array of proposals per image, in the same order')
        return [np.asarray(p, dtype=np.float32) for p in proposals]

    def get_ann_info(self, idx):
        return self.data_infos[idx]['ann']

    def get_cat_ids(self, idx):
        return np.asarray(self.get_ann_info(idx)['labels']).astype(np.int64).tolist()

    def get_cat2imgs(self):
        """``{label: [indices of the images holding it]}`` over ``CLASSES`` (mmdet's, for
        ``ClassAwareSampler``)."""
        if self.CLASSES is None:
            raise ValueError(f'{type(self).__name__} has no CLASSES')
        out = {i: [] for i in range(len(self.CLASSES))}
        for i in range(len(self)):
            for label in set(self.get_cat_ids(i)):
                out[label].append(i)
        return out

    def check_mask_annotations(self):
        """Run when the pipeline has ``LoadAnnotations(with_mask=True)``, before any training:
        every image's annotation must give one usable mask per box (``ann['masks']``, COCO
        segmentation format, :mod:`.mask_ann`); an error names the file and the image."""
        dropped = 0
        for i, info in enumerate(self.data_infos):
            ann = self.get_ann_info(i)
            where = (f'{type(self).__name__} {self.ann_file!r}: image '
                     f'{info.get("filename", i)!r}')
            masks = ann.get('masks')
            if masks is None:
                raise ValueError(f'{where} has no instance masks (no "masks" in its '
                                 f'annotation), but the pipeline has '
                                 f'LoadAnnotations(with_mask=True); use with_mask=False or a '
                                 f'dataset with masks (CocoDataset)')
            if len(masks) != len(ann['bboxes']):
                raise ValueError(f'{where} has {len(masks)} masks for {len(ann["bboxes"])} '
                                 f'boxes; there must be one mask per box')
            for k, mask_ann in enumerate(masks):
                problem, n = mask_ann_problem(mask_ann, info['height'], info['width'])
                if problem is not None:
                    raise ValueError(f'{where}, mask {k}: {problem}')
                dropped += n
        if dropped:
            warnings.warn(f'{type(self).__name__} {self.ann_file!r}: {dropped} polygons of '
                          f'fewer than 3 points are dropped (as mmdet drops them); their '
                          f'masks keep their other polygons')

    def check_semantic_maps(self):
        """Run when the pipeline has ``LoadAnnotations(with_seg=True)``, before any training:
        ``seg_prefix`` is set and every image's ``seg_map`` file is there (an error names the
        missing files; mmdet failed on the first one read, mid-training)."""
        where = f'{type(self).__name__} {self.ann_file!r}'
        if self.seg_prefix is None:
            raise ValueError(f"{where}: the pipeline has LoadAnnotations(with_seg=True) but the "
                             f"dataset has no seg_prefix (the semantic maps' folder)")
        missing = []
        for i, info in enumerate(self.data_infos):
            seg_map = self.get_ann_info(i).get('seg_map')
            if seg_map is None:
                raise ValueError(f'{where}: image {info.get("filename", i)!r} has no seg_map '
                                 f'(LoadAnnotations(with_seg=True) reads one per image)')
            if not osp.isfile(osp.join(self.seg_prefix, seg_map)):
                missing.append(osp.join(self.seg_prefix, seg_map))
        if missing:
            raise FileNotFoundError(f'{where}: {len(missing)} of {len(self.data_infos)} '
                                    f'semantic maps are missing, e.g. {missing[:3]} '
                                    f'(LoadAnnotations(with_seg=True))')

    def pre_pipeline(self, results):
        results['img_prefix'] = self.img_prefix
        results['seg_prefix'] = self.seg_prefix
        results['proposal_file'] = self.proposal_file
        results['bbox_fields'] = []
        results['mask_fields'] = []
        results['seg_fields'] = []

    def _filter_imgs(self, min_size=32):
        if self.filter_empty_gt:
            warnings.warn('CustomDataset does not support filtering empty gt images.')
        return [i for i, info in enumerate(self.data_infos)
                if min(info['width'], info['height']) >= min_size]

    def _all_filtered_message(self):
        total = len(self.data_infos)
        small = sum(min(i['width'], i['height']) < self.min_img_size for i in self.data_infos)
        why = [f'{small} have a short side below {self.min_img_size} px'] if small else []
        advice = 'Check the image sizes in the annotations'
        if total > small:
            classes = list(self.CLASSES or ())
            shown = ', '.join(map(repr, classes[:5])) + (', ...' if len(classes) > 5 else '')
            why.append(f'{total - small} have no object of the classes ({shown}) and '
                       f'filter_empty_gt=True drops them')
            advice = ('Check the classes and the annotations, or set filter_empty_gt=False to '
                      'keep images without objects')
        return (f'{type(self).__name__}: all {total} images of {self.ann_file!r} are filtered '
                f'out for training: {"; ".join(why)}. {advice}')

    def _no_objects_message(self):
        """Why no training image has a box to train on, or None (subclasses that can tell
        cheaply say; this one does not look)."""
        return None

    def _set_group_flag(self):
        self.flag = np.zeros(len(self), dtype=np.uint8)
        for i, info in enumerate(self.data_infos):
            if info['width'] / info['height'] > 1:
                self.flag[i] = 1

    def _rand_another(self, idx):
        pool = np.where(self.flag == self.flag[idx])[0]
        return np.random.choice(pool)

    def __getitem__(self, idx):
        """The sample's pipeline output; a seeded index (from the samplers of
        ``build_dataloader``) runs it under the sample's own seed (:mod:`.sample_seed`)."""
        with sample_rng(idx):
            idx = int(idx)
            if self.test_mode:
                return self.prepare_test_img(idx)
            while True:
                data = self.prepare_train_img(idx)
                if data is None:
                    idx = self._rand_another(idx)
                    continue
                return data

    def prepare_train_img(self, idx):
        results = dict(img_info=self.data_infos[idx], ann_info=self.get_ann_info(idx))
        if self.proposals is not None:
            results['proposals'] = self.proposals[idx]
        self.pre_pipeline(results)
        return self.pipeline(results)

    def prepare_test_img(self, idx):
        results = dict(img_info=self.data_infos[idx])
        if self.proposals is not None:
            results['proposals'] = self.proposals[idx]
        self.pre_pipeline(results)
        return self.pipeline(results)

    @classmethod
    def get_classes(cls, classes=None):
        """``classes``: None (the class's ``CLASSES``), a file with one name per line, or a
        tuple/list of names."""
        if classes is None:
            return cls.CLASSES
        if isinstance(classes, str):
            return tuple(list_from_file(classes))
        if isinstance(classes, (tuple, list)):
            return tuple(classes)
        raise TypeError(f'classes must be None, a file name or a list of names, got {classes!r}')

    def _eval_mode(self):
        return 'area'

    def evaluate(self, results, metric='mAP', logger=None, proposal_nums=(100, 300, 1000),
                 iou_thr=0.5, scale_ranges=None):
        """``mAP`` (``AP50``-style key per IoU threshold, ``mAP`` their mean) over
        ``results``: per image, a list (per class) of ``[k, 5]`` arrays in original-image
        coordinates. ``iou_thr`` may be a float or a list."""
        return self._evaluate(results, [self.get_ann_info(i) for i in range(len(self))],
                              metric, logger, proposal_nums, iou_thr, scale_ranges)

    def _evaluate(self, results, annotations, metric='mAP', logger=None,
                  proposal_nums=(100, 300, 1000), iou_thr=0.5, scale_ranges=None):
        if not isinstance(metric, str):
            if len(metric) != 1:
                raise ValueError(f'evaluate takes one metric, got {metric!r}')
            metric = metric[0]
        if metric not in self.METRICS:
            raise KeyError(f'metric {metric!r} is not supported; supported: {self.METRICS}')
        if len(results) != len(annotations):
            raise ValueError(f'got results for {len(results)} images, the dataset has '
                             f'{len(annotations)}')
        iou_thrs = [iou_thr] if isinstance(iou_thr, float) else list(iou_thr)
        eval_results = OrderedDict()
        mean_aps = []
        for thr in iou_thrs:
            print_log(f'\n{"-" * 15}iou_thr: {thr}{"-" * 15}', logger=logger)
            mean_ap, _ = eval_map(results, annotations, scale_ranges=scale_ranges, iou_thr=thr,
                                  dataset=self.CLASSES, logger=logger,
                                  use_legacy_coordinate=self.use_legacy_coordinate,
                                  eval_mode=self._eval_mode())
            if isinstance(mean_ap, list):  # one per scale range
                mean_ap = float(np.mean(mean_ap))
            mean_aps.append(mean_ap)
            eval_results[f'AP{int(thr * 100):02d}'] = round(mean_ap, 3)
        eval_results['mAP'] = sum(mean_aps) / len(mean_aps)
        eval_results.move_to_end('mAP', last=False)
        return eval_results

    def __repr__(self):
        mode = 'Test' if self.test_mode else 'Train'
        return (f'{mode} {type(self).__name__} with {len(self)} images, '
                f'{len(self.CLASSES or ())} classes')
