"""The geometry of a training pipeline replayed on image sizes, for :mod:`.batch_shapes`.

:class:`_Geometry` follows an image's ``(h, w)`` through the pipeline's ``Resize`` / ``Pad`` /
``RandomFlip`` / ``RandomCrop`` / ``AutoAugment`` steps as
:mod:`ckptzoo.datasets.pipelines` computes them (mmcv's rounding included), drawing what the
transforms draw, in their order, so that a sample's simulated shape is the one the loader
gives it; and gives the largest shape an image can come out at.
"""
from __future__ import annotations

import numpy as np

from .pipelines.transforms import rescale_size
from ..registry import build_transform

Shape = tuple[int, int]

#: transforms that leave an image's height and width as they are
SHAPE_KEEPING = frozenset({'LoadImageFromFile', 'LoadAnnotations', 'RandomFlip', 'Normalize',
                           'DefaultFormatBundle', 'Collect', 'ImageToTensor', 'ToTensor'})

#: AutoAugment's steps: the size stays, but they draw (replayed)
SIZE_KEEPING_DRAWS = frozenset({'ColorTransform', 'BrightnessTransform', 'ContrastTransform',
                                'EqualizeTransform', 'Shear', 'Rotate', 'Translate'})


def _resized(hw: Shape, scale, keep_ratio: bool) -> Shape:
    """``Resize._resize_img``'s output ``(h, w)``: mmcv's ``rescale_size`` (``int(x * f +
    0.5)``) with ``keep_ratio``, else exactly ``scale = (w, h)``."""
    if keep_ratio:
        w, h = rescale_size((hw[1], hw[0]), scale)
        return h, w
    return int(scale[1]), int(scale[0])


