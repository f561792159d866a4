"""mmdet 2.x's ``RandomCrop`` (DETR's, Sparse R-CNN's ``*_crop_*``, the large-scale jittering
of MaskFormer / Mask2Former, the ``ms-crop`` 3x schedules).

Every random number comes from numpy's global generator with mmdet's calls in mmdet's order
(``randint`` for ``absolute_range``'s height then width, ``rand(2)`` for ``relative_range``,
then ``randint`` for the top then the left offset), so under the per-sample generator of
:mod:`ckptzoo.datasets.sample_seed` a crop is a function of (seed, epoch, index), and with
numpy seeded alike it is mmdet's own, draw for draw. (mmdet keeps it in ``transforms.py``;
it sits in its own module here, as that file is shared and near its size limit.)
"""
import numbers

import numpy as np

from ...registry import TRANSFORMS

__all__ = ['RandomCrop']

CROP_TYPES = ('absolute', 'absolute_range', 'relative', 'relative_range')


@TRANSFORMS.register_module()
class RandomCrop:
    """Crop a random ``(crop_h, crop_w)`` window of the image, its boxes, masks and
    segmentation maps. ``crop_size`` is ``(h, w)``: pixels for ``'absolute'``; for
    ``'absolute_range'`` the size is drawn in ``[crop_size[0], min(side, crop_size[1])]`` per
    side; ``'relative'`` takes ``crop_size`` times the image's sides, ``'relative_range'``
    draws the fractions in ``[crop_size, 1]``. A window larger than the image is the image.

    Boxes are shifted, clipped to the window (``bbox_clip_border``) and those left empty
    dropped with their labels and masks (``gt_bboxes`` -> ``gt_labels`` / ``gt_masks``,
    ``gt_bboxes_ignore`` -> ``gt_labels_ignore`` / ``gt_masks_ignore``); with
    ``recompute_bbox`` the boxes become the cropped masks' tight boxes. No ``gt_bboxes`` left
    and ``allow_negative_crop=False``: returns ``None`` (the dataset draws another image, as
    mmdet's). Sets ``img_shape``.

    Fix over mmdet: with several ``img_fields`` every image gets the one window (mmdet drew
    an offset per image and moved the boxes by the last one's); with the single ``img`` the
    draws and results are mmdet's.
    """

    BBOX2LABEL = {'gt_bboxes': 'gt_labels', 'gt_bboxes_ignore': 'gt_labels_ignore'}
    BBOX2MASK = {'gt_bboxes': 'gt_masks', 'gt_bboxes_ignore': 'gt_masks_ignore'}

    def __init__(self, crop_size, crop_type='absolute', allow_negative_crop=False,
                 recompute_bbox=False, bbox_clip_border=True):
        if crop_type not in CROP_TYPES:
            raise ValueError(f'RandomCrop crop_type must be one of {CROP_TYPES}, '
                             f'got {crop_type!r}')
        if not isinstance(crop_size, (tuple, list)) or len(crop_size) != 2 or not all(
                isinstance(s, numbers.Number) and not isinstance(s, bool) for s in crop_size):
            raise TypeError(f'RandomCrop crop_size must be an (h, w) pair of numbers, '
                            f'got {crop_size!r}')
        if crop_type.startswith('absolute'):
            if not all(isinstance(s, numbers.Integral) and s > 0 for s in crop_size):
                raise ValueError(f'RandomCrop crop_size must be positive ints for crop_type '
                                 f'{crop_type!r}, got {crop_size!r}')
            if crop_type == 'absolute_range' and crop_size[0] > crop_size[1]:
                raise ValueError(f"RandomCrop crop_size of 'absolute_range' is (min, max), "
                                 f'got {crop_size!r}')
        elif not all(0 < s <= 1 for s in crop_size):
            raise ValueError(f'RandomCrop crop_size must be fractions in (0, 1] for crop_type '
                             f'{crop_type!r}, got {crop_size!r}')
        self.crop_size = crop_size
        self.crop_type = crop_type
        self.allow_negative_crop = allow_negative_crop
        self.recompute_bbox = recompute_bbox
        self.bbox_clip_border = bbox_clip_border

    def _get_crop_size(self, image_size):
        """The window's ``(crop_h, crop_w)`` for an ``(h, w)`` image (mmdet's draws)."""
        h, w = image_size
        first, second = self.crop_size
        if self.crop_type == 'absolute':  # (h, w)
            return min(first, h), min(second, w)
        if self.crop_type == 'absolute_range':  # (min, max) of either side
            crop_h = np.random.randint(min(h, first), min(h, second) + 1)
            crop_w = np.random.randint(min(w, first), min(w, second) + 1)
            return crop_h, crop_w
        if self.crop_type == 'relative':  # (h, w) fractions
            return int(h * first + 0.5), int(w * second + 0.5)
        low = np.asarray(self.crop_size, dtype=np.float32)
        crop_h, crop_w = low + np.random.rand(2) * (1 - low)
        return int(h * crop_h + 0.5), int(w * crop_w + 0.5)

    def _crop_data(self, results, crop_size, allow_negative_crop):
        img_keys = results.get('img_fields', ['img'])
        h, w = results[img_keys[0]].shape[:2]
        offset_h = np.random.randint(0, max(h - crop_size[0], 0) + 1)
        offset_w = np.random.randint(0, max(w - crop_size[1], 0) + 1)
        y1, y2 = offset_h, offset_h + crop_size[0]
        x1, x2 = offset_w, offset_w + crop_size[1]
        for key in img_keys:
            results[key] = results[key][y1:y2, x1:x2, ...]
        img_shape = results[img_keys[0]].shape
        results['img_shape'] = img_shape
        offset = np.array([offset_w, offset_h, offset_w, offset_h], dtype=np.float32)
        for key in results.get('bbox_fields', []):
            bboxes = results[key] - offset
            if self.bbox_clip_border:
                bboxes[:, 0::2] = np.clip(bboxes[:, 0::2], 0, img_shape[1])
                bboxes[:, 1::2] = np.clip(bboxes[:, 1::2], 0, img_shape[0])
            valid = (bboxes[:, 2] > bboxes[:, 0]) & (bboxes[:, 3] > bboxes[:, 1])
            if key == 'gt_bboxes' and not valid.any() and not allow_negative_crop:
                return None
            results[key] = bboxes[valid, :]
            label_key = self.BBOX2LABEL.get(key)
            if label_key in results:
                results[label_key] = results[label_key][valid]
            mask_key = self.BBOX2MASK.get(key)
            if mask_key in results:
                results[mask_key] = results[mask_key][valid.nonzero()[0]].crop(
                    np.asarray([x1, y1, x2, y2]))
                if self.recompute_bbox:
                    results[key] = results[mask_key].get_bboxes()
        for key in results.get('seg_fields', []):
            results[key] = results[key][y1:y2, x1:x2]
        return results

    def __call__(self, results):
        crop_size = self._get_crop_size(results['img'].shape[:2])
        return self._crop_data(results, crop_size, self.allow_negative_crop)

    def __repr__(self):
        return (f'{type(self).__name__}(crop_size={self.crop_size}, '
                f'crop_type={self.crop_type}, allow_negative_crop={self.allow_negative_crop}, '
                f'bbox_clip_border={self.bbox_clip_border})')
