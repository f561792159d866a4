"""mmdet 2.x's SSD augmentations: ``PhotoMetricDistortion``, ``Expand``, ``MinIoURandomCrop``.

Every random number is drawn from numpy's global generator, in mmdet's order and with mmdet's
calls (``randint(2)``, ``uniform``, ``permutation(3)``, ``choice``): under the per-sample
generator of :mod:`ckptzoo.datasets.sample_seed` a sample's augmentation is then a function of
(seed, epoch, index), so a resumed run draws what the uninterrupted one drew, and with numpy
seeded alike the draws are mmdet's own (but see MinIoURandomCrop's fix). (mmdet keeps these in
``transforms.py``; they sit in their own module here, as that file is shared and near its
size limit.)
"""
import cv2
import numpy as np

from ...registry import TRANSFORMS

__all__ = ['PhotoMetricDistortion', 'Expand', 'MinIoURandomCrop']


def _single_image(results, name):
    if 'img_fields' in results and list(results['img_fields']) != ['img']:
        raise ValueError(f"{name} handles one image (img_fields ['img']), got "
                         f"{results['img_fields']!r}")


@TRANSFORMS.register_module()
class PhotoMetricDistortion:
    """SSD's colour distortion of a BGR image (to float32), each step with probability 1/2:
    brightness ``+ U(-brightness_delta, brightness_delta)``; contrast ``* U(contrast_range)``
    (before or after the HSV steps, chosen with probability 1/2); saturation
    ``* U(saturation_range)``; hue ``+ U(-hue_delta, hue_delta)`` degrees (wrapped to
    [0, 360]); a random permutation of the channels. The HSV conversion is OpenCV's on float32
    (as mmcv's ``bgr2hsv``), so the values may leave [0, 255], as in mmdet.
    """

    def __init__(self, brightness_delta=32, contrast_range=(0.5, 1.5),
                 saturation_range=(0.5, 1.5), hue_delta=18):
        for name, pair in (('contrast_range', contrast_range),
                           ('saturation_range', saturation_range)):
            if len(pair) != 2 or pair[0] > pair[1]:
                raise ValueError(f'{name} must be a (low, high) pair, got {pair!r}')
        self.brightness_delta = brightness_delta
        self.contrast_lower, self.contrast_upper = contrast_range
        self.saturation_lower, self.saturation_upper = saturation_range
        self.hue_delta = hue_delta

    def _contrast(self, img):
        if np.random.randint(2):
            img *= np.random.uniform(self.contrast_lower, self.contrast_upper)
        return img

    def __call__(self, results):
        _single_image(results, 'PhotoMetricDistortion')
        img = results['img'].astype(np.float32)
        if np.random.randint(2):
            img += np.random.uniform(-self.brightness_delta, self.brightness_delta)
        contrast_first = np.random.randint(2) == 1
        if contrast_first:
            img = self._contrast(img)
        img = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
        if np.random.randint(2):
            img[..., 1] *= np.random.uniform(self.saturation_lower, self.saturation_upper)
        if np.random.randint(2):
            img[..., 0] += np.random.uniform(-self.hue_delta, self.hue_delta)
            img[..., 0][img[..., 0] > 360] -= 360
            img[..., 0][img[..., 0] < 0] += 360
        img = cv2.cvtColor(img, cv2.COLOR_HSV2BGR)
        if not contrast_first:
            img = self._contrast(img)
        if np.random.randint(2):
            img = img[..., np.random.permutation(3)]
        results['img'] = img
        return results

    def __repr__(self):
        return (f'{type(self).__name__}(brightness_delta={self.brightness_delta}, '
                f'contrast_range={(self.contrast_lower, self.contrast_upper)}, '
                f'saturation_range={(self.saturation_lower, self.saturation_upper)}, '
                f'hue_delta={self.hue_delta})')


