"""mmdet 2.x's geometric AutoAugment steps: ``Shear``, ``Rotate``, ``Translate``.

Each, with probability ``prob`` (one ``np.random.rand()``, applied when it is <= ``prob``),
warps the images (border ``img_fill_val``), boxes (the box of the warped corners, clipped to
the image), masks (border 0) and segmentation maps (border ``seg_ignore_label``), then drops
the boxes left without area (with their labels and masks). The magnitude is ``level / 10``
of its maximum, negated when a second ``np.random.rand()`` falls below
``random_negative_prob``. The draws are mmdet's calls in mmdet's order. (mmdet keeps them in
``auto_augment.py``; they sit apart here to keep that module small.) Images, boxes,
polygon masks and maps equal mmdet's; ``Rotate``'s bitmap masks may differ in a pixel on an
edge (each mask is warped on its own here, mmdet warps them stacked, and OpenCV rounds the
two paths differently).
"""
import numbers

import cv2
import numpy as np

from ...registry import TRANSFORMS
from ...utils.geometric import imrotate, imshear, imtranslate

__all__ = ['Shear', 'Rotate', 'Translate']

_MAX_LEVEL = 10
_BBOX2LABEL = {'gt_bboxes': 'gt_labels', 'gt_bboxes_ignore': 'gt_labels_ignore'}
_BBOX2MASK = {'gt_bboxes': 'gt_masks', 'gt_bboxes_ignore': 'gt_masks_ignore'}


def _number(name, what, value, lo=None, hi=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Number) or \
            (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f'{name} {what} must be a number in [{lo}, {hi}], got {value!r}')
    return value


def _fill(name, value):
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        value = (float(value),) * 3
    elif isinstance(value, tuple) and len(value) == 3:
        value = tuple(float(v) for v in value)
    else:
        raise ValueError(f'{name} img_fill_val must be a number or a 3-tuple, got {value!r}')
    if not all(0 <= v <= 255 for v in value):
        raise ValueError(f'{name} img_fill_val must lie in [0, 255], got {value!r}')
    return value


def _direction(name, direction):
    if direction not in ('horizontal', 'vertical'):
        raise ValueError(f"{name} direction must be 'horizontal' or 'vertical', "
                         f'got {direction!r}')
    return direction


def _corners_box(boxes, transform, h, w):
    """The box of ``transform`` (``[n, 4 corners, 2] -> same``) of each box's corners,
    clipped to the image, in the boxes' dtype."""
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    corners = np.stack([np.stack([x1, y1], -1), np.stack([x2, y1], -1),
                        np.stack([x1, y2], -1), np.stack([x2, y2], -1)], 1)
    moved = transform(corners)
    lo_x = np.clip(moved[..., 0].min(1), 0, w)
    lo_y = np.clip(moved[..., 1].min(1), 0, h)
    hi_x = np.clip(moved[..., 0].max(1), lo_x, w)
    hi_y = np.clip(moved[..., 1].max(1), lo_y, h)
    return np.stack([lo_x, lo_y, hi_x, hi_y], -1).astype(boxes.dtype)


def _drop_empty(results, min_size=0):
    for key in results.get('bbox_fields', []):
        boxes = results[key]
        keep = np.nonzero((boxes[:, 2] - boxes[:, 0] > min_size) &
                          (boxes[:, 3] - boxes[:, 1] > min_size))[0]
        results[key] = boxes[keep]
        for other in (_BBOX2LABEL.get(key), _BBOX2MASK.get(key)):
            if other in results:
                results[other] = results[other][keep]
    return results


class _Warp:
    def __init__(self, level, prob, img_fill_val, seg_ignore_label, random_negative_prob):
        name = type(self).__name__
        self.level = _number(name, 'level', level, 0, _MAX_LEVEL)
        self.prob = _number(name, 'prob', prob, 0, 1)
        self.img_fill_val = _fill(name, img_fill_val)
        self.seg_ignore_label = seg_ignore_label
        self.random_negative_prob = random_negative_prob

    def _signed(self, value):
        return -value if np.random.rand() < self.random_negative_prob else value

    def __call__(self, results):
        if np.random.rand() > self.prob:
            return results
        return self._apply(results)

    def __repr__(self):
        return f'{type(self).__name__}(level={self.level}, prob={self.prob})'


