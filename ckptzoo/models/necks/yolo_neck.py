"""YOLOv3's neck (mmdet 2.x's ``YOLOV3Neck``): from the deepest feature up, a DetectionBlock
(five convs: 1x1, 3x3 x2, 1x1, 3x3 x2, 1x1) per scale; each shallower scale takes the deeper
scale's output through a 1x1 conv, a 2x nearest upsample and a concat with its backbone
feature. Keys ``detect{i}.conv{j}.* conv{i}.*`` as mmdet's.

Checkpoint units (not an mmdet 2.x feature): ``level{i}``, scale i counted from the deepest
(the order of the outputs): its 1x1 conv, upsample, concat and DetectionBlock; one chain (the
state: the deeper scale's output). ``with_cp`` sets them all to ``'full'``.
"""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule

__all__ = ['DetectionBlock', 'YOLOV3Neck']

_NORM = dict(type='BN', requires_grad=True)
_ACT = dict(type='LeakyReLU', negative_slope=0.1)


class DetectionBlock(nn.Module):
    """Five ConvModules: 1x1 to ``out_channels``, 3x3 to twice that, 1x1, 3x3, 1x1."""

    def __init__(self, in_channels, out_channels, conv_cfg=None, norm_cfg=_NORM, act_cfg=_ACT,
                 init_cfg=None):
        super().__init__()
        double = out_channels * 2
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv1 = ConvModule(in_channels, out_channels, 1, **cfg)
        self.conv2 = ConvModule(out_channels, double, 3, padding=1, **cfg)
        self.conv3 = ConvModule(double, out_channels, 1, **cfg)
        self.conv4 = ConvModule(out_channels, double, 3, padding=1, **cfg)
        self.conv5 = ConvModule(double, out_channels, 1, **cfg)

    def forward(self, x):
        return self.conv5(self.conv4(self.conv3(self.conv2(self.conv1(x)))))


@MODELS.register_module()
class YOLOV3Neck(CheckpointOwnerMixin, nn.Module):
    """YOLOV3Neck, mmdet 2.x arguments: ``num_scales``, ``in_channels`` and ``out_channels``
    (one per scale, deepest first), ``conv_cfg``, ``norm_cfg`` (BN), ``act_cfg`` (LeakyReLU
    0.1); ``with_cp`` / ``cp_use_reentrant`` added. Inputs come shallow to deep (the
    backbone's order); outputs deep to shallow."""

    def __init__(self, num_scales, in_channels, out_channels, conv_cfg=None, norm_cfg=_NORM,
                 act_cfg=_ACT, init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not num_scales == len(in_channels) == len(out_channels):
            raise ValueError(f'in_channels and out_channels need num_scales ({num_scales}) '
                             f'entries, got {in_channels!r}, {out_channels!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'YOLOV3Neck with_cp must be a bool, got {with_cp!r}')
        self.num_scales = num_scales
        self.in_channels = in_channels
        self.out_channels = out_channels
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.detect1 = DetectionBlock(in_channels[0], out_channels[0], **cfg)
        for i in range(1, num_scales):
            in_c, out_c = in_channels[i], out_channels[i]
            self.add_module(f'conv{i}', ConvModule(out_channels[i - 1], out_c, 1, **cfg))
            self.add_module(f'detect{i + 1}', DetectionBlock(in_c + out_c, out_c, **cfg))
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_scales)]

    def _modules_of(self, i):
        return [getattr(self, f'detect{i + 1}')] + ([getattr(self, f'conv{i}')] if i else [])

    def _checkpoint_steps(self, feats=None):
        """One chain, deepest scale first; ``feats``: the backbone features (None: the
        description alone)."""
        return [[ChainStep(f'level{i}', self.level_units[i], partial(self._level_step, i),
                           self._modules_of(i), leaves=True,
                           args=() if feats is None else (feats[-1 - i], ))
                 for i in range(self.num_scales)]]

    def _level_step(self, i, deeper, feat):
        args = (feat, ) if i == 0 else (feat, deeper)
        out = self.level_units[i](partial(self._level, i), *args, module=self._modules_of(i))
        return out, out

    def _level(self, i, feat, deeper=None):
        if i == 0:
            return self.detect1(feat)
        up = F.interpolate(getattr(self, f'conv{i}')(deeper), scale_factor=2)
        return getattr(self, f'detect{i + 1}')(torch.cat((up, feat), 1))

    def forward(self, feats):
        if len(feats) != self.num_scales:
            raise ValueError(f'YOLOV3Neck expects {self.num_scales} inputs (num_scales), '
                             f'got {len(feats)}')
        return tuple(self._run_chain(self._checkpoint_steps(feats)[0], None)[1])

    def init_weights(self):
        """mmdet gives no init_cfg: the ConvModules keep their Kaiming init."""
