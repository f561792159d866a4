"""Instance masks as mmdet 2.x holds them: ``BitmapMasks`` and ``PolygonMasks``.

Same names, arguments and results as mmdet 2.28.2's ``mmdet.core.mask.structures`` so a
pipeline or mask head written against mmdet reads these unchanged. Geometry goes through
``ckptzoo.utils.geometric`` (the pipeline's own resize / flip / pad, so a mask moves exactly
as its image does), rasterizing through pycocotools, RoI crops through
``torchvision.ops.roi_align`` (mmcv's ``roi_align`` with ``aligned=True``, adaptive sampling).
"""
import numbers

import cv2
import numpy as np
import pycocotools.mask as mask_utils
import torch
from torchvision.ops import roi_align

from ...utils.geometric import (imflip, impad, imrescale, imresize, imrotate, imshear,
                               imtranslate, rescale_size)

_FLIPS = ('horizontal', 'vertical', 'diagonal')


def _check_flip(direction):
    if direction not in _FLIPS:
        raise ValueError(f'flip_direction must be one of {_FLIPS}, got {direction!r}')


def _crop_box(bbox, height, width):
    """mmdet's crop window: the box clipped to the image, at least 1 pixel wide and high."""
    bbox = np.array(bbox, copy=True)
    if bbox.shape != (4,):
        raise ValueError(f'crop needs one box [x1, y1, x2, y2], got shape {bbox.shape}')
    bbox[0::2] = np.clip(bbox[0::2], 0, width)
    bbox[1::2] = np.clip(bbox[1::2], 0, height)
    x1, y1, x2, y2 = bbox
    return bbox, max(x2 - x1, 1), max(y2 - y1, 1)


def poly2mask(mask_ann, img_h, img_w):
    """One instance's annotation to a ``uint8 (img_h, img_w)`` bitmap (mmdet's
    ``LoadAnnotations._poly2mask``): a list of polygons (merged into one mask), an
    uncompressed RLE dict (list ``counts``) or a compressed RLE dict."""
    if isinstance(mask_ann, list):
        rle = mask_utils.merge(mask_utils.frPyObjects(mask_ann, img_h, img_w))
    elif isinstance(mask_ann, dict) and isinstance(mask_ann.get('counts'), list):
        rle = mask_utils.frPyObjects(mask_ann, img_h, img_w)
    elif isinstance(mask_ann, dict):
        rle = mask_ann
    else:
        raise TypeError(f'a mask annotation must be a list of polygons or an RLE dict, '
                        f'got {type(mask_ann).__name__}')
    return mask_utils.decode(rle)


def polygon_to_bitmap(polygons, height, width):
    """The union of one instance's polygons as a bool ``(height, width)`` bitmap."""
    polygons = [np.asarray(p, dtype=np.float64) for p in polygons]
    if not polygons:
        return np.zeros((height, width), dtype=bool)
    rles = mask_utils.frPyObjects(polygons, height, width)
    return mask_utils.decode(mask_utils.merge(rles)).astype(bool)


def bitmap_to_polygon(bitmap):
    """Contours of a bitmap (cv2 ``RETR_CCOMP``, all points) and whether it has holes."""
    bitmap = np.ascontiguousarray(bitmap).astype(np.uint8)
    contours, hierarchy = cv2.findContours(bitmap, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_NONE)[-2:]
    if hierarchy is None:
        return [], False
    with_hole = bool((hierarchy.reshape(-1, 4)[:, 3] >= 0).any())
    return [c.reshape(-1, 2) for c in contours], with_hole


class BaseInstanceMasks:
    """What both mask kinds share (mmdet 2.x's base class of the same name): ``masks``, one
    per instance, of an image ``height`` x ``width``."""

    def __iter__(self):
        return iter(self.masks)

    def __len__(self):
        return len(self.masks)

    def __repr__(self):
        return (f'{self.__class__.__name__}(num_masks={len(self.masks)}, '
                f'height={self.height}, width={self.width})')