@TRANSFORMS.register_module()
class Shear(_Warp):
    """``x' = x + m * y`` (``'horizontal'``) or ``y' = y + m * x``, ``m`` up to
    ``max_shear_magnitude``."""

    def __init__(self, level, img_fill_val=128, seg_ignore_label=255, prob=0.5,
                 direction='horizontal', max_shear_magnitude=0.3, random_negative_prob=0.5,
                 interpolation='bilinear'):
        super().__init__(level, prob, img_fill_val, seg_ignore_label, random_negative_prob)
        self.direction = _direction('Shear', direction)
        if not isinstance(max_shear_magnitude, float) or not 0 <= max_shear_magnitude <= 1:
            raise ValueError(f'Shear max_shear_magnitude must be a float in [0, 1], '
                             f'got {max_shear_magnitude!r}')
        self.max_shear_magnitude = max_shear_magnitude
        self.magnitude = level / _MAX_LEVEL * max_shear_magnitude
        self.interpolation = interpolation

    def _apply(self, results):
        m = self._signed(self.magnitude)
        for key in results.get('img_fields', ['img']):
            img = results[key]
            results[key] = imshear(img, m, self.direction, self.img_fill_val,
                                   self.interpolation).astype(img.dtype)
            results['img_shape'] = results[key].shape
        h, w = results['img_shape'][:2]
        matrix = np.array([[1, m], [0, 1]] if self.direction == 'horizontal'
                          else [[1, 0], [m, 1]], np.float32)
        for key in results.get('bbox_fields', []):
            results[key] = _corners_box(results[key],
                                        lambda c: (c.astype(np.float32) @ matrix.T), h, w)
        for key in results.get('mask_fields', []):
            results[key] = results[key].shear((h, w), m, self.direction, border_value=0,
                                              interpolation=self.interpolation)
        for key in results.get('seg_fields', []):
            seg = results[key]
            results[key] = imshear(seg, m, self.direction, self.seg_ignore_label,
                                   self.interpolation).astype(seg.dtype)
        return _drop_empty(results)


@TRANSFORMS.register_module()
class Rotate(_Warp):
    """Rotate by up to ``max_rotate_angle`` degrees (positive: clockwise) about ``center``
    (default the image centre), scaled by ``scale``."""

    def __init__(self, level, scale=1, center=None, img_fill_val=128, seg_ignore_label=255,
                 prob=0.5, max_rotate_angle=30, random_negative_prob=0.5):
        super().__init__(level, prob, img_fill_val, seg_ignore_label, random_negative_prob)
        self.scale = _number('Rotate', 'scale', scale)
        if isinstance(center, numbers.Number) and not isinstance(center, bool):
            center = (center, center)
        elif center is not None and not (isinstance(center, tuple) and len(center) == 2):
            raise ValueError(f'Rotate center must be None, a number or an (x, y) tuple, '
                             f'got {center!r}')
        self.center = center
        self.max_rotate_angle = _number('Rotate', 'max_rotate_angle', max_rotate_angle)
        self.angle = level / _MAX_LEVEL * max_rotate_angle

    def _apply(self, results):
        h, w = results['img'].shape[:2]
        center = self.center if self.center is not None else ((w - 1) * 0.5, (h - 1) * 0.5)
        angle = self._signed(self.angle)
        for key in results.get('img_fields', ['img']):
            img = results[key]
            results[key] = imrotate(img, angle, center, self.scale,
                                    self.img_fill_val).astype(img.dtype)
            results['img_shape'] = results[key].shape
        h, w = results['img_shape'][:2]
        matrix = cv2.getRotationMatrix2D(center, -angle, self.scale)
        for key in results.get('bbox_fields', []):
            results[key] = _corners_box(
                results[key], lambda c: c @ matrix[:, :2].T + matrix[:, 2], h, w)
        for key in results.get('mask_fields', []):
            results[key] = results[key].rotate((h, w), angle, center, self.scale, 0)
        for key in results.get('seg_fields', []):
            seg = results[key]
            results[key] = imrotate(seg, angle, center, self.scale,
                                    self.seg_ignore_label).astype(seg.dtype)
        return _drop_empty(results)


@TRANSFORMS.register_module()
class Translate(_Warp):
    """Shift by up to ``max_translate_offset`` pixels (``int``); boxes are shifted and
    clipped on the moving sides only (as mmdet), and kept when wider and taller than
    ``min_size``."""

    def __init__(self, level, prob=0.5, img_fill_val=128, seg_ignore_label=255,
                 direction='horizontal', max_translate_offset=250., random_negative_prob=0.5,
                 min_size=0):
        super().__init__(level, prob, img_fill_val, seg_ignore_label, random_negative_prob)
        self.direction = _direction('Translate', direction)
        self.max_translate_offset = _number('Translate', 'max_translate_offset',
                                            max_translate_offset)
        self.offset = int(level / _MAX_LEVEL * max_translate_offset)
        self.min_size = min_size

    def _apply(self, results):
        offset = self._signed(self.offset)
        for key in results.get('img_fields', ['img']):
            img = results[key]
            results[key] = imtranslate(img, offset, self.direction,
                                       self.img_fill_val).astype(img.dtype)
            results['img_shape'] = results[key].shape
        h, w = results['img_shape'][:2]
        for key in results.get('bbox_fields', []):
            boxes = results[key].copy()
            if self.direction == 'horizontal':
                boxes[:, 0] = np.maximum(0, boxes[:, 0] + offset)
                boxes[:, 2] = np.minimum(w, boxes[:, 2] + offset)
            else:
                boxes[:, 1] = np.maximum(0, boxes[:, 1] + offset)
                boxes[:, 3] = np.minimum(h, boxes[:, 3] + offset)
            results[key] = boxes
        for key in results.get('mask_fields', []):
            results[key] = results[key].translate((h, w), offset, self.direction, 0)
        for key in results.get('seg_fields', []):
            seg = results[key]
            results[key] = imtranslate(seg, offset, self.direction,
                                       self.seg_ignore_label).astype(seg.dtype)
        return _drop_empty(results, self.min_size)