def _padded(hw: Shape, pad) -> Shape:
    if pad.pad_to_square:
        return (max(hw),) * 2
    if pad.size is not None:  # Pad raises when the image is larger; the bound stays safe
        return max(hw[0], pad.size[0]), max(hw[1], pad.size[1])
    d = pad.size_divisor
    return -(-hw[0] // d) * d, -(-hw[1] // d) * d


def _extreme_scales(resize) -> list:
    """The scales at which ``resize`` makes an image largest: each of several ``'value'``
    scales (without ``keep_ratio`` one may be the tallest, another the widest), the largest
    long and short edge of ``'range'``, the largest ratio ``ratio_range`` draws (``hi`` is
    never drawn: the ratio is ``random_sample() * (hi - lo) + lo``, ``random_sample() < 1``)."""
    scales = resize.img_scale
    if resize.ratio_range is not None:
        lo, hi = resize.ratio_range
        ratio = float(np.nextafter(1.0, 0.0)) * (hi - lo) + lo
        return [(int(scales[0][0] * ratio), int(scales[0][1] * ratio))]
    if len(scales) == 1 or resize.multiscale_mode == 'value':
        return list(scales)
    return [(max(max(s) for s in scales), max(min(s) for s in scales))]


class _Unmodelled(Exception):
    """A transform whose output size is not modelled (its name is the argument)."""


def _kind_of(cfg) -> str:
    kind = cfg.get('type') if isinstance(cfg, dict) else type(cfg).__name__
    return kind if isinstance(kind, str) else getattr(kind, '__name__', str(kind))


def _finite(resize) -> bool:
    """Whether ``resize`` draws from finitely many scales (all of them enumerated)."""
    return resize.ratio_range is None and (len(resize.img_scale) == 1 or
                                           resize.multiscale_mode == 'value')


class _Geometry:
    """The geometric steps of a training pipeline, replayed on ``(h, w)`` sizes; ``unknown``
    names the first transform that is not modelled (its output size is unknown).

    ``RandomCrop`` is modelled when it keeps crops without boxes (``allow_negative_crop``,
    as DETR's: otherwise the dataset's retry depends on where the boxes lie) and
    ``AutoAugment`` when its policies hold modelled transforms only (its own photometric
    and geometric steps keep the size: only their draws are replayed): a policy is drawn,
    then its steps, exactly as the transforms draw. The worst case enumerates every scale a
    ``Resize`` can draw and the corners of a crop's size range (a keep-ratio ``Resize`` of
    the crop grows with its height and shrinks with its width, and conversely); a crop
    followed by a keep-ratio ``Resize`` after a ``Resize`` of continuous scales is not
    modelled (its worst case is no corner)."""

    def __init__(self, pipeline: list):
        self.unknown = None
        try:
            self.ops, _, _ = self._parse(pipeline, False, False)
        except _Unmodelled as e:
            self.ops, self.unknown = [], e.args[0]
        self.random = self._random(self.ops)

    @classmethod
    def _parse(cls, pipeline, resized, continuous):
        """``(ops, resized, continuous)``: ``continuous`` once a ``Resize`` of continuous
        scales ran, ``resized`` once any did."""
        ops = []
        for cfg in pipeline:
            kind = _kind_of(cfg)
            if kind in SHAPE_KEEPING and kind != 'RandomFlip':
                continue
            if kind in SIZE_KEEPING_DRAWS:
                ops.append(('draws', build_transform(dict(cfg)) if isinstance(cfg, dict)
                            else cfg))
                continue
            if kind not in ('Resize', 'Pad', 'RandomFlip', 'RandomCrop', 'AutoAugment'):
                raise _Unmodelled(kind)
            t = build_transform(dict(cfg)) if isinstance(cfg, dict) else cfg
            if kind == 'Resize' and t.img_scale is not None and (not resized or t.override):
                if continuous and t.keep_ratio and any(op == 'crop' for op, _ in ops):
                    raise _Unmodelled(kind)
                ops.append(('resize', t))
                resized, continuous = True, continuous or not _finite(t)
            elif kind == 'Pad':
                ops.append(('pad', t))
            elif kind == 'RandomFlip':
                ops.append(('flip', t))
            elif kind == 'RandomCrop' and t.allow_negative_crop:
                ops.append(('crop', t))
            elif kind == 'AutoAugment':
                policies = [cls._parse(p.transforms, resized, continuous) for p in t.transforms]
                ops.append(('auto', [p[0] for p in policies]))
                resized = any(p[1] for p in policies)
                continuous = any(p[2] for p in policies)
            else:
                raise _Unmodelled(kind)
        return ops, resized, continuous

    @classmethod
    def _random(cls, ops) -> bool:
        for op, t in ops:
            if op == 'resize' and not (len(t.img_scale) == 1 and t.ratio_range is None):
                return True
            if op == 'crop' and t.crop_type.endswith('_range'):
                return True
            if op == 'auto' and (len(t) > 1 or any(cls._random(p) for p in t)):
                return True
        return False

    def sample(self, index, hw: Shape) -> Shape:
        """The padded ``(h, w)`` the sample ``index`` (a seeded index from the sampler) of
        size ``hw`` comes out at: the pipeline's own draws, replayed in order from numpy's
        global generator seeded as :func:`~ckptzoo.datasets.sample_seed.sample_rng` seeds it
        (the modelled transforms draw from numpy only; :func:`_numpy_kept` restores its
        state afterwards)."""
        seed = getattr(index, 'seed', None)
        if seed is not None:
            np.random.seed([seed & 0xFFFFFFFF, seed >> 32])
        return self._replay(self.ops, hw)

    @classmethod
    def _replay(cls, ops, hw: Shape) -> Shape:
        for op, t in ops:
            if op == 'resize':
                results = {}
                t._random_scale(results)
                hw = _resized(hw, results['scale'], t.keep_ratio)
            elif op == 'pad':
                hw = _padded(hw, t)
            elif op == 'flip':
                t._choose()
            elif op == 'draws':  # AutoAugment's steps: applied when rand() <= prob, and
                # the geometric ones then draw the sign
                if np.random.rand() <= t.prob and hasattr(t, 'random_negative_prob'):
                    np.random.rand()
            elif op == 'crop':
                crop = t._get_crop_size(hw)
                np.random.randint(0, max(hw[0] - crop[0], 0) + 1)  # the window's offsets
                np.random.randint(0, max(hw[1] - crop[1], 0) + 1)
                hw = min(hw[0], crop[0]), min(hw[1], crop[1])
            else:
                hw = cls._replay(t[np.random.choice(len(t))], hw)
        return hw

    def largest(self, hw: Shape) -> Shape:
        """The componentwise largest padded shape of an image of size ``hw``."""
        shapes = self._ends(self.ops, {tuple(hw)})
        return max(s[0] for s in shapes), max(s[1] for s in shapes)

    @classmethod
    def _ends(cls, ops, shapes: set) -> set:
        """The sizes ``ops`` can make of ``shapes`` at which one side is largest."""
        for op, t in ops:
            if op == 'resize':
                shapes = {_resized(hw, s, t.keep_ratio) for hw in shapes
                          for s in _extreme_scales(t)}
            elif op == 'pad':
                shapes = {_padded(hw, t) for hw in shapes}
            elif op == 'crop':
                shapes = {c for hw in shapes for c in _crop_corners(t, hw)}
            elif op == 'auto':
                shapes = set().union(*(cls._ends(p, shapes) for p in t))
        return shapes


def _crop_corners(crop, hw: Shape) -> list:
    """The corners of the ``(h, w)`` range ``crop`` (a ``RandomCrop``) cuts from ``hw``."""
    h, w = hw
    a, b = crop.crop_size
    if crop.crop_type == 'absolute':
        return [(min(a, h), min(b, w))]
    if crop.crop_type == 'relative':
        return [(int(h * a + 0.5), int(w * b + 0.5))]
    if crop.crop_type == 'absolute_range':
        hs, ws = (min(h, a), min(h, b)), (min(w, a), min(w, b))
    else:  # relative_range: the fraction drawn in [low, 1)
        hs, ws = (int(h * np.float32(a) + 0.5), h), (int(w * np.float32(b) + 0.5), w)
    return [(y, x) for y in hs for x in ws]
