"""mmdet 2.x's YOLOX single-image augmentations: ``RandomAffine`` (rotation, scaling, shear,
translation in one perspective warp) and ``YOLOXHSVRandomAug`` (hue / saturation / value
jitter).

Randomness: both draw from numpy's global generator (mmdet's ``from numpy import random``),
in mmdet's order (the dataset runs each sample under its own seed,
:mod:`ckptzoo.datasets.sample_seed`): for the same generator state the outputs equal mmdet's.
"""
import math

import cv2
import numpy as np
from numpy import random

from ...registry import TRANSFORMS
from .mix_transforms import find_inside_bboxes

__all__ = ['RandomAffine', 'YOLOXHSVRandomAug']


@TRANSFORMS.register_module()
class RandomAffine:
    """Warp the image by ``translate @ shear @ rotate @ scale`` (about the top-left corner,
    as mmdet 2.x: the YOLOX reference centres the image first; kept so mmdet's configs train
    as they did) into ``(h + 2 * border[0], w + 2 * border[1])``, filled with
    ``border_val``. Boxes (``bbox_fields``) become the bounding boxes of their warped
    corners, clipped (``bbox_clip_border``), dropped when outside the output or, with
    ``skip_filter=False``, when smaller than ``min_bbox_size``, shrunk below
    ``min_area_ratio`` or thinner than ``1 / max_aspect_ratio``.

    Args (mmdet's): ``max_rotate_degree`` 10, ``max_translate_ratio`` 0.1,
    ``scaling_ratio_range`` (0.5, 1.5), ``max_shear_degree`` 2, ``border`` (0, 0),
    ``border_val`` (114, 114, 114), ``min_bbox_size`` 2, ``min_area_ratio`` 0.2,
    ``max_aspect_ratio`` 20, ``bbox_clip_border`` True, ``skip_filter`` True.
    """

    def __init__(self, max_rotate_degree=10.0, max_translate_ratio=0.1,
                 scaling_ratio_range=(0.5, 1.5), max_shear_degree=2.0, border=(0, 0),
                 border_val=(114, 114, 114), min_bbox_size=2, min_area_ratio=0.2,
                 max_aspect_ratio=20, bbox_clip_border=True, skip_filter=True):
        if not 0 <= max_translate_ratio <= 1:
            raise ValueError(f'RandomAffine max_translate_ratio must be in [0, 1], got '
                             f'{max_translate_ratio!r}')
        if not 0 < scaling_ratio_range[0] <= scaling_ratio_range[1]:
            raise ValueError(f'RandomAffine scaling_ratio_range must be (lo, hi) with '
                             f'0 < lo <= hi, got {scaling_ratio_range!r}')
        self.max_rotate_degree = max_rotate_degree
        self.max_translate_ratio = max_translate_ratio
        self.scaling_ratio_range = scaling_ratio_range
        self.max_shear_degree = max_shear_degree
        self.border = border
        self.border_val = border_val
        self.min_bbox_size = min_bbox_size
        self.min_area_ratio = min_area_ratio
        self.max_aspect_ratio = max_aspect_ratio
        self.bbox_clip_border = bbox_clip_border
        self.skip_filter = skip_filter

    def __call__(self, results):
        if 'gt_masks' in results:
            raise NotImplementedError('RandomAffine warps boxes only, the results have gt_masks')
        img = results['img']
        height = img.shape[0] + self.border[0] * 2
        width = img.shape[1] + self.border[1] * 2
        rotation = random.uniform(-self.max_rotate_degree, self.max_rotate_degree)
        scaling = random.uniform(*self.scaling_ratio_range[:2])
        shear_x = random.uniform(-self.max_shear_degree, self.max_shear_degree)
        shear_y = random.uniform(-self.max_shear_degree, self.max_shear_degree)
        trans_x = random.uniform(-self.max_translate_ratio, self.max_translate_ratio) * width
        trans_y = random.uniform(-self.max_translate_ratio, self.max_translate_ratio) * height
        warp = (self._translation(trans_x, trans_y) @ self._shear(shear_x, shear_y) @
                self._rotation(rotation) @ self._scaling(scaling))
        img = cv2.warpPerspective(img, warp, dsize=(width, height), borderValue=self.border_val)
        results['img'] = img
        results['img_shape'] = img.shape
        for key in results.get('bbox_fields', []):
            bboxes = results[key]
            n = len(bboxes)
            if not n:
                continue
            xs = bboxes[:, [0, 0, 2, 2]].reshape(n * 4)
            ys = bboxes[:, [1, 3, 3, 1]].reshape(n * 4)
            points = warp @ np.vstack([xs, ys, np.ones_like(xs)])
            points = points[:2] / points[2]
            xs, ys = points[0].reshape(n, 4), points[1].reshape(n, 4)
            warped = np.vstack((xs.min(1), ys.min(1), xs.max(1), ys.max(1))).T
            if self.bbox_clip_border:
                warped[:, [0, 2]] = warped[:, [0, 2]].clip(0, width)
                warped[:, [1, 3]] = warped[:, [1, 3]].clip(0, height)
            keep = find_inside_bboxes(warped, height, width)
            if not self.skip_filter:
                keep = keep & self.filter_gt_bboxes(bboxes * scaling, warped)
            results[key] = warped[keep]
            if key == 'gt_bboxes' and 'gt_labels' in results:
                results['gt_labels'] = results['gt_labels'][keep]
        return results

    def filter_gt_bboxes(self, origin_bboxes, wrapped_bboxes):
        """The warped boxes big enough, not shrunk below ``min_area_ratio`` of the scaled
        originals and not thinner than ``1 / max_aspect_ratio``."""
        ow = origin_bboxes[:, 2] - origin_bboxes[:, 0]
        oh = origin_bboxes[:, 3] - origin_bboxes[:, 1]
        ww = wrapped_bboxes[:, 2] - wrapped_bboxes[:, 0]
        wh = wrapped_bboxes[:, 3] - wrapped_bboxes[:, 1]
        aspect = np.maximum(ww / (wh + 1e-16), wh / (ww + 1e-16))
        return ((ww > self.min_bbox_size) & (wh > self.min_bbox_size) &
                (ww * wh / (ow * oh + 1e-16) > self.min_area_ratio) &
                (aspect < self.max_aspect_ratio))

    @staticmethod
    def _rotation(degrees):
        r = math.radians(degrees)
        return np.array([[np.cos(r), -np.sin(r), 0.], [np.sin(r), np.cos(r), 0.],
                         [0., 0., 1.]], dtype=np.float32)

    @staticmethod
    def _scaling(ratio):
        return np.array([[ratio, 0., 0.], [0., ratio, 0.], [0., 0., 1.]], dtype=np.float32)

    @staticmethod
    def _shear(x_degrees, y_degrees):
        return np.array([[1, np.tan(math.radians(x_degrees)), 0.],
                         [np.tan(math.radians(y_degrees)), 1, 0.], [0., 0., 1.]],
                        dtype=np.float32)

    @staticmethod
    def _translation(x, y):
        return np.array([[1, 0., x], [0., 1, y], [0., 0., 1.]], dtype=np.float32)

    def __repr__(self):
        return (f'{self.__class__.__name__}(max_rotate_degree={self.max_rotate_degree}, '
                f'max_translate_ratio={self.max_translate_ratio}, '
                f'scaling_ratio={self.scaling_ratio_range}, '
                f'max_shear_degree={self.max_shear_degree}, border={self.border}, '
                f'border_val={self.border_val}, min_bbox_size={self.min_bbox_size}, '
                f'min_area_ratio={self.min_area_ratio}, '
                f'max_aspect_ratio={self.max_aspect_ratio}, skip_filter={self.skip_filter})')


