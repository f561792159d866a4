"""mmdet 2.x's multi-image transforms, run by :class:`~ckptzoo.datasets.MultiImageMixDataset`:
``Mosaic`` (four images around a random centre) and ``MixUp`` (a second image blended in).

Randomness: both draw from numpy's global generator (mmdet's ``from numpy import random``),
in mmdet's order; the dataset runs each sample under its own seed
(:mod:`ckptzoo.datasets.sample_seed`), so a resumed run draws what the uninterrupted one
did. For the same generator state and the same inputs the partners and outputs equal
mmdet's.
"""
import copy
import numbers

import numpy as np
from numpy import random

from ...registry import TRANSFORMS
from ...utils.geometric import imresize

__all__ = ['Mosaic', 'MixUp', 'find_inside_bboxes']


def find_inside_bboxes(bboxes, img_h, img_w):
    """Boolean mask of the boxes with some part inside the ``img_h x img_w`` image."""
    return (bboxes[:, 0] < img_w) & (bboxes[:, 2] > 0) & (bboxes[:, 1] < img_h) & \
        (bboxes[:, 3] > 0)


def _check_scale(name, img_scale):
    if not (isinstance(img_scale, tuple) and len(img_scale) == 2 and
            all(isinstance(v, numbers.Number) and v > 0 for v in img_scale)):
        raise ValueError(f'{name} img_scale must be a tuple (h, w) of positive numbers, got '
                         f'{img_scale!r}')


def _resize(img, w, h):
    return imresize(img, (w, h))[0]


@TRANSFORMS.register_module()
class Mosaic:
    """Four images (this one top left, three partners) on a ``2h x 2w`` canvas of ``pad_val``,
    each scaled to fit ``img_scale=(h, w)`` and cropped at the centre
    ``(uniform(*center_ratio_range) * w, uniform(*center_ratio_range) * h)``; boxes follow,
    are clipped to the canvas (``bbox_clip_border``) and dropped when outside it, and when
    ``skip_filter=False`` dropped unless wider and taller than ``min_bbox_size``.

    Args (mmdet's): ``img_scale`` (640, 640), ``center_ratio_range`` (0.5, 1.5),
    ``min_bbox_size`` 0, ``bbox_clip_border`` True, ``skip_filter`` True, ``pad_val`` 114,
    ``prob`` 1.0 (the chance to apply it).
    """

    #: images mixed into each item besides its own (the planner's box-count bound)
    num_partners = 3

    def __init__(self, img_scale=(640, 640), center_ratio_range=(0.5, 1.5), min_bbox_size=0,
                 bbox_clip_border=True, skip_filter=True, pad_val=114, prob=1.0):
        _check_scale('Mosaic', img_scale)
        if not 0 <= prob <= 1.0:
            raise ValueError(f'Mosaic prob must be in [0, 1], got {prob!r}')
        self.img_scale = img_scale
        self.center_ratio_range = center_ratio_range
        self.min_bbox_size = min_bbox_size
        self.bbox_clip_border = bbox_clip_border
        self.skip_filter = skip_filter
        self.pad_val = pad_val
        self.prob = prob

    def get_indexes(self, dataset):
        """Three partners, uniform over ``dataset`` (numpy's ``randint`` excludes the high
        end)."""
        return [random.randint(0, len(dataset)) for _ in range(3)]

    def __call__(self, results):
        if random.uniform(0, 1) > self.prob:
            return results
        if 'mix_results' not in results or len(results['mix_results']) != 3:
            raise ValueError('Mosaic needs three partner images in results["mix_results"] '
                             '(run it inside MultiImageMixDataset)')
        h, w = self.img_scale
        img = results['img']
        canvas = np.full((int(h * 2), int(w * 2)) + img.shape[2:3], self.pad_val,
                         dtype=img.dtype)
        center = (int(random.uniform(*self.center_ratio_range) * w),
                  int(random.uniform(*self.center_ratio_range) * h))
        all_bboxes, all_labels = [], []
        patches = [results] + list(results['mix_results'])
        for loc, patch in zip(('top_left', 'top_right', 'bottom_left', 'bottom_right'),
                              patches):
            img_i = patch['img']
            h_i, w_i = img_i.shape[:2]
            ratio = min(h / h_i, w / w_i)
            img_i = _resize(img_i, int(w_i * ratio), int(h_i * ratio))
            (x1p, y1p, x2p, y2p), (x1c, y1c, x2c, y2c) = self._mosaic_combine(
                loc, center, img_i.shape[1::-1])
            canvas[y1p:y2p, x1p:x2p] = img_i[y1c:y2c, x1c:x2c]
            bboxes = patch['gt_bboxes'].copy()
            if bboxes.shape[0] > 0:
                bboxes[:, 0::2] = ratio * bboxes[:, 0::2] + (x1p - x1c)
                bboxes[:, 1::2] = ratio * bboxes[:, 1::2] + (y1p - y1c)
            all_bboxes.append(bboxes)
            all_labels.append(patch['gt_labels'])
        bboxes = np.concatenate(all_bboxes, 0)
        labels = np.concatenate(all_labels, 0)
        if self.bbox_clip_border:
            bboxes[:, 0::2] = np.clip(bboxes[:, 0::2], 0, 2 * w)
            bboxes[:, 1::2] = np.clip(bboxes[:, 1::2], 0, 2 * h)
        if not self.skip_filter:
            keep = ((bboxes[:, 2] - bboxes[:, 0] > self.min_bbox_size) &
                    (bboxes[:, 3] - bboxes[:, 1] > self.min_bbox_size))
            bboxes, labels = bboxes[keep], labels[keep]
        inside = find_inside_bboxes(bboxes, 2 * h, 2 * w)
        results['img'] = canvas
        results['img_shape'] = canvas.shape
        results['gt_bboxes'] = bboxes[inside]
        results['gt_labels'] = labels[inside]
        return results

    def _mosaic_combine(self, loc, center, size_wh):
        """``(paste box on the canvas, crop box in the patch)`` of one corner."""
        cx, cy = center
        pw, ph = size_wh
        W, H = self.img_scale[1] * 2, self.img_scale[0] * 2
        if loc == 'top_left':
            x1, y1, x2, y2 = max(cx - pw, 0), max(cy - ph, 0), cx, cy
            crop = pw - (x2 - x1), ph - (y2 - y1), pw, ph
        elif loc == 'top_right':
            x1, y1, x2, y2 = cx, max(cy - ph, 0), min(cx + pw, W), cy
            crop = 0, ph - (y2 - y1), min(pw, x2 - x1), ph
        elif loc == 'bottom_left':
            x1, y1, x2, y2 = max(cx - pw, 0), cy, cx, min(H, cy + ph)
            crop = pw - (x2 - x1), 0, pw, min(y2 - y1, ph)
        else:
            x1, y1, x2, y2 = cx, cy, min(cx + pw, W), min(H, cy + ph)
            crop = 0, 0, min(pw, x2 - x1), min(y2 - y1, ph)
        return (x1, y1, x2, y2), crop

    def __repr__(self):
        return (f'{self.__class__.__name__}(img_scale={self.img_scale}, '
                f'center_ratio_range={self.center_ratio_range}, pad_val={self.pad_val}, '
                f'min_bbox_size={self.min_bbox_size}, skip_filter={self.skip_filter}, '
                f'prob={self.prob})')


