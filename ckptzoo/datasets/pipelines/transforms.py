"""Geometric and photometric transforms with mmdet 2.x names, arguments and semantics.

Images are HWC numpy arrays; boxes are float32 ``[n, 4]`` x1y1x2y2 arrays listed in
``results['bbox_fields']``. Sizes follow mmcv's conventions: ``img_scale``/``scale`` is
``(w, h)`` (or ``(long, short)`` when keeping the ratio), shapes are ``(h, w, c)``.
"""
import numbers

import numpy as np

from ...registry import TRANSFORMS
from ...utils.geometric import INTERP_CODES as _INTERP
from ...utils.geometric import (imflip, impad, impad_to_multiple, imrescale,  # noqa: F401
                                imresize, rescale_size)


def _is_scale(s):
    return isinstance(s, tuple) and len(s) == 2 and all(isinstance(v, numbers.Number) for v in s)


@TRANSFORMS.register_module()
class Resize:
    """mmdet 2.x ``Resize``.

    ``img_scale`` is a ``(w, h)`` tuple or a list of them. With one scale (and no
    ``ratio_range``) that scale is used; with several, ``multiscale_mode='range'`` samples the
    long and short edges uniformly between them (exactly two scales), ``'value'`` picks one.
    ``ratio_range=(lo, hi)`` multiplies the single scale by a uniform ratio. With
    ``keep_ratio`` the image is scaled so its long edge <= max(scale) and short edge <=
    min(scale); otherwise it is resized to exactly ``scale``. ``results['scale_factor']`` is
    ``np.float32 [w_scale, h_scale, w_scale, h_scale]``; boxes are multiplied by it and, with
    ``bbox_clip_border``, clipped to the image; masks (``mask_fields``) follow the image. A
    ``results['scale']`` set beforehand (by ``MultiScaleFlipAug``) wins over ``img_scale``
    unless ``override``; a float ``results['scale_factor']`` set beforehand scales the image
    by that factor.
    """

    def __init__(self, img_scale=None, multiscale_mode='range', ratio_range=None, keep_ratio=True,
                 bbox_clip_border=True, backend='cv2', interpolation='bilinear', override=False):
        if img_scale is None:
            self.img_scale = None
        else:
            self.img_scale = list(img_scale) if isinstance(img_scale, list) else [img_scale]
            self.img_scale = [tuple(s) if isinstance(s, list) else s for s in self.img_scale]
            bad = [s for s in self.img_scale if not _is_scale(s)]
            if bad:
                raise TypeError(f'img_scale must be a (w, h) tuple or a list of them, '
                                f'got {img_scale!r}')
        if multiscale_mode not in ('range', 'value'):
            raise ValueError(f"multiscale_mode must be 'range' or 'value', got {multiscale_mode!r}")
        if ratio_range is not None:
            if self.img_scale is None or len(self.img_scale) != 1:
                raise ValueError(f'ratio_range needs exactly one img_scale, got {img_scale!r}')
            if len(ratio_range) != 2 or ratio_range[0] > ratio_range[1]:
                raise ValueError(f'ratio_range must be (min, max), got {ratio_range!r}')
        if backend not in ('cv2', 'pillow'):
            raise ValueError(f"backend must be 'cv2' or 'pillow', got {backend!r}")
        if interpolation not in _INTERP:
            raise ValueError(f'interpolation must be one of {sorted(_INTERP)}, '
                             f'got {interpolation!r}')
        self.multiscale_mode = multiscale_mode
        self.ratio_range = ratio_range
        self.keep_ratio = keep_ratio
        self.bbox_clip_border = bbox_clip_border
        self.interpolation = interpolation
        self.override = override

    @staticmethod
    def random_select(img_scales):
        idx = np.random.randint(len(img_scales))
        return img_scales[idx], idx

    @staticmethod
    def random_sample(img_scales):
        if len(img_scales) != 2:
            raise ValueError(f"multiscale_mode='range' needs exactly 2 scales, got {img_scales!r}")
        longs = [max(s) for s in img_scales]
        shorts = [min(s) for s in img_scales]
        long_edge = np.random.randint(min(longs), max(longs) + 1)
        short_edge = np.random.randint(min(shorts), max(shorts) + 1)
        return (long_edge, short_edge), None

    @staticmethod
    def random_sample_ratio(img_scale, ratio_range):
        lo, hi = ratio_range
        ratio = np.random.random_sample() * (hi - lo) + lo
        return (int(img_scale[0] * ratio), int(img_scale[1] * ratio)), None

    def _random_scale(self, results):
        if self.img_scale is None:
            raise ValueError('Resize has no img_scale and results has no scale or scale_factor; '
                             'set img_scale or put Resize inside MultiScaleFlipAug')
        if self.ratio_range is not None:
            scale, idx = self.random_sample_ratio(self.img_scale[0], self.ratio_range)
        elif len(self.img_scale) == 1:
            scale, idx = self.img_scale[0], 0
        elif self.multiscale_mode == 'range':
            scale, idx = self.random_sample(self.img_scale)
        else:
            scale, idx = self.random_select(self.img_scale)
        results['scale'] = scale
        results['scale_idx'] = idx

    def _resize_img(self, results):
        for key in results.get('img_fields', ['img']):
            img = results[key]
            h, w = img.shape[:2]
            if self.keep_ratio:
                new_img = imrescale(img, results['scale'], self.interpolation)
                new_h, new_w = new_img.shape[:2]
                w_scale, h_scale = new_w / w, new_h / h
            else:
                new_img, w_scale, h_scale = imresize(img, results['scale'], self.interpolation)
            results[key] = new_img
            results['img_shape'] = new_img.shape
            # pad_shape is reset here and updated by Pad.
            results['pad_shape'] = new_img.shape
            results['scale_factor'] = np.array([w_scale, h_scale, w_scale, h_scale],
                                                dtype=np.float32)
            results['keep_ratio'] = self.keep_ratio

    def _resize_bboxes(self, results):
        for key in results.get('bbox_fields', []):
            bboxes = results[key] * results['scale_factor']
            if self.bbox_clip_border:
                h, w = results['img_shape'][:2]
                bboxes[:, 0::2] = np.clip(bboxes[:, 0::2], 0, w)
                bboxes[:, 1::2] = np.clip(bboxes[:, 1::2], 0, h)
            results[key] = bboxes.astype(np.float32)

    def _resize_masks(self, results):
        """As mmdet: ``rescale`` by ``results['scale']`` when keeping the ratio (the image's
        own rule, so masks and image agree), else ``resize`` to ``img_shape``."""
        for key in results.get('mask_fields', []):
            if results[key] is None:
                continue
            if self.keep_ratio:
                results[key] = results[key].rescale(results['scale'])
            else:
                results[key] = results[key].resize(results['img_shape'][:2])

    def _resize_seg(self, results):
        """Semantic maps (``seg_fields``), nearest neighbour: rescaled by ``scale`` when
        keeping the ratio, else resized to it (as mmdet)."""
        for key in results.get('seg_fields', []):
            if self.keep_ratio:
                results[key] = imrescale(results[key], results['scale'], 'nearest')
            else:
                results[key] = imresize(results[key], results['scale'], 'nearest')[0]

    def __call__(self, results):
        if 'scale' not in results:
            if 'scale_factor' in results:
                factor = results['scale_factor']
                if not isinstance(factor, numbers.Number):
                    raise TypeError(f'a preset scale_factor must be a float, got {factor!r}')
                h, w = results['img'].shape[:2]
                results['scale'] = (int(w * factor), int(h * factor))
            else:
                self._random_scale(results)
        else:
            if not self.override:
                if 'scale_factor' in results:
                    raise ValueError('results has both scale and scale_factor set; '
                                     'use Resize(override=True) to resize again')
            else:
                results.pop('scale')
                results.pop('scale_factor', None)
                self._random_scale(results)
        self._resize_img(results)
        self._resize_bboxes(results)
        self._resize_masks(results)
        self._resize_seg(results)
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(img_scale={self.img_scale}, '
                f'multiscale_mode={self.multiscale_mode!r}, ratio_range={self.ratio_range}, '
                f'keep_ratio={self.keep_ratio}, bbox_clip_border={self.bbox_clip_border})')