class BitmapMasks(BaseInstanceMasks):
    """``(N, H, W)`` bitmaps, one per instance (mmdet's ``BitmapMasks``)."""

    def __init__(self, masks, height, width):
        self.height = int(height)
        self.width = int(width)
        if len(masks) == 0:
            self.masks = np.empty((0, self.height, self.width), dtype=np.uint8)
            return
        if isinstance(masks, list):
            bad = [i for i, m in enumerate(masks) if not isinstance(m, np.ndarray) or m.ndim != 2]
            if bad:
                raise TypeError(f'BitmapMasks needs a list of (H, W) ndarrays; entry {bad[0]} '
                                f'is not one')
        elif not isinstance(masks, np.ndarray) or masks.ndim != 3:
            raise TypeError(f'BitmapMasks needs an (N, H, W) ndarray or a list of (H, W) '
                            f'ndarrays, got {type(masks).__name__}')
        stacked = np.stack(masks)
        if stacked.shape[1:] != (self.height, self.width):
            raise ValueError(f'masks of shape {stacked.shape[1:]} do not match '
                             f'height={self.height}, width={self.width}')
        self.masks = stacked

    def __getitem__(self, index):
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        return BitmapMasks(self.masks[index].reshape(-1, self.height, self.width),
                           self.height, self.width)


    def _each(self, fn, empty_shape):
        if len(self.masks) == 0:
            return BitmapMasks(np.empty((0, *empty_shape), dtype=np.uint8), *empty_shape)
        out = np.stack([fn(m) for m in self.masks])
        return BitmapMasks(out, *out.shape[1:])

    def rescale(self, scale, interpolation='nearest'):
        """Keep the aspect ratio, as ``imrescale`` scales the image."""
        new_w, new_h = rescale_size((self.width, self.height), scale)
        return self._each(lambda m: imrescale(m, scale, interpolation), (new_h, new_w))

    def resize(self, out_shape, interpolation='nearest'):
        """To exactly ``out_shape=(h, w)``."""
        out_shape = tuple(out_shape)
        return self._each(lambda m: imresize(m, out_shape[::-1], interpolation)[0], out_shape)

    def flip(self, flip_direction='horizontal'):
        _check_flip(flip_direction)
        return self._each(lambda m: imflip(m, flip_direction), (self.height, self.width))

    def pad(self, out_shape, pad_val=0):
        """On the bottom and right, as ``Pad`` pads the image."""
        out_shape = tuple(out_shape)
        return self._each(lambda m: impad(m, out_shape, pad_val), out_shape)

    def crop(self, bbox):
        """The window ``bbox=[x1, y1, x2, y2]`` (integer pixels) clipped to the masks."""
        bbox, w, h = _crop_box(bbox, self.height, self.width)
        if not np.issubdtype(bbox.dtype, np.integer):
            raise TypeError(f'BitmapMasks.crop needs an integer box, got dtype {bbox.dtype}')
        x1, y1 = int(bbox[0]), int(bbox[1])
        w, h = int(w), int(h)
        if len(self.masks) == 0:
            return BitmapMasks(np.empty((0, h, w), dtype=np.uint8), h, w)
        return BitmapMasks(self.masks[:, y1:y1 + h, x1:x1 + w], h, w)

    def crop_and_resize(self, bboxes, out_shape, inds, device='cpu', interpolation='bilinear',
                        binarize=True):
        """Mask targets: the mask ``inds[i]`` inside ``bboxes[i]``, sampled to ``out_shape``
        with RoIAlign (aligned, adaptive sampling, average); ``>= 0.5`` when ``binarize``."""
        out_shape = tuple(out_shape)
        if len(self.masks) == 0:
            return BitmapMasks(np.empty((0, *out_shape), dtype=np.uint8), *out_shape)
        bboxes = torch.as_tensor(bboxes, device=device)
        inds = torch.as_tensor(inds, device=device, dtype=torch.long)
        if bboxes.shape[0] == 0:
            return BitmapMasks([], *out_shape)
        if not bboxes.is_floating_point():
            bboxes = bboxes.float()
        rois = torch.cat([torch.arange(len(bboxes), device=device, dtype=bboxes.dtype)[:, None],
                          bboxes], dim=1)
        masks = torch.from_numpy(self.masks).to(device).index_select(0, inds).to(rois.dtype)
        targets = roi_align(masks[:, None], rois, out_shape, spatial_scale=1.0,
                            sampling_ratio=0, aligned=True).squeeze(1)
        targets = (targets >= 0.5) if binarize else targets
        return BitmapMasks(targets.cpu().numpy(), *out_shape)

    def expand(self, expanded_h, expanded_w, top, left):
        """Place the masks at ``(top, left)`` of a larger zero canvas (``Expand``)."""
        out = np.zeros((len(self), expanded_h, expanded_w), dtype=np.uint8)
        out[:, top:top + self.height, left:left + self.width] = self.masks
        return BitmapMasks(out, expanded_h, expanded_w)

    def _warp(self, out_shape, warp):
        out_shape = tuple(out_shape)
        if len(self.masks) == 0:
            return BitmapMasks(np.empty((0, *out_shape), dtype=np.uint8), *out_shape)
        # cv2 warps no bool arrays: a bool mask is warped as 0/1 uint8
        out = np.stack([warp(m.astype(np.uint8) if m.dtype == bool else m)
                        for m in self.masks]).astype(self.masks.dtype)
        return BitmapMasks(out, *out_shape)

    def translate(self, out_shape, offset, direction='horizontal', fill_val=0,
                  interpolation='bilinear'):
        return self._warp(out_shape, lambda m: imtranslate(m, offset, direction, fill_val,
                                                           interpolation))

    def shear(self, out_shape, magnitude, direction='horizontal', border_value=0,
              interpolation='bilinear'):
        return self._warp(out_shape, lambda m: imshear(m, magnitude, direction, border_value,
                                                       interpolation))

    def rotate(self, out_shape, angle, center=None, scale=1.0, fill_val=0):
        """``angle`` in degrees, positive clockwise (as ``mmcv.imrotate``)."""
        return self._warp(out_shape, lambda m: imrotate(m, angle, center, scale, fill_val))

    @property
    def areas(self):
        return self.masks.sum((1, 2))

    def to_ndarray(self):
        return self.masks

    def to_tensor(self, dtype, device):
        return torch.tensor(self.masks, dtype=dtype, device=device)

    def get_bboxes(self):
        """Tight ``[x1, y1, x2 + 1, y2 + 1]`` boxes; zeros for an empty mask."""
        boxes = np.zeros((len(self), 4), dtype=np.float32)
        x_any, y_any = self.masks.any(axis=1), self.masks.any(axis=2)
        for i in range(len(self)):
            xs, ys = np.nonzero(x_any[i])[0], np.nonzero(y_any[i])[0]
            if len(xs) and len(ys):
                boxes[i] = [xs[0], ys[0], xs[-1] + 1, ys[-1] + 1]
        return boxes