@TRANSFORMS.register_module()
class Expand:
    """SSD's zoom out: with probability ``prob`` the image is placed at a random position of a
    canvas ``U(ratio_range)`` times larger filled with ``mean`` (given RGB and stored BGR when
    ``to_rgb``, cast to the image's dtype); boxes are shifted, masks placed alike, segmentation
    maps padded with ``seg_ignore_label``.

    Fix over mmdet: ``img_shape`` becomes the canvas's (mmdet left the old one for the next
    transform, e.g. a ``RandomFlip`` without a ``Resize``, to flip the boxes in).
    """

    def __init__(self, mean=(0, 0, 0), to_rgb=True, ratio_range=(1, 4), seg_ignore_label=None,
                 prob=0.5):
        if len(ratio_range) != 2 or not 1 <= ratio_range[0] <= ratio_range[1]:
            raise ValueError(f'ratio_range must be a (low, high) pair with 1 <= low <= high, '
                             f'got {ratio_range!r}')
        self.to_rgb = to_rgb
        self.ratio_range = ratio_range
        self.mean = mean[::-1] if to_rgb else mean
        self.min_ratio, self.max_ratio = ratio_range
        self.seg_ignore_label = seg_ignore_label
        self.prob = prob

    def __call__(self, results):
        if np.random.uniform(0, 1) > self.prob:
            return results
        _single_image(results, 'Expand')
        img = results['img']
        h, w, c = img.shape
        ratio = np.random.uniform(self.min_ratio, self.max_ratio)
        out_h, out_w = int(h * ratio), int(w * ratio)
        canvas = np.full((out_h, out_w, c), self.mean, dtype=img.dtype)
        left = int(np.random.uniform(0, w * ratio - w))
        top = int(np.random.uniform(0, h * ratio - h))
        canvas[top:top + h, left:left + w] = img
        results['img'] = canvas
        results['img_shape'] = canvas.shape
        for key in results.get('bbox_fields', []):
            results[key] = results[key] + np.tile((left, top), 2).astype(results[key].dtype)
        for key in results.get('mask_fields', []):
            results[key] = results[key].expand(out_h, out_w, top, left)
        for key in results.get('seg_fields', []):
            if self.seg_ignore_label is None:
                raise ValueError(f'Expand needs seg_ignore_label to pad {key!r}')
            seg = np.full((out_h, out_w), self.seg_ignore_label, dtype=results[key].dtype)
            seg[top:top + h, left:left + w] = results[key]
            results[key] = seg
        return results

    def __repr__(self):
        return (f'{type(self).__name__}(mean={self.mean}, to_rgb={self.to_rgb}, '
                f'ratio_range={self.ratio_range}, seg_ignore_label={self.seg_ignore_label}, '
                f'prob={self.prob})')


def _patch_ious(patch, boxes):
    """IoU of one patch with each box, float32 as mmdet's numpy ``bbox_overlaps``."""
    patch = patch.astype(np.float32)
    boxes = boxes.astype(np.float32)
    area1 = (patch[2] - patch[0]) * (patch[3] - patch[1])
    area2 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    iw = np.maximum(np.minimum(patch[2], boxes[:, 2]) - np.maximum(patch[0], boxes[:, 0]), 0)
    ih = np.maximum(np.minimum(patch[3], boxes[:, 3]) - np.maximum(patch[1], boxes[:, 1]), 0)
    overlap = iw * ih
    return overlap / np.maximum(area1 + area2 - overlap, np.float32(1e-6))


def _centres_inside(boxes, patch):
    centre = (boxes[:, :2] + boxes[:, 2:]) / 2
    return ((centre[:, 0] > patch[0]) * (centre[:, 1] > patch[1]) *
            (centre[:, 0] < patch[2]) * (centre[:, 1] < patch[3]))