_DIRECTIONS = ('horizontal', 'vertical', 'diagonal')


@TRANSFORMS.register_module()
class RandomFlip:
    """mmdet 2.x ``RandomFlip``. ``flip_ratio`` is a probability (split evenly over a list of
    directions) or a list of per-direction probabilities. A ``results['flip']`` set beforehand
    (by ``MultiScaleFlipAug``) is obeyed; ``flip_ratio=None`` then means never flip on its own.
    A horizontal flip maps boxes as ``x1' = w - x2, x2' = w - x1``; masks (``mask_fields``)
    flip along."""

    def __init__(self, flip_ratio=None, direction='horizontal'):
        if isinstance(flip_ratio, list):
            if not all(isinstance(r, numbers.Number) for r in flip_ratio) or \
                    not 0 <= sum(flip_ratio) <= 1:
                raise ValueError(f'a list flip_ratio must hold numbers summing to [0, 1], '
                                 f'got {flip_ratio!r}')
        elif isinstance(flip_ratio, numbers.Number):
            if not 0 <= flip_ratio <= 1:
                raise ValueError(f'flip_ratio must be in [0, 1], got {flip_ratio!r}')
        elif flip_ratio is not None:
            raise TypeError(f'flip_ratio must be None, a float or a list of floats, '
                            f'got {flip_ratio!r}')
        dirs = direction if isinstance(direction, list) else [direction]
        bad = [d for d in dirs if d not in _DIRECTIONS]
        if bad:
            raise ValueError(f'direction must be one of {_DIRECTIONS} or a list of them, '
                             f'got {direction!r}')
        if isinstance(flip_ratio, list) and len(flip_ratio) != len(dirs):
            raise ValueError(f'flip_ratio {flip_ratio!r} and direction {direction!r} must have '
                             f'the same length')
        self.flip_ratio = flip_ratio
        self.direction = direction

    @staticmethod
    def bbox_flip(bboxes, img_shape, direction):
        if bboxes.shape[-1] % 4 != 0:
            raise ValueError(f'boxes must have a multiple of 4 columns, got {bboxes.shape}')
        flipped = bboxes.copy()
        h, w = img_shape[:2]
        if direction in ('horizontal', 'diagonal'):
            flipped[..., 0::4] = w - bboxes[..., 2::4]
            flipped[..., 2::4] = w - bboxes[..., 0::4]
        if direction in ('vertical', 'diagonal'):
            flipped[..., 1::4] = h - bboxes[..., 3::4]
            flipped[..., 3::4] = h - bboxes[..., 1::4]
        if direction not in _DIRECTIONS:
            raise ValueError(f'direction must be one of {_DIRECTIONS}, got {direction!r}')
        return flipped

    def _choose(self):
        dirs = list(self.direction) if isinstance(self.direction, list) else [self.direction]
        if self.flip_ratio is None:
            return None
        if isinstance(self.flip_ratio, list):
            probs = list(self.flip_ratio) + [1 - sum(self.flip_ratio)]
        else:
            probs = [self.flip_ratio / len(dirs)] * len(dirs) + [1 - self.flip_ratio]
        idx = np.random.choice(len(dirs) + 1, p=probs)
        return dirs[idx] if idx < len(dirs) else None

    def __call__(self, results):
        cur_dir = None
        if 'flip' not in results:
            cur_dir = self._choose()
            results['flip'] = cur_dir is not None
        if 'flip_direction' not in results:
            results['flip_direction'] = cur_dir
        if results['flip']:
            direction = results['flip_direction']
            for key in results.get('img_fields', ['img']):
                results[key] = imflip(results[key], direction)
            for key in results.get('bbox_fields', []):
                results[key] = self.bbox_flip(results[key], results['img_shape'], direction)
            for key in results.get('mask_fields', []):
                results[key] = results[key].flip(direction)
            for key in results.get('seg_fields', []):
                results[key] = imflip(results[key], direction)
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(flip_ratio={self.flip_ratio})'


