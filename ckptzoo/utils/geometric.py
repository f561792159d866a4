"""mmcv.image.geometric's primitives on cv2 / numpy: sizes, resize, rescale, flip, pad.

Shared by the data pipeline (images) and ``ckptzoo.core.mask.structures`` (instance masks), so
both scale, flip and pad a pixel grid the same way. Sizes follow mmcv: ``size``/``scale`` is
``(w, h)`` (or ``(long, short)`` when keeping the ratio), ``shape`` is ``(h, w)``.
"""
import numbers

import cv2
import numpy as np

INTERP_CODES = {
    'nearest': cv2.INTER_NEAREST,
    'bilinear': cv2.INTER_LINEAR,
    'bicubic': cv2.INTER_CUBIC,
    'area': cv2.INTER_AREA,
    'lanczos': cv2.INTER_LANCZOS4,
}


def _scale_size(size, scale):
    w, h = size
    return int(w * float(scale) + 0.5), int(h * float(scale) + 0.5)


def rescale_size(old_size, scale, return_scale=False):
    """mmcv.rescale_size: the ``(w, h)`` that keeps the aspect ratio of ``old_size`` with the
    long edge <= max(scale) and the short edge <= min(scale) (or times a float ``scale``)."""
    w, h = old_size
    if isinstance(scale, numbers.Number) and not isinstance(scale, bool):
        if scale <= 0:
            raise ValueError(f'a scale factor must be positive, got {scale}')
        scale_factor = scale
    elif isinstance(scale, tuple) and len(scale) == 2:
        scale_factor = min(max(scale) / max(h, w), min(scale) / min(h, w))
    else:
        raise TypeError(f'scale must be a number or a tuple of 2 ints, got {scale!r}')
    new_size = _scale_size((w, h), scale_factor)
    return (new_size, scale_factor) if return_scale else new_size


def imresize(img, size, interpolation='bilinear'):
    """Resize to ``size=(w, h)``; returns the image, w_scale and h_scale (as mmcv)."""
    h, w = img.shape[:2]
    if interpolation not in INTERP_CODES:
        raise ValueError(f'interpolation must be one of {sorted(INTERP_CODES)}, '
                         f'got {interpolation!r}')
    out = cv2.resize(img, tuple(int(s) for s in size), interpolation=INTERP_CODES[interpolation])
    if img.ndim == 3 and out.ndim == 2:  # cv2 drops a channel axis of size 1
        out = out[..., None]
    return out, size[0] / w, size[1] / h


def imrescale(img, scale, interpolation='bilinear'):
    h, w = img.shape[:2]
    new_size = rescale_size((w, h), scale)
    return imresize(img, new_size, interpolation)[0]


def imflip(img, direction='horizontal'):
    if direction == 'horizontal':
        return np.flip(img, axis=1).copy()
    if direction == 'vertical':
        return np.flip(img, axis=0).copy()
    if direction == 'diagonal':
        return np.flip(img, axis=(0, 1)).copy()
    raise ValueError(f"direction must be 'horizontal', 'vertical' or 'diagonal', got {direction!r}")


def impad(img, shape, pad_val=0):
    """Pad on the bottom and right to ``shape=(h, w)`` (mmcv.impad, constant mode)."""
    h, w = img.shape[:2]
    if shape[0] < h or shape[1] < w:
        raise ValueError(f'pad shape {tuple(shape)} is smaller than the image {(h, w)}')
    out = np.empty((shape[0], shape[1]) + img.shape[2:], dtype=img.dtype)
    out[...] = pad_val
    out[:h, :w, ...] = img
    return out


def impad_to_multiple(img, divisor, pad_val=0):
    h, w = img.shape[:2]
    return impad(img, (int(np.ceil(h / divisor)) * divisor,
                       int(np.ceil(w / divisor)) * divisor), pad_val)


def _warp_affine(img, matrix, border_value, interpolation):
    if interpolation not in INTERP_CODES:
        raise ValueError(f'interpolation must be one of {sorted(INTERP_CODES)}, '
                         f'got {interpolation!r}')
    h, w = img.shape[:2]
    channels = 1 if img.ndim == 2 else img.shape[2]
    if isinstance(border_value, numbers.Number):
        border_value = (border_value,) * min(channels, 4)
    return cv2.warpAffine(img, np.asarray(matrix, dtype=np.float64), (w, h),
                          flags=INTERP_CODES[interpolation],
                          borderMode=cv2.BORDER_CONSTANT, borderValue=tuple(border_value)[:4])


def _check_direction(direction):
    if direction not in ('horizontal', 'vertical'):
        raise ValueError(f"direction must be 'horizontal' or 'vertical', got {direction!r}")


def imtranslate(img, offset, direction='horizontal', border_value=0, interpolation='bilinear'):
    """mmcv.imtranslate: shift by ``offset`` pixels (positive: right / down), same size."""
    _check_direction(direction)
    tx, ty = (offset, 0) if direction == 'horizontal' else (0, offset)
    return _warp_affine(img, [[1, 0, tx], [0, 1, ty]], border_value, interpolation)


def imshear(img, magnitude, direction='horizontal', border_value=0, interpolation='bilinear'):
    """mmcv.imshear: ``x' = x + magnitude * y`` (horizontal) or ``y' = y + magnitude * x``."""
    _check_direction(direction)
    matrix = ([[1, magnitude, 0], [0, 1, 0]] if direction == 'horizontal'
              else [[1, 0, 0], [magnitude, 1, 0]])
    return _warp_affine(img, matrix, border_value, interpolation)


def imrotate(img, angle, center=None, scale=1.0, border_value=0, interpolation='bilinear'):
    """mmcv.imrotate without auto_bound: ``angle`` in degrees, positive is clockwise (mmcv
    passes ``-angle`` to cv2), about ``center=(x, y)``, by default the image centre."""
    h, w = img.shape[:2]
    if center is None:
        center = ((w - 1) * 0.5, (h - 1) * 0.5)
    matrix = cv2.getRotationMatrix2D(tuple(float(c) for c in center), -angle, scale)
    return _warp_affine(img, matrix, border_value, interpolation)
