"""mmdet 2.x's ``AutoAugment``: one of several policies (lists of transforms) drawn per sample.

DETR and Deformable DETR draw either a multi-scale ``Resize`` or a ``Resize`` ->
``RandomCrop`` -> ``Resize(override=True)``; the ``Swin`` / ``ConvNeXt`` ``ms-crop`` 3x
schedules likewise. The policy is drawn with mmdet's call (``np.random.choice`` over the
policies: one ``randint(0, len(policies))`` of numpy's global generator), before the policy's
own draws, so under the per-sample generator of :mod:`ckptzoo.datasets.sample_seed` it is a
function of (seed, epoch, index) and with numpy seeded alike it is mmdet's draw.

mmdet's photometric policy steps (``ColorTransform``, ``BrightnessTransform``,
``ContrastTransform``, ``EqualizeTransform``) are here too, its geometric ones (``Shear``,
``Rotate``, ``Translate``) in :mod:`.auto_augment_geometric` (no shipped config names any
of them; users' policies do).
"""
import copy
import numbers

import numpy as np

from ...registry import TRANSFORMS
from ...utils.photometric import adjust_brightness, adjust_color, adjust_contrast, imequalize
from .compose import Compose

__all__ = ['AutoAugment', 'ColorTransform', 'EqualizeTransform', 'BrightnessTransform',
           'ContrastTransform']

_MAX_LEVEL = 10


@TRANSFORMS.register_module()
class AutoAugment:
    """``policies``: a non-empty list of non-empty lists of transform configs (dicts with a
    ``type``). Each call runs one policy, drawn uniformly, its transforms in order; a
    transform returning ``None`` (a ``RandomCrop`` that kept no box) makes the call return
    ``None``, so the dataset draws another image."""

    def __init__(self, policies):
        if not isinstance(policies, (list, tuple)) or not policies:
            raise ValueError(f'AutoAugment policies must be a non-empty list of policies '
                             f'(lists of transform dicts), got {policies!r}')
        for k, policy in enumerate(policies):
            if not isinstance(policy, (list, tuple)) or not policy:
                raise ValueError(f'AutoAugment policies[{k}] must be a non-empty list of '
                                 f'transform dicts, got {policy!r}')
            for t in policy:
                if not isinstance(t, dict) or 'type' not in t:
                    raise ValueError(f'AutoAugment policies[{k}] holds {t!r}: each '
                                     f"transform must be a dict with a 'type'")
        self.policies = copy.deepcopy([list(p) for p in policies])
        self.transforms = [Compose(copy.deepcopy(p)) for p in self.policies]

    def __call__(self, results):
        transform = self.transforms[np.random.choice(len(self.transforms))]
        return transform(results)

    def __repr__(self):
        return f'{type(self).__name__}(policies={self.policies})'


def _check_prob(name, prob):
    if isinstance(prob, bool) or not isinstance(prob, numbers.Number) or not 0 <= prob <= 1:
        raise ValueError(f'{name} prob must be a number in [0, 1], got {prob!r}')


class _LevelTransform:
    """mmdet's photometric AutoAugment steps: with probability ``prob`` (one
    ``np.random.rand()`` drawn, as mmdet's, applied when it is <= ``prob``) every image of
    ``img_fields`` is enhanced by ``factor = level / 10 * 1.8 + 0.1`` (``level`` in
    [0, 10]); boxes, masks and segmentation are unchanged."""

    def __init__(self, level, prob=0.5):
        name = type(self).__name__
        if isinstance(level, bool) or not isinstance(level, numbers.Number) or \
                not 0 <= level <= _MAX_LEVEL:
            raise ValueError(f'{name} level must be a number in [0, {_MAX_LEVEL}], '
                             f'got {level!r}')
        _check_prob(name, prob)
        self.level = level
        self.prob = prob
        self.factor = level / _MAX_LEVEL * 1.8 + 0.1

    def _apply(self, img):
        raise NotImplementedError

    def __call__(self, results):
        if np.random.rand() > self.prob:
            return results
        for key in results.get('img_fields', ['img']):
            img = results[key]
            results[key] = self._apply(img).astype(img.dtype)
        return results

    def __repr__(self):
        return f'{type(self).__name__}(level={self.level}, prob={self.prob})'


@TRANSFORMS.register_module()
class ColorTransform(_LevelTransform):
    """Blend the image with its grey version (mmcv's ``adjust_color``)."""

    def _apply(self, img):
        return adjust_color(img, self.factor)


@TRANSFORMS.register_module()
class BrightnessTransform(_LevelTransform):
    """Blend the image with black (mmcv's ``adjust_brightness``)."""

    def _apply(self, img):
        return adjust_brightness(img, self.factor)


@TRANSFORMS.register_module()
class ContrastTransform(_LevelTransform):
    """Blend the image with its mean grey (mmcv's ``adjust_contrast``)."""

    def _apply(self, img):
        return adjust_contrast(img, self.factor)


@TRANSFORMS.register_module()
class EqualizeTransform:
    """With probability ``prob`` (one ``np.random.rand()``, as mmdet's) equalise each
    channel's histogram (mmcv's ``imequalize``)."""

    def __init__(self, prob=0.5):
        _check_prob('EqualizeTransform', prob)
        self.prob = prob

    def __call__(self, results):
        if np.random.rand() > self.prob:
            return results
        for key in results.get('img_fields', ['img']):
            img = results[key]
            results[key] = imequalize(img).astype(img.dtype)
        return results

    def __repr__(self):
        return f'{type(self).__name__}(prob={self.prob})'