@TRANSFORMS.register_module()
class MinIoURandomCrop:
    """SSD's random crop: draw a mode from ``(1, *min_ious, 0)``; 1 keeps the image, otherwise
    up to 50 tries of a patch ``U(min_crop_size, 1)`` times the image's sides with aspect in
    [1/2, 2] whose IoU with every box is at least the mode and that holds some box centre;
    none found, the next mode is drawn. Boxes whose centre lies outside the patch are dropped
    (with their labels and masks), the rest clipped to it (``bbox_clip_border``) and shifted.

    Fixes over mmdet: the patch's left and top are ``U(0, w - new_w)`` and ``U(0, h - new_h)``
    (mmdet called ``uniform(w - new_w)``, numpy's *low*: positions in [1, w - new_w)); an image
    without boxes gets its masks and segmentation cropped with it (mmdet cropped only the
    image). Each try draws as mmdet's does (same calls, same order), but with the left / top
    values differing a try may be taken where mmdet's was not: the crops are mmdet's in
    distribution, not draw for draw (with mmdet's call patched to ``uniform(0, w - new_w)``
    they are identical, draw for draw).
    """

    BBOX2LABEL = {'gt_bboxes': 'gt_labels', 'gt_bboxes_ignore': 'gt_labels_ignore'}
    BBOX2MASK = {'gt_bboxes': 'gt_masks', 'gt_bboxes_ignore': 'gt_masks_ignore'}

    def __init__(self, min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3,
                 bbox_clip_border=True):
        if not 0 < min_crop_size <= 1:
            raise ValueError(f'min_crop_size must be in (0, 1], got {min_crop_size!r}')
        self.min_ious = min_ious
        self.sample_mode = (1, *min_ious, 0)
        self.min_crop_size = min_crop_size
        self.bbox_clip_border = bbox_clip_border

    def _try_patch(self, w, h, boxes, min_iou):
        new_w = np.random.uniform(self.min_crop_size * w, w)
        new_h = np.random.uniform(self.min_crop_size * h, h)
        if new_h / new_w < 0.5 or new_h / new_w > 2:
            return None
        left = np.random.uniform(0, w - new_w)
        top = np.random.uniform(0, h - new_h)
        patch = np.array((int(left), int(top), int(left + new_w), int(top + new_h)))
        if patch[2] == patch[0] or patch[3] == patch[1]:
            return None
        if len(boxes):
            if _patch_ious(patch, boxes).min() < min_iou:
                return None
            if not _centres_inside(boxes, patch).any():
                return None
        return patch

    def __call__(self, results):
        _single_image(results, 'MinIoURandomCrop')
        if 'bbox_fields' not in results:
            raise ValueError('MinIoURandomCrop needs results["bbox_fields"] (LoadAnnotations '
                             'sets it)')
        img = results['img']
        boxes = np.concatenate([results[k] for k in results['bbox_fields']] or
                               [np.zeros((0, 4), np.float32)], 0).reshape(-1, 4)
        h, w = img.shape[:2]
        while True:
            mode = np.random.choice(self.sample_mode)
            self.mode = mode
            if mode == 1:
                return results
            for _ in range(50):
                patch = self._try_patch(w, h, boxes, mode)
                if patch is not None:
                    return self._crop(results, patch)

    def _crop(self, results, patch):
        for key in results.get('bbox_fields', []):
            boxes = results[key].copy()
            inside = _centres_inside(boxes, patch)
            boxes = boxes[inside]
            if self.bbox_clip_border:
                boxes[:, 2:] = boxes[:, 2:].clip(max=patch[2:])
                boxes[:, :2] = boxes[:, :2].clip(min=patch[:2])
            boxes -= np.tile(patch[:2], 2).astype(boxes.dtype)
            results[key] = boxes
            label_key = self.BBOX2LABEL.get(key)
            if label_key in results:
                results[label_key] = results[label_key][inside]
            mask_key = self.BBOX2MASK.get(key)
            if mask_key in results:
                results[mask_key] = results[mask_key][inside.nonzero()[0]].crop(patch)
        img = results['img'][patch[1]:patch[3], patch[0]:patch[2]]
        results['img'] = img
        results['img_shape'] = img.shape
        for key in results.get('seg_fields', []):
            results[key] = results[key][patch[1]:patch[3], patch[0]:patch[2]]
        return results

    def __repr__(self):
        return (f'{type(self).__name__}(min_ious={self.min_ious}, '
                f'min_crop_size={self.min_crop_size}, '
                f'bbox_clip_border={self.bbox_clip_border})')
