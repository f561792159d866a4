"""MobileNetV2 (mmdet 2.x's ``MobileNetV2``: arguments, defaults, widths and state-dict keys
``conv1.* layer{i}.{j}.* conv2.*``) with exact activation checkpointing.

Checkpoint units: ``conv1``, every InvertedResidual ``layer{i}.{j}`` and ``conv2``; ``with_cp``
sets them all to ``'full'`` (mmdet checkpoints only the blocks). Fix over mmdet:
``frozen_stages >= 0`` also puts ``conv1``'s BatchNorm in eval mode (mmdet stops its gradient
but lets its running statistics move). Layers past the last of ``out_indices`` do not run
(mmdet runs them and discards their outputs, e.g. ``conv2`` under ``out_indices=(2, 4, 6)``:
only their BN statistics move; no gradient reaches them either way).
"""
import torch.nn as nn

from ...registry import MODELS
from ..utils import ConvModule, InvertedResidual, apply_init_cfg, make_divisible
from ..utils.pretrained import load_pretrained, pretrained_to_init_cfg
from .chain import ChainBackbone

__all__ = ['MobileNetV2']

_DEFAULT_INIT = [dict(type='Kaiming', layer='Conv2d'),
                 dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])]


@MODELS.register_module()
class MobileNetV2(ChainBackbone):
    """MobileNetV2 backbone, mmdet 2.x arguments.

    Args:
        widen_factor (float): width multiplier (channels rounded to multiples of 8).
        out_indices (Sequence[int]): outputs among the 7 stages (0..6) and ``conv2`` (7).
        frozen_stages (int): -1 none; 0 ``conv1``; k: ``conv1`` and ``layer1..k``.
        conv_cfg, norm_cfg (BN), act_cfg (ReLU6), norm_eval (False): as mmdet.
        with_cp (bool): ``'full'`` checkpointing of every unit.
        cp_use_reentrant (bool): torch's reentrant checkpoint.
        pretrained / init_cfg: as mmdet (default: Kaiming convs, unit norms).
    """

    arch_settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2],
                     [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]

    def __init__(self, widen_factor=1., out_indices=(1, 2, 4, 7), frozen_stages=-1,
                 conv_cfg=None, norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU6'),
                 norm_eval=False, with_cp=False, cp_use_reentrant=False, pretrained=None,
                 init_cfg=None):
        super().__init__()
        if pretrained is not None and not isinstance(pretrained, str):
            raise TypeError(f'pretrained must be a str or None, got {pretrained!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'MobileNetV2 with_cp must be a bool, got {with_cp!r}')
        self.init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        if self.init_cfg is None:
            self.init_cfg = _DEFAULT_INIT
        self.out_indices = self._check_out_indices(out_indices, 8, units='outputs: 7 stages '
                                                   'and conv2')
        self._check_frozen_stages(frozen_stages, 7)
        self.widen_factor = widen_factor
        self.frozen_stages = frozen_stages
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.norm_eval = norm_eval
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.in_channels = make_divisible(32 * widen_factor, 8)
        self.conv1 = ConvModule(3, self.in_channels, 3, stride=2, padding=1, **cfg)
        self.layers = []
        for i, (expand_ratio, channel, num_blocks, stride) in enumerate(self.arch_settings):
            out_channels = make_divisible(channel * widen_factor, 8)
            self.add_module(f'layer{i + 1}', self.make_layer(
                out_channels, num_blocks, stride, expand_ratio, with_cp, cp_use_reentrant))
            self.layers.append(f'layer{i + 1}')
        self.out_channel = int(1280 * widen_factor) if widen_factor > 1.0 else 1280
        self.conv2 = ConvModule(self.in_channels, self.out_channel, 1, **cfg)
        self.layers.append('conv2')
        self._make_units(with_cp, cp_use_reentrant)
        apply_init_cfg(self, self.init_cfg)
        self._freeze_stages()

    def make_layer(self, out_channels, num_blocks, stride, expand_ratio, with_cp=False,
                   cp_use_reentrant=False):
        """One stage of InvertedResidual blocks, the first with ``stride``."""
        blocks = []
        for i in range(num_blocks):
            blocks.append(InvertedResidual(
                self.in_channels, out_channels,
                mid_channels=int(round(self.in_channels * expand_ratio)),
                stride=stride if i == 0 else 1, with_expand_conv=expand_ratio != 1,
                conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg, act_cfg=self.act_cfg,
                with_cp=with_cp, cp_use_reentrant=cp_use_reentrant))
            self.in_channels = out_channels
        return nn.Sequential(*blocks)

    def _links(self):
        links = [('conv1', [self.conv1], False)]
        for i, name in enumerate(self.layers):
            layer = getattr(self, name)
            if name == 'conv2':
                links.append(('conv2', [layer], i in self.out_indices))
                continue
            for j, block in enumerate(layer):
                links.append((f'{name}.{j}', [block],
                              i in self.out_indices and j == len(layer) - 1))
        return links

    def _frozen_modules(self):
        stem = [self.conv1] if self.frozen_stages >= 0 else []
        return stem + [getattr(self, f'layer{i}') for i in range(1, self.frozen_stages + 1)]

    def init_weights(self):
        load_pretrained(self, self.init_cfg if isinstance(self.init_cfg, dict) else None,
                        type(self).__name__)
