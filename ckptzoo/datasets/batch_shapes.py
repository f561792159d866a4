"""The padded batch shapes and ground-truth box counts a training loader can really produce.

A plan probed at one shape holds for the batches that shape dominates; which shapes come is a
matter of the data (each image's size), the pipeline's geometry (``Resize``, ``Pad``), the
sampler's grouping (``GroupSampler`` batches images of one aspect-ratio ``flag`` only) and
the collate (a batch is padded to its largest height and width). :func:`loader_shapes` puts
the four together without loading an image:

- sizes are read from the dataset's ``data_infos`` (``height``/``width``), else from the image
  file's header;
- the geometry is that of the dataset's own pipeline (each part of a ``ConcatDataset`` its
  own) as :mod:`ckptzoo.datasets.pipelines.transforms` computes it, mmcv's rounding included
  (replayed by :mod:`.pipeline_geometry`: ``Resize``, ``Pad``, ``RandomFlip``, ``RandomCrop``
  keeping crops without boxes, ``AutoAugment`` of those);
  an image's largest shape is the one at the largest scale its ``Resize`` can draw;
- the batches are the real sampler's (built by ``build_dataloader``, iterated for indices
  only) and each sample's random scale is drawn as the dataset draws it, under the sample's
  own seed (:mod:`ckptzoo.datasets.sample_seed`), so the simulated epochs give the shapes
  the loader gives in those epochs, with their frequencies;
- box counts are what ``get_ann_info(i)['bboxes']`` gives the model (crowd and ignored boxes
  excluded, as ``LoadAnnotations`` gives ``gt_bboxes``).

Where sizes are unknown, or the pipeline has a geometric transform not modelled here, the
shapes fall back to :func:`pipeline_bound` and say so in ``note``.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os.path as osp
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from PIL import Image

from .builder import GroupSampler, build_dataloader
from .pipeline_geometry import SHAPE_KEEPING, Shape, _Geometry
from .train_config import innermost_train, train_pipeline

__all__ = ['GroupShapes', 'LoaderShapes', 'loader_shapes', 'pipeline_bound', 'SHAPE_KEEPING']

#: images the simulation draws at most (indices and scales only; a few seconds)
MAX_SIMULATED_SAMPLES = 50_000


@dataclass
class GroupShapes:
    """The batches of one sampler group (``flag``; None: any images share a batch).

    ``worst`` dominates every batch of the group (its largest padded height and width, each
    at the largest scale); ``shapes`` are the simulated batch shapes with their frequency in
    the group (sum 1; ``worst`` is listed with 0.0 when no simulated batch reached it);
    ``weight`` is the group's share of the loader's batches."""

    flag: int | None
    num_images: int
    worst: Shape
    shapes: list[tuple[Shape, float]]
    max_boxes_per_image: int | None
    max_boxes_per_batch: int | None
    weight: float = 1.0


@dataclass
class LoaderShapes:
    """What :func:`loader_shapes` found; ``from_data`` is False when the shapes are the
    pipeline's bound, and ``note`` then says why."""

    groups: list[GroupShapes]
    samples_per_gpu: int
    from_data: bool
    note: str | None = None
    epochs: int = 0  # epochs of the sampler simulated for the frequencies
    #: a digest of every image's ``(h, w)`` (None when the sizes are unknown): a plan made for
    #: other image sizes is not reused (:mod:`~ckptzoo.memory.plan_fit`)
    image_sizes: str | None = None

    @property
    def worst(self) -> Shape | None:
        """The componentwise largest ``(H, W)`` over the groups."""
        if not self.groups:
            return None
        return (max(g.worst[0] for g in self.groups), max(g.worst[1] for g in self.groups))

    @property
    def max_boxes_per_image(self) -> int | None:
        return _max_or_none(g.max_boxes_per_image for g in self.groups)

    @property
    def max_boxes_per_batch(self) -> int | None:
        return _max_or_none(g.max_boxes_per_batch for g in self.groups)

    @property
    def candidates(self) -> list[tuple[Shape, float]]:
        """Every group's shapes with their share of all batches (sum 1), largest area first."""
        total = Counter()
        for g in self.groups:
            for shape, freq in g.shapes:
                total[shape] += g.weight * freq
        return sorted(total.items(), key=lambda kv: (-kv[0][0] * kv[0][1], kv[0]))

    def trained_at(self, train_shapes, why: str) -> LoaderShapes:
        """These batches as a model that resizes them in its forward trains them (YOLOX's
        random sizes): ``train_shapes(shape)`` gives the ``[(shape, share)]`` a batch of
        ``shape`` runs at; each group's shapes and ``worst`` become those, and ``why`` is
        added to the note."""
        groups = []
        for g in self.groups:
            shares = Counter()
            for shape, freq in g.shapes:
                for trained, share in train_shapes(shape):
                    shares[tuple(trained)] += freq * share
            worst = [tuple(s) for s, _ in train_shapes(g.worst)] + [s for s in shares]
            worst = (max(s[0] for s in worst), max(s[1] for s in worst))
            shapes = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
            if worst not in shares:
                shapes.append((worst, 0.0))
            groups.append(GroupShapes(g.flag, g.num_images, worst, shapes,
                                      g.max_boxes_per_image, g.max_boxes_per_batch, g.weight))
        note = why if self.note is None else f'{self.note} {why}'
        return LoaderShapes(groups, self.samples_per_gpu, self.from_data, note, self.epochs,
                            self.image_sizes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(worst=self.worst, max_boxes_per_image=self.max_boxes_per_image,
                   max_boxes_per_batch=self.max_boxes_per_batch)
        return out


def _max_or_none(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


# ------------------------------------------------------------------------------------------
# the bound without data
# ------------------------------------------------------------------------------------------
def _scale_list(img_scale):
    return [img_scale] if isinstance(img_scale[0], (int, float)) else list(img_scale)


#: the orientations of :func:`pipeline_bound`, by GroupSampler's aspect-ratio flag
ORIENTATIONS = {1: 'landscape', 0: 'portrait'}


def pipeline_bound(cfg: Any, orientation: str | None = None) -> Shape | None:
    """The largest padded ``(H, W)`` the training pipeline can give a batch of any images, or
    None when it does not bound them (no ``Resize``).

    ``Resize`` with ``keep_ratio`` fits an image in ``(long, short)`` either way round, and a
    batch is padded to its largest height and width, so a batch of a landscape and a portrait
    image is ``long x long``: both orientations at once. GroupSampler never forms such a
    batch: ``orientation`` (``'landscape'``: width > height, GroupSampler's flag 1;
    ``'portrait'``: the rest, squares included) bounds a batch of one orientation,
    ``short x long`` or ``long x short``. ``ratio_range`` scales by up to its upper end;
    ``Pad`` rounds up.
    """
    if orientation not in (None, 'landscape', 'portrait'):
        raise ValueError(f"orientation must be None, 'landscape' or 'portrait', got "
                         f'{orientation!r}')
    return _bound_of(_mixed_pipeline(cfg), None, orientation)


#: what a ``MultiImageMixDataset``'s own pipeline may hold for the items' geometry to be
#: that of its dataset's pipeline (``CopyPaste`` pastes onto the image, its size stays)
MIX_SIZE_KEEPING = SHAPE_KEEPING | {'CopyPaste'}


def _mixed_pipeline(cfg) -> list:
    """The training pipeline; for a ``MultiImageMixDataset`` whose own pipeline keeps the
    size (``simple_copy_paste``'s ``CopyPaste``), its dataset's pipeline followed by it, as
    the items go through both."""
    outer = train_pipeline(cfg)
    inner = innermost_train(cfg)[1]
    inner = inner.get('dataset') if isinstance(inner, dict) else None
    while isinstance(inner, dict) and 'pipeline' not in inner and 'dataset' in inner:
        inner = inner['dataset']
    if isinstance(inner, dict) and inner.get('pipeline') and all(
            isinstance(t, dict) and t.get('type') in MIX_SIZE_KEEPING for t in outer):
        return list(inner['pipeline']) + outer
    return outer


def _bound_of(transforms, shape, orientation):
    """:func:`pipeline_bound`'s replay of ``transforms`` from the bound ``shape`` (None:
    unbounded so far)."""
    for t in transforms:
        kind = t.get('type') if isinstance(t, dict) else None
        if kind == 'Resize' and t.get('img_scale') is not None:
            scales = _scale_list(t['img_scale'])
            if t.get('ratio_range') is not None:
                hi = max(t['ratio_range'])
                scales = [(int(s[0] * hi), int(s[1] * hi)) for s in scales]
            if t.get('keep_ratio', True):
                long, short = max(max(s) for s in scales), max(min(s) for s in scales)
                shape = {None: (long, long), 'landscape': (short, long),
                         'portrait': (long, short)}[orientation]
            else:
                shape = (max(s[1] for s in scales), max(s[0] for s in scales))
        elif kind == 'RandomCrop':
            shape = _crop_bound(t, shape)
        elif kind == 'AutoAugment':
            # any policy may be drawn: the componentwise largest of theirs; a crop may turn
            # an image round, so a policy's later Resize is bounded either way round
            ends = [_bound_of(policy, shape, None if _crops(policy) else orientation)
                    for policy in t.get('policies') or []]
            shape = None if not ends or None in ends else (
                max(e[0] for e in ends), max(e[1] for e in ends))
        elif kind in ('RandomResizedCrop', 'CenterCrop'):
            size = t.get('size', t.get('crop_size'))
            if size is not None:
                size = (size, size) if isinstance(size, int) else tuple(size)
                shape = (size[0], size[1])
        elif kind == 'Pad' and shape is not None:
            if t.get('pad_to_square'):
                shape = (max(shape),) * 2
            elif t.get('size') is not None:
                shape = tuple(max(a, b) for a, b in zip(shape, t['size']))
            elif t.get('size_divisor'):
                d = t['size_divisor']
                shape = tuple(-(-s // d) * d for s in shape)
    return shape


def _crops(policy) -> bool:
    return any(isinstance(t, dict) and t.get('type') == 'RandomCrop' for t in policy)


def _crop_bound(t, shape):
    """``RandomCrop`` never enlarges: ``'absolute'`` gives at most ``crop_size`` (h, w),
    ``'absolute_range'`` at most its upper end on either side, the relative types at most
    the image (unbounded stays unbounded)."""
    kind, size = t.get('crop_type', 'absolute'), t.get('crop_size')
    if kind == 'absolute':
        cap = tuple(size)
    elif kind == 'absolute_range':
        cap = (size[1], size[1])
    else:
        return shape
    return cap if shape is None else (min(shape[0], cap[0]), min(shape[1], cap[1]))


# ------------------------------------------------------------------------------------------
# the data: sizes and box counts per dataset index, through the wrappers
# ------------------------------------------------------------------------------------------
def _leaf_table(dataset, pipeline: list):
    """Per image: ``(h, w)`` (from ``data_infos``, else the file's header), the number of gt
    boxes and the geometry of the dataset's own pipeline (``pipeline``, the config's, when it
    has none); sizes None with the reason when they cannot be had."""
    transforms = getattr(getattr(dataset, 'pipeline', None), 'transforms', None)
    pipeline = list(transforms) if transforms is not None else pipeline
    geometry = _Geometry(pipeline)
    sizes, why = [], None
    counts = [] if _with_boxes(pipeline) and hasattr(dataset, 'get_ann_info') else None
    prefix = getattr(dataset, 'img_prefix', None)
    for i, info in enumerate(dataset.data_infos):
        if sizes is not None:
            if info.get('height') and info.get('width'):
                sizes.append((int(info['height']), int(info['width'])))
            else:
                size = _header_size(prefix, info.get('filename'))
                if size is None:
                    sizes, why = None, (f'image {i} of {type(dataset).__name__} has no '
                                        f'height/width and its file cannot be read')
                else:
                    sizes.append(size)
        if counts is not None:
            counts.append(len(dataset.get_ann_info(i)['bboxes']))
    return sizes, counts, [geometry] * len(dataset.data_infos), why


def _header_size(prefix, filename):
    """``(h, w)`` from the image file's header (PIL does not decode the pixels), or None."""
    if not filename:
        return None
    try:
        with Image.open(osp.join(prefix, filename) if prefix else filename) as img:
            w, h = img.size
    except OSError:
        return None
    return h, w


def _table(dataset, pipeline: list):
    """``(sizes, counts, geometries, why)`` indexed like ``dataset``, through RepeatDataset,
    ConcatDataset (each part with its own pipeline) and wrappers with ``repeat_indices``
    (class-balanced sampling)."""
    if hasattr(dataset, 'data_infos'):
        return _leaf_table(dataset, pipeline)
    if isinstance(getattr(dataset, 'datasets', None), (list, tuple)):
        parts = [_table(d, pipeline) for d in dataset.datasets]
        why = next((p[3] for p in parts if p[3]), None)
        join = (lambda k: None if any(p[k] is None for p in parts)
                else [x for p in parts for x in p[k]])
        return join(0), join(1), join(2), why
    if hasattr(dataset, 'pipeline_types'):  # MultiImageMixDataset's own pipeline
        why = (f'{type(dataset).__name__} mixes several images into each item '
               f'({", ".join(dataset.pipeline_types)})')
        _, counts, _, _ = _table(dataset.dataset, pipeline)
        if counts is None:
            return None, None, None, why
        # at most its own boxes and all of every partner's (Mosaic 3, MixUp 1), each
        # partner bounded by the image with the most; a transform that pastes only some of
        # them says how many at most (CopyPaste: max_num_pasted - 1)
        most = max(counts, default=0)
        extra = sum(t.max_pasted(most) if hasattr(t, 'max_pasted')
                    else getattr(t, 'num_partners', 0) * most for t in dataset.pipeline)
        return None, [c + extra for c in counts], None, why
    inner = getattr(dataset, 'dataset', None)
    if inner is not None:
        if hasattr(dataset, 'repeat_indices'):
            order = [int(i) for i in dataset.repeat_indices]
        elif hasattr(dataset, 'times'):
            order = [i % len(inner) for i in range(len(dataset))]
        elif len(dataset) == len(inner):
            order = list(range(len(inner)))
        else:
            return None, None, None, (f'{type(dataset).__name__} does not say which image '
                                      f'each of its indices is')
        *columns, why = _table(inner, pipeline)
        return (*(None if xs is None else [xs[i] for i in order] for xs in columns), why)
    return None, None, None, f'{type(dataset).__name__} has no data_infos giving image sizes'


# ------------------------------------------------------------------------------------------
# batches
# ------------------------------------------------------------------------------------------
def _batch_boxes(counts: list[int], spg: int, grouped: bool, shuffle: bool) -> int:
    """The largest box sum over the images one batch can hold: ``GroupSampler`` pads a group
    to a multiple of ``spg`` with random repeats, so its last batch holds ``r = size % spg``
    distinct images and ``spg - r`` repeats, possibly of the most crowded one; a shuffled
    ungrouped sampler holds distinct images; an ordered one its fixed runs of ``spg``."""
    if not shuffle:
        return max(sum(counts[i:i + spg]) for i in range(0, len(counts), spg))
    top = sorted(counts, reverse=True)
    best = sum(top[:spg])
    r = len(top) % spg
    if grouped and r:
        best = max(best, sum(top[:r]) + (spg - r) * top[0])
    return best


def _default_epochs(cfg, n: int, spg: int) -> int:
    runner = cfg.get('runner') or {}
    if runner.get('max_epochs'):
        return int(runner['max_epochs'])
    if runner.get('max_iters'):
        return max(1, math.ceil(runner['max_iters'] * spg / n))
    return int(cfg.get('total_epochs', 1) or 1)


@contextlib.contextmanager
def _numpy_kept():
    """numpy's global generator as it was before the body (the draws replayed in it)."""
    state = np.random.get_state()
    try:
        yield
    finally:
        np.random.set_state(state)


def _simulate(dataset, sizes, geometries, spg, shuffle, seed, epochs):
    """``{flag: Counter(batch shape)}`` over ``epochs`` of the real sampler."""
    loader = build_dataloader(dataset, spg, 0, shuffle=shuffle, seed=seed)
    flags = (np.asarray(dataset.flag).astype(np.int64)
             if isinstance(loader.sampler, GroupSampler) else None)
    fixed: dict[int, Shape] = {}  # without random scales an image's shape is one
    counts: dict[int | None, Counter] = {}
    for epoch in range(epochs):
        if hasattr(loader.sampler, 'set_epoch'):
            loader.sampler.set_epoch(epoch)
        for batch in loader.batch_sampler:
            h = w = 0
            for index in batch:
                i = int(index)
                geometry = geometries[i]
                if geometry.random:
                    s = geometry.sample(index, sizes[i])
                else:
                    s = fixed.get(i) or fixed.setdefault(i, geometry.sample(index, sizes[i]))
                h, w = max(h, s[0]), max(w, s[1])
            flag = None if flags is None else int(flags[int(batch[0])])
            counts.setdefault(flag, Counter())[(h, w)] += 1
    return counts


def _validate(samples_per_gpu, epochs):
    if isinstance(samples_per_gpu, bool) or not isinstance(samples_per_gpu, int) \
            or samples_per_gpu < 1:
        raise ValueError(f'samples_per_gpu must be a positive int, got {samples_per_gpu!r}')
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int)
                               or epochs < 1):
        raise ValueError(f'epochs must be a positive int or None, got {epochs!r}')


def _with_boxes(pipeline) -> bool:
    """Whether the pipeline gives the model gt boxes (configs or built transforms)."""
    for t in pipeline:
        if isinstance(t, dict):
            if t.get('type') == 'LoadAnnotations' and t.get('with_bbox', True):
                return True
        elif type(t).__name__ == 'LoadAnnotations' and getattr(t, 'with_bbox', True):
            return True
    return False


def loader_shapes(cfg: Any, dataset, samples_per_gpu: int, *, shuffle: bool = True,
                  seed: int | None = None, epochs: int | None = None,
                  max_samples: int = MAX_SIMULATED_SAMPLES) -> LoaderShapes:
    """The padded batch shapes and box counts of ``build_dataloader(dataset,
    samples_per_gpu, shuffle=shuffle, seed=seed)``: each image through its dataset's own
    pipeline (the config's training pipeline where a dataset has none, and for the bound).

    ``seed`` defaults to ``cfg.seed`` (what the training loader is built with), ``epochs`` to
    the run's length, cut to ``max_samples`` images (at least one epoch); the frequencies are
    those of the simulated epochs, ``worst`` holds for any epoch. A distributed run batches
    each rank's part the same way (``DistributedGroupSampler``), so its shapes are these.
    """
    _validate(samples_per_gpu, epochs)
    spg, n = samples_per_gpu, len(dataset)
    pipeline = train_pipeline(cfg)
    seed = cfg.get('seed') if seed is None else seed
    sizes, counts, geometries, why = _table(dataset, pipeline)
    distinct = list({id(g): g for g in geometries or [_Geometry(pipeline)]}.values())
    unknown = next((g.unknown for g in distinct if g.unknown), None)
    random = any(g.random for g in distinct)
    grouped = shuffle and hasattr(dataset, 'flag')  # build_dataloader's GroupSampler
    if grouped:
        flags = np.asarray(dataset.flag).astype(np.int64)
        members = {int(f): np.flatnonzero(flags == f) for f in np.unique(flags)}
    else:  # any images share a batch
        members = {None: np.arange(n)} if n else {}

    def boxes(idx):
        if counts is None:
            return None, None
        c = [counts[i] for i in idx]
        return max(c), _batch_boxes(c, spg, grouped, shuffle)

    if unknown is not None or sizes is None or n == 0:
        bound = pipeline_bound(cfg)
        if sizes is None or n == 0:
            note = (f'Image sizes are unknown ({why or "the dataset is empty"}), so the '
                    f'batch shapes are the pipeline bound {bound}.')
        else:
            note = (f'The training pipeline has a {unknown} transform whose output '
                    f'size is not modelled, so the batch shapes are the pipeline bound '
                    f'{bound}.')
        if bound is None:
            note = note[:-1] + ', and the pipeline gives none: no batch shape is known.'
        per_group = [boxes(m) for m in members.values()]
        oriented = {flag: pipeline_bound(cfg, ORIENTATIONS.get(flag)) for flag in members}
        if grouped and bound is not None and n and all(
                f in ORIENTATIONS for f in members) and set(oriented.values()) != {bound}:
            # GroupSampler batches the orientations apart: never long x long
            groups = [GroupShapes(flag, len(m), oriented[flag], [(oriented[flag], 1.0)],
                                  *boxes(m), len(m) / n) for flag, m in members.items()]
            note = note[:-1] + (' of each orientation (GroupSampler batches landscape and '
                                'portrait images apart): ' + ' and '.join(
                                    f'{h}x{w}' for h, w in oriented.values()) + '.')
            return LoaderShapes(groups, spg, False, note)
        groups = [] if bound is None else [GroupShapes(
            None, n, bound, [(bound, 1.0)], _max_or_none(b[0] for b in per_group),
            _max_or_none(b[1] for b in per_group))]
        return LoaderShapes(groups, spg, False, note)

    if epochs is None:
        epochs = _default_epochs(cfg, n, spg)
        if not random and not shuffle:
            epochs = 1  # every epoch gives the same batches
        epochs = max(1, min(epochs, max_samples // n))
    with _numpy_kept():
        simulated = _simulate(dataset, sizes, geometries, spg, shuffle, seed, epochs)
    total = sum(sum(c.values()) for c in simulated.values())
    groups = []
    for flag, idx in members.items():
        largest = [geometries[i].largest(sizes[i]) for i in idx]
        worst = (max(s[0] for s in largest), max(s[1] for s in largest))
        seen = simulated.get(flag, Counter())
        count = sum(seen.values())
        shapes = [(s, c / count) for s, c in sorted(seen.items(), key=lambda kv: (-kv[1], kv[0]))]
        if worst not in seen:
            shapes.append((worst, 0.0))
        per_image, per_batch = boxes(idx)
        groups.append(GroupShapes(flag, len(idx), worst, shapes, per_image, per_batch,
                                  count / total if total else 0.0))
    return LoaderShapes(groups, spg, True, None, epochs, _sizes_digest(sizes))


def _sizes_digest(sizes) -> str:
    """A short digest of the multiset of image sizes (order-free: the same images in
    another order give the same batches' worst case)."""
    counts = sorted(Counter(sizes).items())
    return hashlib.sha256(repr(counts).encode()).hexdigest()[:16]
