"""``StandInDataset``: pipeline outputs of a fixed shape and box count, standing in for a
training set that is not on disk yet, so that a memory plan can be made before the data is
there (``tools/plan_memory.py``). Never a training set: its images are noise.

Every sample is what a training pipeline's ``Collect`` gives: for a detector
``dict(img_metas=dict, img=float CHW tensor, gt_bboxes=float [n, 4], gt_labels=long [n])``
(``gt_bboxes_ignore`` empty when collected; ``gt_masks`` when collected, a mask model's: one
per box, the box filled, ``BitmapMasks`` or with ``poly2mask=False`` ``PolygonMasks``, as
``LoadAnnotations(with_mask=True)`` gives them), for a classifier ``dict(img=..., gt_label=long
scalar)``, as the classification datasets give it. Each sample is drawn from ``(seed, index)``.
"""
import numpy as np
import torch
from torch.utils.data import Dataset

from ..registry import DATASETS
from ..core.mask import BitmapMasks, PolygonMasks
from .pipelines.formatting import DEFAULT_META_KEYS

__all__ = ['StandInDataset']

#: the ``Collect`` keys the stand-in makes, per task
KEYS = dict(detection=('img', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore'),
            classification=('img', 'gt_label'))
#: a mask model's extra key: one mask per box, so only beside ``gt_bboxes``
MASK_KEY = 'gt_masks'
#: the meta keys it fills (mmdet 2.x's ``Collect`` defaults)
META_KEYS = DEFAULT_META_KEYS


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be a positive int, got {value!r}')
    return value


@DATASETS.register_module()
class StandInDataset(Dataset):
    """Samples of ``shape`` with ``boxes_per_image`` ground-truth boxes (a detector's).

    Args:
        shape (tuple[int, int] | list): ``(H, W)`` of every image (the pipeline's bound), or
            a list of them taken in turn (the bound of each orientation: GroupSampler batches
            each apart, by the aspect-ratio ``flag`` each sample gets).
        num_classes (int): labels are drawn from ``0..num_classes - 1``.
        num_samples (int): dataset length (at least a batch).
        task (str): ``'detection'`` or ``'classification'``.
        boxes_per_image (int): ground-truth boxes of each image (detection).
        keys (sequence[str]): the ``Collect`` keys (default: the task's).
        meta_keys (sequence[str]): the ``Collect`` meta keys (detection).
        img_norm_cfg (dict): the ``Normalize`` arguments put in the metas.
        classes (sequence[str]): class names (default ``class_0 ...``).
        seed (int): base seed of the samples.
        poly2mask (bool): ``gt_masks`` as bitmaps (True) or polygons, as the pipeline's
            ``LoadAnnotations`` makes them.
    """

    def __init__(self, shape, num_classes, num_samples=2, task='detection',
                 boxes_per_image=100, keys=None, meta_keys=META_KEYS, img_norm_cfg=None,
                 classes=None, seed=0, test_mode=False, poly2mask=True):
        if task not in KEYS:
            raise ValueError(f"task must be 'detection' or 'classification', got {task!r}")
        shapes = shape if isinstance(shape, list) and shape and all(
            isinstance(s, (tuple, list)) for s in shape) else [shape]
        for one in shapes:
            if not (isinstance(one, (tuple, list)) and len(one) == 2 and all(
                    isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0
                    for s in one)):
                raise ValueError(f'shape must be (H, W), two positive ints, or a list of '
                                 f'them, got {shape!r}')
        self.shapes = [(int(h), int(w)) for h, w in shapes]
        self.shape = self.shapes[0]
        self.num_classes = _positive_int('num_classes', num_classes)
        self.num_samples = _positive_int('num_samples', num_samples)
        self.boxes_per_image = _positive_int('boxes_per_image', boxes_per_image) \
            if task == 'detection' else None
        self.task = task
        self.keys = tuple(KEYS[task][:3] if keys is None else keys)
        masks_ok = task == 'detection' and 'gt_bboxes' in self.keys
        unknown = [k for k in self.keys
                   if k not in KEYS[task] and not (k == MASK_KEY and masks_ok)]
        if 'img' not in self.keys or unknown:
            extra = (f'; {MASK_KEY!r} (one mask per box) goes with gt_bboxes'
                     if task == 'detection' else '')
            raise ValueError(f'the stand-in for a {task} training set makes the Collect keys '
                             f'{list(KEYS[task])} (img among them), got {list(self.keys)}'
                             + extra)
        self.meta_keys = tuple(meta_keys) if task == 'detection' else ()
        unknown = [k for k in self.meta_keys if k not in META_KEYS]
        if unknown:
            raise ValueError(f'the stand-in fills the meta keys {list(META_KEYS)}, not '
                             f'{unknown}')
        self.img_norm_cfg = img_norm_cfg or dict(mean=np.zeros(3, dtype=np.float32),
                                                 std=np.ones(3, dtype=np.float32),
                                                 to_rgb=False)
        self.CLASSES = tuple(classes) if classes else tuple(
            f'class_{k}' for k in range(num_classes))
        self.seed = seed
        self.test_mode = test_mode
        self.poly2mask = poly2mask
        if task == 'detection':  # GroupSampler's aspect-ratio group, as CustomDataset's
            self.flag = np.array([int(w / h > 1) for h, w in (
                self._shape(i) for i in range(num_samples))], dtype=np.uint8)

    def _shape(self, index):
        return self.shapes[index % len(self.shapes)]

    def __len__(self):
        return self.num_samples

    def __repr__(self):
        boxes = f', {self.boxes_per_image} boxes per image' if self.boxes_per_image else ''
        shapes = ' and '.join(f'{h}x{w}' for h, w in self.shapes)
        return (f'{type(self).__name__}({self.num_samples} synthetic {self.task} samples of '
                f'{shapes}{boxes})')

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f'index {index} out of range for {len(self)} samples')
        index = int(index) % len(self)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index + 1)
        h, w = self._shape(index)
        out = dict(img=torch.randn(3, h, w, generator=gen))
        if self.task == 'classification':
            out['gt_label'] = torch.randint(self.num_classes, (), generator=gen)
            return out
        n = self.boxes_per_image
        size = torch.rand(n, 2, generator=gen) * (15 / 32) + 1 / 16  # 1/16 .. 1/2 a side
        bw, bh = size[:, 0] * w, size[:, 1] * h
        x1, y1 = torch.rand(n, generator=gen) * (w - bw), torch.rand(n, generator=gen) * (h - bh)
        boxes = torch.stack([x1, y1, x1 + bw, y1 + bh], dim=1)
        name = f'stand-in/{index:06d}.jpg'
        metas = dict(filename=name, ori_filename=name, ori_shape=(h, w, 3),
                     img_shape=(h, w, 3), pad_shape=(h, w, 3),
                     scale_factor=np.ones(4, dtype=np.float32), flip=False,
                     flip_direction=None, img_norm_cfg=self.img_norm_cfg)
        data = dict(gt_bboxes=boxes, gt_labels=torch.randint(self.num_classes, (n, ),
                                                             generator=gen),
                    gt_bboxes_ignore=torch.zeros(0, 4))
        if 'gt_masks' in self.keys:
            data['gt_masks'] = self._box_masks(boxes.numpy(), h, w)
        out = dict(img_metas={k: metas[k] for k in self.meta_keys}, img=out['img'])
        out.update((k, data[k]) for k in self.keys if k != 'img')
        return out

    def _box_masks(self, boxes, h, w):
        if not self.poly2mask:
            return PolygonMasks([[np.array([x1, y1, x2, y1, x2, y2, x1, y2], dtype=np.float64)]
                                 for x1, y1, x2, y2 in boxes.tolist()], h, w)
        masks = np.zeros((len(boxes), h, w), dtype=np.uint8)
        for k, (x1, y1, x2, y2) in enumerate(np.round(boxes).astype(np.int64)):
            masks[k, y1:y2, x1:x2] = 1
        return BitmapMasks(masks, h, w)