def _as_float(p):
    """A polygon copy that geometry cannot truncate: mmdet edits integer coordinates in
    place, so a crop or a resize of a polygon read as ints rounded toward zero; we keep the
    float result (floats stay in their own dtype)."""
    return p.astype(np.float64) if not np.issubdtype(p.dtype, np.floating) else p.copy()


class PolygonMasks(BaseInstanceMasks):
    """Per instance a list of polygons ``[x0, y0, x1, y1, ...]`` (mmdet's ``PolygonMasks``);
    geometry moves the vertices, pycocotools rasterizes on demand."""

    def __init__(self, masks, height, width):
        if not isinstance(masks, list):
            raise TypeError(f'PolygonMasks needs a list (per instance) of lists of polygons, '
                            f'got {type(masks).__name__}')
        for i, obj in enumerate(masks):
            if not isinstance(obj, list) or not all(isinstance(p, np.ndarray) for p in obj):
                raise TypeError(f'PolygonMasks instance {i} must be a list of 1-D ndarrays, '
                                f'got {obj!r:.80}')
        self.height = int(height)
        self.width = int(width)
        self.masks = masks

    def __getitem__(self, index):
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        if isinstance(index, (numbers.Integral, np.integer)) or \
                (isinstance(index, np.ndarray) and index.ndim == 0):
            return PolygonMasks([self.masks[index]], self.height, self.width)
        if isinstance(index, np.ndarray):
            index = (np.nonzero(index)[0] if index.dtype == bool else index).tolist()
        if isinstance(index, list):
            masks = [self.masks[i] for i in index]
        elif isinstance(index, slice):
            masks = self.masks[index]
        else:
            raise TypeError(f'PolygonMasks index must be an int, a slice, a list or an '
                            f'ndarray, got {type(index).__name__}')
        return PolygonMasks(masks, self.height, self.width)


    def _map(self, fn, height, width):
        return PolygonMasks([[fn(_as_float(p)) for p in obj] for obj in self.masks],
                            height, width)

    def rescale(self, scale, interpolation=None):
        new_w, new_h = rescale_size((self.width, self.height), scale)
        return self.resize((new_h, new_w))

    def resize(self, out_shape, interpolation=None):
        h_scale, w_scale = out_shape[0] / self.height, out_shape[1] / self.width

        def scale(p):
            p[0::2] *= w_scale
            p[1::2] *= h_scale
            return p
        return self._map(scale, *out_shape)

    def flip(self, flip_direction='horizontal'):
        _check_flip(flip_direction)

        def flip(p):
            if flip_direction in ('horizontal', 'diagonal'):
                p[0::2] = self.width - p[0::2]
            if flip_direction in ('vertical', 'diagonal'):
                p[1::2] = self.height - p[1::2]
            return p
        return self._map(flip, self.height, self.width)

    def pad(self, out_shape, pad_val=0):
        """Padding leaves the vertices where they are."""
        return PolygonMasks(self.masks, *out_shape)

    def crop(self, bbox):
        """Shift into the window; pycocotools clips at rasterization."""
        bbox, w, h = _crop_box(bbox, self.height, self.width)
        return self._map(lambda p: _shift(p, -bbox[0], -bbox[1]), h, w)

    def crop_and_resize(self, bboxes, out_shape, inds, device='cpu', interpolation='bilinear',
                        binarize=True):
        """Mask targets as mmdet computes them for polygons: shift each polygon to its box,
        scale the box to ``out_shape``, rasterize later (``to_ndarray``)."""
        out_h, out_w = out_shape
        if not binarize:
            raise ValueError('polygons are always binary; binarize=False is not supported')
        if len(self.masks) == 0:
            return PolygonMasks([], out_h, out_w)
        if isinstance(bboxes, torch.Tensor):
            bboxes = bboxes.cpu().numpy()
        if isinstance(inds, torch.Tensor):
            inds = inds.cpu().numpy()
        resized = []
        for i in range(len(bboxes)):
            x1, y1, x2, y2 = bboxes[i, :]
            w_scale = out_w / max(np.maximum(x2 - x1, 1), 0.1)
            h_scale = out_h / max(np.maximum(y2 - y1, 1), 0.1)
            obj = []
            for p in self.masks[inds[i]]:
                p = _shift(_as_float(p), -x1, -y1)
                p[0::2] *= w_scale
                p[1::2] *= h_scale
                obj.append(p)
            resized.append(obj)
        return PolygonMasks(resized, out_h, out_w)

    def expand(self, expanded_h, expanded_w, top, left):
        """Shift by ``(left, top)`` onto the larger canvas (mmdet leaves this unimplemented)."""
        return self._map(lambda p: _shift(p, left, top), expanded_h, expanded_w)

    def _affine(self, out_shape, matrix):
        out_h, out_w = out_shape

        def apply(p):
            xy = np.stack([p[0::2], p[1::2], np.ones(len(p) // 2)], axis=0)
            new = np.asarray(matrix, dtype=np.float64) @ xy
            p[0::2] = np.clip(new[0], 0, out_w)
            p[1::2] = np.clip(new[1], 0, out_h)
            return p
        return self._map(apply, out_h, out_w)

    def translate(self, out_shape, offset, direction='horizontal', fill_val=None,
                  interpolation=None):
        if fill_val not in (None, 0):
            raise ValueError(f'polygons have no fill value; fill_val must be None or 0, '
                             f'got {fill_val!r}')
        if direction not in ('horizontal', 'vertical'):
            raise ValueError(f"direction must be 'horizontal' or 'vertical', got {direction!r}")
        tx, ty = (offset, 0) if direction == 'horizontal' else (0, offset)
        out_h, out_w = out_shape

        def move(p):  # only the moved axis is clipped, as mmdet does
            if direction == 'horizontal':
                p[0::2] = np.clip(p[0::2] + tx, 0, out_w)
            else:
                p[1::2] = np.clip(p[1::2] + ty, 0, out_h)
            return p
        return self._map(move, out_h, out_w)

    def shear(self, out_shape, magnitude, direction='horizontal', border_value=0,
              interpolation='bilinear'):
        if direction not in ('horizontal', 'vertical'):
            raise ValueError(f"direction must be 'horizontal' or 'vertical', got {direction!r}")
        matrix = ([[1, magnitude, 0], [0, 1, 0]] if direction == 'horizontal'
                  else [[1, 0, 0], [magnitude, 1, 0]])
        return self._affine(out_shape, matrix)

    def rotate(self, out_shape, angle, center=None, scale=1.0, fill_val=0):
        """As ``BitmapMasks.rotate``; ``center`` defaults to the image centre (mmdet's
        polygon version crashes without one)."""
        if center is None:
            center = ((self.width - 1) * 0.5, (self.height - 1) * 0.5)
        matrix = cv2.getRotationMatrix2D(tuple(float(c) for c in center), -angle, scale)
        return self._affine(out_shape, matrix)

    def to_bitmap(self):
        return BitmapMasks(self.to_ndarray(), self.height, self.width)

    @property
    def areas(self):
        """Shoelace areas of the polygons, summed per instance (holes are not subtracted)."""
        return np.asarray([sum(_polygon_area(p[0::2], p[1::2]) for p in obj)
                           for obj in self.masks])

    def to_ndarray(self):
        if len(self.masks) == 0:
            return np.empty((0, self.height, self.width), dtype=np.uint8)
        return np.stack([polygon_to_bitmap(obj, self.height, self.width) for obj in self.masks])

    def to_tensor(self, dtype, device):
        return torch.tensor(self.to_ndarray(), dtype=dtype, device=device)

    def get_bboxes(self):
        boxes = np.zeros((len(self), 4), dtype=np.float32)
        for i, obj in enumerate(self.masks):
            xy_min = np.array([self.width * 2, self.height * 2], dtype=np.float32)
            xy_max = np.zeros(2, dtype=np.float32)
            for p in obj:
                xy = np.asarray(p, dtype=np.float32).reshape(-1, 2)
                xy_min = np.minimum(xy_min, xy.min(axis=0))
                xy_max = np.maximum(xy_max, xy.max(axis=0))
            boxes[i, :2], boxes[i, 2:] = xy_min, xy_max
        return boxes


def _shift(p, dx, dy):
    p[0::2] += dx
    p[1::2] += dy
    return p


def _polygon_area(x, y):
    return 0.5 * np.abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))