@TRANSFORMS.register_module()
class YOLOXHSVRandomAug:
    """Each of hue, saturation and value shifted, with probability 1/2 each, by an integer
    gain up to ``hue_delta`` / ``saturation_delta`` / ``value_delta`` (hue wraps at 180,
    the others clip to [0, 255]), in OpenCV's HSV of a BGR ``uint8`` image.

    Args (mmdet's): ``hue_delta`` 5, ``saturation_delta`` 30, ``value_delta`` 30.
    """

    def __init__(self, hue_delta=5, saturation_delta=30, value_delta=30):
        self.hue_delta = hue_delta
        self.saturation_delta = saturation_delta
        self.value_delta = value_delta

    def __call__(self, results):
        img = results['img']
        gains = np.random.uniform(-1, 1, 3) * [self.hue_delta, self.saturation_delta,
                                               self.value_delta]
        gains *= np.random.randint(0, 2, 3)
        gains = gains.astype(np.int16)
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV).astype(np.int16)
        hsv[..., 0] = (hsv[..., 0] + gains[0]) % 180
        hsv[..., 1] = np.clip(hsv[..., 1] + gains[1], 0, 255)
        hsv[..., 2] = np.clip(hsv[..., 2] + gains[2], 0, 255)
        results['img'] = cv2.cvtColor(hsv.astype(img.dtype), cv2.COLOR_HSV2BGR)
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(hue_delta={self.hue_delta}, '
                f'saturation_delta={self.saturation_delta}, value_delta={self.value_delta})')
