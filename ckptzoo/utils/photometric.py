"""mmcv 1.x's photometric image operations (its ``cv2`` backend) that mmdet's AutoAugment
transforms use: ``adjust_color``, ``imequalize``, ``adjust_brightness``, ``adjust_contrast``.
Images are BGR ``(h, w, 3)`` arrays; each result has the input's dtype, values clipped to
[0, 255] as mmcv's."""
import cv2
import numpy as np

__all__ = ['adjust_color', 'imequalize', 'adjust_brightness', 'adjust_contrast']


def _gray(img):
    return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)


def adjust_color(img, alpha=1, beta=None, gamma=0):
    """``img * alpha + gray(img) * beta + gamma`` (``beta`` defaults to ``1 - alpha``), with
    OpenCV's ``addWeighted`` (saturating for uint8)."""
    gray = np.tile(_gray(img)[..., None], [1, 1, 3])
    out = cv2.addWeighted(img, alpha, gray, 1 - alpha if beta is None else beta, gamma)
    if out.dtype != np.uint8:
        out = np.clip(out, 0, 255)
    return out.astype(img.dtype)


def _equalize_channel(channel):
    """PIL's ``ImageOps.equalize`` of one channel, as mmcv computes it."""
    histo = np.histogram(channel, 256, (0, 255))[0]
    nonzero = histo[histo > 0]
    step = (np.sum(nonzero) - nonzero[-1]) // 255
    if not step:
        return channel
    lut = (np.cumsum(histo) + (step // 2)) // step
    lut = np.concatenate([[0], lut[:-1]], 0)
    lut[lut > 255] = 255
    return lut[channel]


def imequalize(img):
    """Histogram equalisation of each channel on its own (an integer image: mmcv fails on
    others with an indexing error; this says why)."""
    if not np.issubdtype(img.dtype, np.integer):
        raise TypeError(f'imequalize needs an integer (uint8) image, got {img.dtype}')
    return np.stack([_equalize_channel(img[:, :, c]) for c in range(3)],
                    axis=-1).astype(img.dtype)


def adjust_brightness(img, factor=1.0):
    """Blend with a black image: ``img * factor`` in float32, clipped."""
    out = cv2.addWeighted(img.astype(np.float32), factor, np.zeros(img.shape, np.float32),
                          1 - factor, 0)
    return np.clip(out, 0, 255).astype(img.dtype)


def adjust_contrast(img, factor=1.0):
    """Blend with the image's mean grey (rounded, in the image's dtype), clipped."""
    gray = _gray(img)
    hist = np.histogram(gray, 256, (0, 255))[0]
    mean = round(np.sum(gray) / np.sum(hist))
    degenerated = (np.ones_like(img[..., 0]) * mean).astype(img.dtype)
    degenerated = np.repeat(degenerated[..., None], 3, axis=-1)
    out = cv2.addWeighted(img.astype(np.float32), factor, degenerated.astype(np.float32),
                          1 - factor, 0)
    return np.clip(out, 0, 255).astype(img.dtype)