@TRANSFORMS.register_module()
class Normalize:
    """``(img - mean) / std`` in float32, after BGR->RGB when ``to_rgb`` (mmcv.imnormalize)."""

    def __init__(self, mean, std, to_rgb=True):
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)
        if np.any(self.std == 0):
            raise ValueError(f'std must not contain 0, got {std!r}')
        self.to_rgb = to_rgb

    def __call__(self, results):
        for key in results.get('img_fields', ['img']):
            img = results[key].astype(np.float32)
            if self.to_rgb:
                img = img[..., ::-1]
            results[key] = np.ascontiguousarray((img - self.mean) / self.std, dtype=np.float32)
        results['img_norm_cfg'] = dict(mean=self.mean, std=self.std, to_rgb=self.to_rgb)
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(mean={self.mean.tolist()}, std={self.std.tolist()}, '
                f'to_rgb={self.to_rgb})')


@TRANSFORMS.register_module()
class Pad:
    """Pad on the bottom/right to a fixed ``size=(h, w)``, to a multiple of ``size_divisor``,
    or to a square; boxes are unchanged; masks (``mask_fields``) are padded to ``pad_shape``
    with ``pad_val['masks']``, semantic maps (``seg_fields``) with ``pad_val['seg']`` (255).
    Sets ``pad_shape``."""

    def __init__(self, size=None, size_divisor=None, pad_to_square=False,
                 pad_val=dict(img=0, masks=0, seg=255)):
        if isinstance(pad_val, numbers.Number):
            pad_val = dict(img=pad_val, masks=pad_val, seg=255)
        if not isinstance(pad_val, dict):
            raise TypeError(f'pad_val must be a number or a dict, got {pad_val!r}')
        if pad_to_square:
            if size is not None or size_divisor is not None:
                raise ValueError('pad_to_square excludes size and size_divisor, got '
                                 f'size={size!r}, size_divisor={size_divisor!r}')
        elif (size is None) == (size_divisor is None):
            raise ValueError(f'exactly one of size and size_divisor must be set, got '
                             f'size={size!r}, size_divisor={size_divisor!r}')
        if size_divisor is not None and (not isinstance(size_divisor, int) or size_divisor <= 0):
            raise ValueError(f'size_divisor must be a positive int, got {size_divisor!r}')
        self.size = tuple(size) if size is not None else None
        self.size_divisor = size_divisor
        self.pad_to_square = pad_to_square
        self.pad_val = pad_val

    def __call__(self, results):
        pad_val = self.pad_val.get('img', 0)
        size = self.size
        for key in results.get('img_fields', ['img']):
            img = results[key]
            if self.pad_to_square:
                size = (max(img.shape[:2]),) * 2
            if size is not None:
                padded = impad(img, size, pad_val)
            else:
                padded = impad_to_multiple(img, self.size_divisor, pad_val)
            results[key] = padded
        results['pad_shape'] = padded.shape
        results['pad_fixed_size'] = size
        results['pad_size_divisor'] = self.size_divisor
        for key in results.get('mask_fields', []):
            results[key] = results[key].pad(results['pad_shape'][:2],
                                            pad_val=self.pad_val.get('masks', 0))
        for key in results.get('seg_fields', []):
            results[key] = impad(results[key], results['pad_shape'][:2],
                                 self.pad_val.get('seg', 255))
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(size={self.size}, size_divisor={self.size_divisor}, '
                f'pad_to_square={self.pad_to_square}, pad_val={self.pad_val})')


@TRANSFORMS.register_module()
class SegRescale:
    """mmdet 2.x ``SegRescale``: the semantic maps (``seg_fields``) rescaled by
    ``scale_factor``, nearest neighbour (HTC's ``1 / 8``: the semantic head's stride)."""

    def __init__(self, scale_factor=1, backend='cv2'):
        if isinstance(scale_factor, bool) or not isinstance(scale_factor, numbers.Number) \
                or scale_factor <= 0:
            raise ValueError(f'SegRescale scale_factor must be a positive number, '
                             f'got {scale_factor!r}')
        if backend not in ('cv2', 'pillow'):
            raise ValueError(f"backend must be 'cv2' or 'pillow', got {backend!r}")
        self.scale_factor = scale_factor
        self.backend = backend

    def __call__(self, results):
        for key in results.get('seg_fields', []):
            if self.scale_factor != 1:
                results[key] = imrescale(results[key], self.scale_factor, 'nearest')
        return results

    def __repr__(self):
        return f'{self.__class__.__name__}(scale_factor={self.scale_factor})'
