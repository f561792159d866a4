"""EfficientNet (mmdet 2.x's ``EfficientNet``, arch ``b0``..``b8`` and the EdgeTPU ``es`` /
``em`` / ``el``): arguments, defaults, the compound scaling (:func:`model_scaling`) and
state-dict keys ``layers.{i}.{j}.*`` as mmdet's, with exact activation checkpointing.

Checkpoint units: the stem ``layers.0``, every block ``layers.{i}.{j}`` and the last conv
``layers.{n}``; ``with_cp`` sets them all to ``'full'``. Each block's drop path runs inside its
unit; the checkpoint wrapper restores the RNG for the recompute, so the same samples drop.
As in mmdet, stages past ``max(out_indices)`` are not built.
"""
import copy
import math
from functools import partial

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointUnit
from ..utils import (ConvModule, DropPath, InvertedResidual, SELayer, apply_init_cfg,
                     make_divisible)
from ..utils.pretrained import load_pretrained
from ..utils.sequential import Sequential
from .chain import ChainBackbone

__all__ = ['EdgeResidual', 'EfficientNet', 'model_scaling']


class EdgeResidual(nn.Module):
    """mmdet's EdgeTPU block: a full kxk conv (stride 1) to ``mid_channels``, optional SE, a
    1x1 conv with ``stride``; residual through drop path when shapes allow and
    ``with_residual``. ``with_cp`` sets its unit (``cp_unit``)."""

    def __init__(self, in_channels, out_channels, mid_channels, kernel_size=3, stride=1,
                 se_cfg=None, with_residual=True, conv_cfg=None, norm_cfg=dict(type='BN'),
                 act_cfg=dict(type='ReLU'), drop_path_rate=0., with_cp=False,
                 cp_use_reentrant=False, init_cfg=None, **kwargs):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f'EdgeResidual stride must be 1 or 2, got {stride!r}')
        if se_cfg is not None and not isinstance(se_cfg, dict):
            raise ValueError(f'se_cfg must be a dict of SELayer arguments or None, got {se_cfg!r}')
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()
        self.with_se = se_cfg is not None
        self.with_residual = stride == 1 and in_channels == out_channels and with_residual
        self.conv1 = ConvModule(in_channels, mid_channels, kernel_size, stride=1,
                                padding=kernel_size // 2, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                                act_cfg=act_cfg)
        if self.with_se:
            self.se = SELayer(**se_cfg)
        self.conv2 = ConvModule(mid_channels, out_channels, 1, stride=stride, padding=0,
                                conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=None)
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    @property
    def with_cp(self):
        return self.cp_unit.mode is not None

    def _inner_forward(self, x):
        out = self.conv1(x)
        if self.with_se:
            out = self.se(out)
        out = self.conv2(out)
        return x + self.drop_path(out) if self.with_residual else out

    def forward(self, x):
        return self.cp_unit(self._inner_forward, x, module=self)


def model_scaling(layer_setting, arch_setting):
    """mmdet's compound scaling: widths times ``arch_setting[0]`` (multiples of 8); the middle
    stages split where the width changes, each run's depth times ``arch_setting[1]`` (ceil,
    repeating its last block), and runs of stride 1 merged back into the stage before."""
    layer_setting = copy.deepcopy(layer_setting)
    for layer_cfg in layer_setting:
        for block_cfg in layer_cfg:
            block_cfg[1] = make_divisible(block_cfg[1] * arch_setting[0], 8)
    split = [layer_setting[0]]
    for layer_cfg in layer_setting[1:-1]:
        starts = [0] + [i + 1 for i in range(len(layer_cfg) - 1)
                        if layer_cfg[i + 1][1] != layer_cfg[i][1]] + [len(layer_cfg)]
        split += [layer_cfg[a:b] for a, b in zip(starts[:-1], starts[1:])]
    split.append(layer_setting[-1])
    merged = [split[0]]
    for i, layer_cfg in enumerate(split[1:-1]):
        num = len(layer_cfg)
        new = int(math.ceil(arch_setting[1] * num))
        run = layer_cfg[:new] if new <= num else \
            copy.deepcopy(layer_cfg) + [layer_cfg[-1]] * (new - num)
        if run[0][3] == 1 and i != 0:
            merged[-1] += run.copy()
        else:
            merged.append(run.copy())
    merged.append(split[-1])
    return merged


@MODELS.register_module()
class EfficientNet(ChainBackbone):
    """EfficientNet backbone, mmdet 2.x arguments.

    Args:
        arch (str): one of :attr:`arch_settings`.
        drop_path_rate (float): stochastic depth, rising linearly from 0 over the blocks.
        out_indices (Sequence[int]): outputs among the stem (0), the stages and the last conv.
        frozen_stages (int): the first ``frozen_stages`` layers (0: none) are frozen.
        conv_cfg (Conv2dAdaptivePadding), norm_cfg (BN, eps 1e-3), act_cfg (Swish),
        norm_eval (False), init_cfg: as mmdet.
        with_cp (bool): ``'full'`` checkpointing of every unit.
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    # kernel, width, se ratio, stride, expand ratio, block type (0 MBConv, 1 EdgeTPU, -1 conv)
    layer_settings = {
        'b': [[[3, 32, 0, 2, 0, -1]],
              [[3, 16, 4, 1, 1, 0]],
              [[3, 24, 4, 2, 6, 0], [3, 24, 4, 1, 6, 0]],
              [[5, 40, 4, 2, 6, 0], [5, 40, 4, 1, 6, 0]],
              [[3, 80, 4, 2, 6, 0], [3, 80, 4, 1, 6, 0], [3, 80, 4, 1, 6, 0],
               [5, 112, 4, 1, 6, 0], [5, 112, 4, 1, 6, 0], [5, 112, 4, 1, 6, 0]],
              [[5, 192, 4, 2, 6, 0], [5, 192, 4, 1, 6, 0], [5, 192, 4, 1, 6, 0],
               [5, 192, 4, 1, 6, 0], [3, 320, 4, 1, 6, 0]],
              [[1, 1280, 0, 1, 0, -1]]],
        'e': [[[3, 32, 0, 2, 0, -1]],
              [[3, 24, 0, 1, 3, 1]],
              [[3, 32, 0, 2, 8, 1], [3, 32, 0, 1, 8, 1]],
              [[3, 48, 0, 2, 8, 1], [3, 48, 0, 1, 8, 1], [3, 48, 0, 1, 8, 1],
               [3, 48, 0, 1, 8, 1]],
              [[5, 96, 0, 2, 8, 0], [5, 96, 0, 1, 8, 0], [5, 96, 0, 1, 8, 0],
               [5, 96, 0, 1, 8, 0], [5, 96, 0, 1, 8, 0], [5, 144, 0, 1, 8, 0],
               [5, 144, 0, 1, 8, 0], [5, 144, 0, 1, 8, 0], [5, 144, 0, 1, 8, 0]],
              [[5, 192, 0, 2, 8, 0], [5, 192, 0, 1, 8, 0]],
              [[1, 1280, 0, 1, 0, -1]]],
    }

    # width factor, depth factor, resolution
    arch_settings = {
        'b0': (1.0, 1.0, 224), 'b1': (1.0, 1.1, 240), 'b2': (1.1, 1.2, 260),
        'b3': (1.2, 1.4, 300), 'b4': (1.4, 1.8, 380), 'b5': (1.6, 2.2, 456),
        'b6': (1.8, 2.6, 528), 'b7': (2.0, 3.1, 600), 'b8': (2.2, 3.6, 672),
        'es': (1.0, 1.0, 224), 'em': (1.0, 1.1, 240), 'el': (1.2, 1.4, 300),
    }

    def __init__(self, arch='b0', drop_path_rate=0., out_indices=(6, ), frozen_stages=0,
                 conv_cfg=dict(type='Conv2dAdaptivePadding'),
                 norm_cfg=dict(type='BN', eps=1e-3), act_cfg=dict(type='Swish'),
                 norm_eval=False, with_cp=False, cp_use_reentrant=False,
                 init_cfg=[dict(type='Kaiming', layer='Conv2d'),
                           dict(type='Constant', layer=['_BatchNorm', 'GroupNorm'], val=1)]):
        super().__init__()
        if arch not in self.arch_settings:
            raise ValueError(f'"{arch}" is not one of the arch_settings '
                             f'({", ".join(self.arch_settings)})')
        if not isinstance(with_cp, bool):
            raise ValueError(f'EfficientNet with_cp must be a bool, got {with_cp!r}')
        if not 0 <= drop_path_rate < 1:
            raise ValueError(f'drop_path_rate must be in [0, 1), got {drop_path_rate!r}')
        self.arch_setting = self.arch_settings[arch]
        num_layers = len(self.layer_settings[arch[:1]])
        out_indices = self._check_out_indices(out_indices, num_layers, unit='layer',
                                              units='layers: stem, stages, last conv')
        if isinstance(frozen_stages, bool) or not isinstance(frozen_stages, int) \
                or not 0 <= frozen_stages <= num_layers:
            raise ValueError(f'frozen_stages must be an int in 0..{num_layers}, '
                             f'got {frozen_stages!r}')
        self.drop_path_rate = drop_path_rate
        self.out_indices = out_indices
        self.frozen_stages = frozen_stages
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.norm_eval = norm_eval
        self.init_cfg = init_cfg
        self.layer_setting = model_scaling(self.layer_settings[arch[:1]], self.arch_setting)
        first, last = self.layer_setting[0][0], self.layer_setting[-1][0]
        self.in_channels = make_divisible(first[1], 8)
        self.out_channels = last[1]
        self.layers = nn.ModuleList()
        self.layers.append(ConvModule(3, self.in_channels, first[0], stride=first[3],
                                      padding=first[0] // 2, conv_cfg=conv_cfg,
                                      norm_cfg=norm_cfg, act_cfg=act_cfg))
        self.make_layer(with_cp, cp_use_reentrant)
        if len(self.layers) < max(self.out_indices) + 1:
            self.layers.append(ConvModule(self.in_channels, self.out_channels, last[0],
                                          stride=last[3], padding=last[0] // 2,
                                          conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                                          act_cfg=act_cfg))
        self._make_units(with_cp, cp_use_reentrant)
        apply_init_cfg(self, init_cfg)
        self._freeze_stages()

    def make_layer(self, with_cp=False, cp_use_reentrant=False):
        """The stages up to ``max(out_indices)``, as mmdet builds them."""
        settings = self.layer_setting[1:-1]
        total = sum(len(x) for x in settings)
        dpr = [x.item() for x in torch.linspace(0, self.drop_path_rate, total, device='cpu')]
        index = 0
        for i, layer_cfg in enumerate(settings):
            if i > max(self.out_indices) - 1:
                break
            blocks = []
            for j, (kernel, out_channels, se_ratio, stride, expand_ratio, block_type) \
                    in enumerate(layer_cfg):
                mid = int(self.in_channels * expand_ratio)
                out_channels = make_divisible(out_channels, 8)
                block = InvertedResidual
                if block_type == 1:  # EdgeTPU
                    with_residual = not (j > 0 and expand_ratio == 3)
                    if not with_residual:
                        expand_ratio = 4
                    mid = int(self.in_channels * expand_ratio)
                    block = partial(EdgeResidual, with_residual=with_residual)
                se_cfg = None if se_ratio <= 0 else dict(
                    channels=mid, ratio=expand_ratio * se_ratio,
                    act_cfg=(self.act_cfg, dict(type='Sigmoid')))
                blocks.append(block(
                    in_channels=self.in_channels, out_channels=out_channels, mid_channels=mid,
                    kernel_size=kernel, stride=stride, se_cfg=se_cfg, conv_cfg=self.conv_cfg,
                    norm_cfg=self.norm_cfg, act_cfg=self.act_cfg, drop_path_rate=dpr[index],
                    with_cp=with_cp, cp_use_reentrant=cp_use_reentrant,
                    with_expand_conv=mid != self.in_channels))
                self.in_channels = out_channels
                index += 1
            self.layers.append(Sequential(*blocks))

    def _links(self):
        links = []
        for i, layer in enumerate(self.layers):
            emit = i in self.out_indices
            if isinstance(layer, ConvModule):
                links.append((f'layers.{i}', [layer], emit))
                continue
            for j, block in enumerate(layer):
                links.append((f'layers.{i}.{j}', [block], emit and j == len(layer) - 1))
        return links

    def _frozen_modules(self):
        return list(self.layers[:self.frozen_stages])

    def init_weights(self):
        load_pretrained(self, self.init_cfg if isinstance(self.init_cfg, dict) else None,
                        type(self).__name__)