@TRANSFORMS.register_module()
class MixUp:
    """A partner image with boxes, fitted into ``img_scale=(h, w)`` (padded with
    ``pad_val``), scaled by ``uniform(*ratio_range)``, flipped with ``flip_ratio``, randomly
    cropped to this image's size, and averaged with it (``0.5 * a + 0.5 * b``); its boxes
    are appended. A partner without boxes leaves the sample unchanged (as mmdet).

    Args (mmdet's): ``img_scale`` (640, 640), ``ratio_range`` (0.5, 1.5), ``flip_ratio``
    0.5, ``pad_val`` 114, ``max_iters`` 15 (tries to find a partner with boxes),
    ``min_bbox_size`` 5, ``min_area_ratio`` 0.2, ``max_aspect_ratio`` 20,
    ``bbox_clip_border`` True, ``skip_filter`` True.
    """

    #: images mixed into each item besides its own (the planner's box-count bound)
    num_partners = 1

    def __init__(self, img_scale=(640, 640), ratio_range=(0.5, 1.5), flip_ratio=0.5,
                 pad_val=114, max_iters=15, min_bbox_size=5, min_area_ratio=0.2,
                 max_aspect_ratio=20, bbox_clip_border=True, skip_filter=True):
        _check_scale('MixUp', img_scale)
        if not (isinstance(max_iters, int) and max_iters > 0):
            raise ValueError(f'MixUp max_iters must be a positive int, got {max_iters!r}')
        self.dynamic_scale = img_scale
        self.ratio_range = ratio_range
        self.flip_ratio = flip_ratio
        self.pad_val = pad_val
        self.max_iters = max_iters
        self.min_bbox_size = min_bbox_size
        self.min_area_ratio = min_area_ratio
        self.max_aspect_ratio = max_aspect_ratio
        self.bbox_clip_border = bbox_clip_border
        self.skip_filter = skip_filter

    def get_indexes(self, dataset):
        """One partner, uniform over ``dataset``; up to ``max_iters`` tries to find one with
        boxes (the last try is kept either way)."""
        for _ in range(self.max_iters):
            index = random.randint(0, len(dataset))
            if len(dataset.get_ann_info(index)['bboxes']) != 0:
                break
        return index

    def __call__(self, results):
        if 'mix_results' not in results or len(results['mix_results']) != 1:
            raise ValueError('MixUp needs one partner image in results["mix_results"] (run it '
                             'inside MultiImageMixDataset)')
        partner = copy.copy(results['mix_results'][0])
        if partner['gt_bboxes'].shape[0] == 0:
            return results
        src = partner['img']
        jit = random.uniform(*self.ratio_range)
        flip = random.uniform(0, 1) < self.flip_ratio
        h, w = self.dynamic_scale
        out = np.ones((h, w) + src.shape[2:3], dtype=src.dtype) * self.pad_val
        ratio = min(h / src.shape[0], w / src.shape[1])
        src = _resize(src, int(src.shape[1] * ratio), int(src.shape[0] * ratio))
        out[:src.shape[0], :src.shape[1]] = src
        ratio *= jit
        out = _resize(out, int(out.shape[1] * jit), int(out.shape[0] * jit))
        if flip:
            out = out[:, ::-1]
        img = results['img']
        src_h, src_w = out.shape[:2]
        dst_h, dst_w = img.shape[:2]
        padded = np.zeros((max(src_h, dst_h), max(src_w, dst_w), 3)).astype(np.uint8)
        padded[:src_h, :src_w] = out
        y_off = random.randint(0, padded.shape[0] - dst_h) if padded.shape[0] > dst_h else 0
        x_off = random.randint(0, padded.shape[1] - dst_w) if padded.shape[1] > dst_w else 0
        cropped = padded[y_off:y_off + dst_h, x_off:x_off + dst_w]

        bboxes = partner['gt_bboxes'].copy()
        bboxes[:, 0::2] = bboxes[:, 0::2] * ratio
        bboxes[:, 1::2] = bboxes[:, 1::2] * ratio
        if self.bbox_clip_border:
            bboxes[:, 0::2] = np.clip(bboxes[:, 0::2], 0, src_w)
            bboxes[:, 1::2] = np.clip(bboxes[:, 1::2], 0, src_h)
        if flip:
            bboxes[:, 0::2] = src_w - bboxes[:, 0::2][:, ::-1]
        shifted = bboxes.copy()
        shifted[:, 0::2] -= x_off
        shifted[:, 1::2] -= y_off
        if self.bbox_clip_border:
            shifted[:, 0::2] = np.clip(shifted[:, 0::2], 0, dst_w)
            shifted[:, 1::2] = np.clip(shifted[:, 1::2], 0, dst_h)
        mixed = 0.5 * img.astype(np.float32) + 0.5 * cropped.astype(np.float32)
        labels = partner['gt_labels']
        if not self.skip_filter:
            keep = self._filter_box_candidates(bboxes.T, shifted.T)
            labels, shifted = labels[keep], shifted[keep]
        all_bboxes = np.concatenate((results['gt_bboxes'], shifted), axis=0)
        all_labels = np.concatenate((results['gt_labels'], labels), axis=0)
        inside = find_inside_bboxes(all_bboxes, dst_h, dst_w)
        results['img'] = mixed.astype(np.uint8)
        results['img_shape'] = mixed.shape
        results['gt_bboxes'] = all_bboxes[inside]
        results['gt_labels'] = all_labels[inside]
        return results

    def _filter_box_candidates(self, bbox1, bbox2):
        """Boxes (``bbox2``, after) big enough, not shrunk below ``min_area_ratio`` of
        ``bbox1`` (before, scaled) and not thinner than ``1 / max_aspect_ratio``."""
        w1, h1 = bbox1[2] - bbox1[0], bbox1[3] - bbox1[1]
        w2, h2 = bbox2[2] - bbox2[0], bbox2[3] - bbox2[1]
        ar = np.maximum(w2 / (h2 + 1e-16), h2 / (w2 + 1e-16))
        return ((w2 > self.min_bbox_size) & (h2 > self.min_bbox_size) &
                (w2 * h2 / (w1 * h1 + 1e-16) > self.min_area_ratio) &
                (ar < self.max_aspect_ratio))

    def __repr__(self):
        return (f'{self.__class__.__name__}(dynamic_scale={self.dynamic_scale}, '
                f'ratio_range={self.ratio_range}, flip_ratio={self.flip_ratio}, '
                f'pad_val={self.pad_val}, max_iters={self.max_iters}, '
                f'min_bbox_size={self.min_bbox_size}, min_area_ratio={self.min_area_ratio}, '
                f'max_aspect_ratio={self.max_aspect_ratio}, skip_filter={self.skip_filter})')
