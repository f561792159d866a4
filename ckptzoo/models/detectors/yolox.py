"""mmdet 2.x ``YOLOX``: a single-stage detector that trains at a size changing every
``random_size_interval`` iterations: the padded batch and its boxes are resized (bilinear) to
the current ``input_size``, and after every ``random_size_interval``-th training forward a new
size ``size_multiplier * (s, int(s * w / h))`` is drawn, ``s`` uniform in
``random_size_range`` (inclusive), as mmdet.

Fixes over mmdet (same distribution of sizes, different draws):

* mmdet drew the size with Python's global ``random`` on rank 0 and broadcast it (a barrier
  every ``interval`` iterations, and draws that shift with any other use of ``random``). Here
  the ``k``-th size is a pure function of ``k`` (its own generator seeded from ``k``), so every
  rank computes the same size without communicating (and every run draws the same sequence,
  whatever its seed: under ``--diff-seed`` the ranks' seeds differ);
* the number of training forwards so far (``_progress_in_iter``) is saved with the weights,
  in the state dict's metadata (no new key, so mmdet checkpoints load and ours load into
  mmdet), and restored by a resume: the resumed run trains at the sizes the uninterrupted one
  did (mmdet restarted at ``input_size`` and a fresh sequence). The planner's probe steps
  restore the state dict after probing, so they leave the sequence where it was;
* the ground-truth boxes are rescaled in new tensors (mmdet scaled the caller's in place).

The memory planner sees the sizes a batch trains at, not the loader's shape: ``train_shapes``
(every size a training forward can run at, so the buckets cover them all), ``train_shape``
(the size of the next forward, so the plan hook switches to its bucket) and
``keep_batch_shape`` (the probe's steps run at the probe batch's own shape).
"""
import contextlib
import random

import numpy as np
import torch.nn.functional as F

from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['YOLOX']

_PROGRESS_KEY = 'yolox_progress_in_iter'


def _check_pair(name, value, kind=int):
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and
            all(isinstance(v, kind) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ValueError(f'YOLOX {name} must be two positive ints, got {value!r}')
    return tuple(value)


@MODELS.register_module()
class YOLOX(SingleStageDetector):
    """Args as mmdet 2.x: ``backbone``, ``neck``, ``bbox_head``, ``train_cfg``, ``test_cfg``,
    ``pretrained``, ``init_cfg``, and the multi-scale training:

        input_size (tuple[int]): ``(h, w)`` of the pipeline's images, (640, 640).
        size_multiplier (int): the sizes are multiples of it, 32.
        random_size_range (tuple[int]): ``s`` is drawn in ``[lo, hi]``, (15, 25).
        random_size_interval (int): a new size every this many iterations, 10.
    """

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, input_size=(640, 640), size_multiplier=32,
                 random_size_range=(15, 25), random_size_interval=10, init_cfg=None):
        input_size = _check_pair('input_size', input_size)
        random_size_range = _check_pair('random_size_range', random_size_range)
        if random_size_range[0] > random_size_range[1]:
            raise ValueError(f'YOLOX random_size_range must be (lo, hi) with lo <= hi, '
                             f'got {random_size_range!r}')
        for name, value in (('size_multiplier', size_multiplier),
                            ('random_size_interval', random_size_interval)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'YOLOX {name} must be a positive int, got {value!r}')
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
        self._default_input_size = input_size
        self._size_multiplier = size_multiplier
        self._random_size_range = random_size_range
        self._random_size_interval = random_size_interval
        self._progress_in_iter = 0
        self._keep_batch_shape = False
        self._loader_batch = None
        self.register_state_dict_post_hook(_save_progress)

    @property
    def _input_size(self):
        """The size of this training forward: the default until the first draw, then the
        draw made after the last multiple of ``random_size_interval`` forwards."""
        draws = self._progress_in_iter // self._random_size_interval
        return self._default_input_size if draws == 0 else self.random_size(draws)

    def random_size(self, k):
        """The ``k``-th drawn ``(h, w)``: ``size_multiplier * (s, int(s * w / h))``."""
        rng = random.Random(int(np.random.SeedSequence([0x10105, k]).generate_state(1)[0]))
        s = rng.randint(*self._random_size_range)
        aspect = float(self._default_input_size[1]) / self._default_input_size[0]
        return self._size_multiplier * s, self._size_multiplier * int(aspect * s)

    def drawable_sizes(self):
        """Every ``(h, w)`` :meth:`random_size` can give, ascending."""
        aspect = float(self._default_input_size[1]) / self._default_input_size[0]
        lo, hi = self._random_size_range
        return sorted({(self._size_multiplier * s, self._size_multiplier * int(aspect * s))
                       for s in range(lo, hi + 1)})

    def train_shape(self, batch_shape):
        """The ``(h, w)`` the next training forward of a ``batch_shape`` batch runs at: the
        current size, except where that is the default (no resize: the batch's own)."""
        size = self._input_size
        if self._keep_batch_shape or size == self._default_input_size:
            return tuple(batch_shape)
        return size

    def train_shapes(self, batch_shape):
        """Every ``(h, w)`` a training forward of a ``batch_shape`` batch can run at, each
        with its share of the forwards (the draws are uniform over the sizes; a draw equal to
        the default size keeps the batch's own)."""
        sizes = [tuple(batch_shape) if size == self._default_input_size else size
                 for size in self.drawable_sizes()]
        shares = {}
        for size in sizes:
            shares[size] = shares.get(size, 0.0) + 1.0 / len(sizes)
        if tuple(batch_shape) not in shares:  # the first interval: the default size
            shares[tuple(batch_shape)] = 0.0
        return sorted(shares.items())

    @contextlib.contextmanager
    def keep_batch_shape(self):
        """Training forwards inside run at their batch's own shape (the planner's probe),
        holding what a step at that size holds (a stand-in of the loader's batch)."""
        keep, self._keep_batch_shape = self._keep_batch_shape, True
        try:
            yield self
        finally:
            self._keep_batch_shape = keep
            self._loader_batch = None

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        """mmdet's: resize to the current size, the head's losses, count the forward."""
        img, gt_bboxes = self._preprocess(img, gt_bboxes)
        losses = super().forward_train(img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore)
        self._progress_in_iter += 1
        return losses

    def _preprocess(self, img, gt_bboxes):
        if self._keep_batch_shape:
            # a training step at another size holds the loader's batch (at the default size)
            # beside the resized one: the probe's step holds a stand-in of it until the next
            self._loader_batch = None
            if tuple(img.shape[-2:]) != self._default_input_size:
                self._loader_batch = img.new_zeros(img.shape[:2] + self._default_input_size)
            return img, gt_bboxes
        size = self._input_size
        scale_y = size[0] / self._default_input_size[0]
        scale_x = size[1] / self._default_input_size[1]
        if scale_x != 1 or scale_y != 1:
            img = F.interpolate(img, size=size, mode='bilinear', align_corners=False)
            scaled = []
            for boxes in gt_bboxes:
                boxes = boxes.clone()
                boxes[..., 0::2] = boxes[..., 0::2] * scale_x
                boxes[..., 1::2] = boxes[..., 1::2] * scale_y
                scaled.append(boxes)
            gt_bboxes = scaled
        return img, gt_bboxes

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args, **kwargs):
        if _PROGRESS_KEY in local_metadata:
            self._progress_in_iter = int(local_metadata[_PROGRESS_KEY])
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)


def _save_progress(module, state_dict, prefix, local_metadata):
    local_metadata[_PROGRESS_KEY] = module._progress_in_iter
