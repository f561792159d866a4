"""Darknet-53 (mmdet 2.x's ``Darknet``, YOLOv3): arguments, defaults and keys ``conv1.*
conv_res_block{i}.conv.* conv_res_block{i}.res{j}.*`` as mmdet's.

Checkpoint units (not an mmdet 2.x feature): ``conv1``, each block's stride-2 conv
``conv_res_block{i}.conv`` and each ResBlock ``conv_res_block{i}.res{j}``; ``with_cp`` sets them
all to ``'full'``. As in mmdet, ``frozen_stages=k`` freezes the first k of ``conv1,
conv_res_block1, ...`` (``out_indices`` count the same way: 0 is ``conv1``).
"""
import torch.nn as nn

from ...registry import MODELS
from ..utils import ConvModule, apply_init_cfg
from ..utils.pretrained import load_pretrained, pretrained_to_init_cfg
from .chain import ChainBackbone

__all__ = ['Darknet', 'ResBlock']

_NORM = dict(type='BN', requires_grad=True)
_ACT = dict(type='LeakyReLU', negative_slope=0.1)


class ResBlock(nn.Module):
    """1x1 conv to half width, 3x3 conv back, plus the input."""

    def __init__(self, in_channels, conv_cfg=None, norm_cfg=_NORM, act_cfg=_ACT, init_cfg=None):
        super().__init__()
        if in_channels % 2:
            raise ValueError(f'ResBlock in_channels must be even, got {in_channels!r}')
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv1 = ConvModule(in_channels, in_channels // 2, 1, **cfg)
        self.conv2 = ConvModule(in_channels // 2, in_channels, 3, padding=1, **cfg)

    def forward(self, x):
        return self.conv2(self.conv1(x)) + x


@MODELS.register_module()
class Darknet(ChainBackbone):
    """Darknet backbone, mmdet 2.x arguments (``depth`` 53; ``out_indices`` (3, 4, 5);
    ``frozen_stages``; ``conv_cfg``, ``norm_cfg``, ``act_cfg`` (LeakyReLU 0.1); ``norm_eval``
    (True); ``pretrained`` / ``init_cfg``); ``with_cp`` / ``cp_use_reentrant`` added."""

    arch_settings = {
        53: ((1, 2, 8, 8, 4), ((32, 64), (64, 128), (128, 256), (256, 512), (512, 1024))),
    }

    def __init__(self, depth=53, out_indices=(3, 4, 5), frozen_stages=-1, conv_cfg=None,
                 norm_cfg=_NORM, act_cfg=_ACT, norm_eval=True, pretrained=None, init_cfg=None,
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if depth not in self.arch_settings:
            raise ValueError(f'invalid depth {depth!r} for darknet: allowed are '
                             f'{", ".join(map(str, self.arch_settings))}')
        if pretrained is not None and not isinstance(pretrained, str):
            raise TypeError(f'pretrained must be a str or None, got {pretrained!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'Darknet with_cp must be a bool, got {with_cp!r}')
        self.depth = depth
        self.layers, self.channels = self.arch_settings[depth]
        num = len(self.layers) + 1
        self.out_indices = self._check_out_indices(out_indices, num,
                                                   units='outputs: conv1 and 5 blocks')
        self._check_frozen_stages(frozen_stages, num)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        if self.init_cfg is None:
            self.init_cfg = [dict(type='Kaiming', layer='Conv2d'),
                             dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])]
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.conv1 = ConvModule(3, 32, 3, padding=1, **cfg)
        self.cr_blocks = ['conv1']
        for i, n_layers in enumerate(self.layers):
            name = f'conv_res_block{i + 1}'
            in_c, out_c = self.channels[i]
            self.add_module(name, self.make_conv_res_block(in_c, out_c, n_layers, **cfg))
            self.cr_blocks.append(name)
        self._make_units(with_cp, cp_use_reentrant)
        apply_init_cfg(self, self.init_cfg)
        self._freeze_stages()

    @staticmethod
    def make_conv_res_block(in_channels, out_channels, res_repeat, conv_cfg=None,
                            norm_cfg=_NORM, act_cfg=_ACT):
        """A stride-2 3x3 conv (``conv``) then ``res_repeat`` ResBlocks (``res{j}``)."""
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        model = nn.Sequential()
        model.add_module('conv', ConvModule(in_channels, out_channels, 3, stride=2, padding=1,
                                            **cfg))
        for idx in range(res_repeat):
            model.add_module(f'res{idx}', ResBlock(out_channels, **cfg))
        return model

    def _links(self):
        links = [('conv1', [self.conv1], 0 in self.out_indices)]
        for i, name in enumerate(self.cr_blocks[1:], 1):
            block = getattr(self, name)
            children = list(block.named_children())
            for j, (child, m) in enumerate(children):
                links.append((f'{name}.{child}', [m],
                              i in self.out_indices and j == len(children) - 1))
        return links

    def _frozen_modules(self):
        return [getattr(self, n) for n in self.cr_blocks[:max(self.frozen_stages, 0)]]

    def init_weights(self):
        load_pretrained(self, self.init_cfg if isinstance(self.init_cfg, dict) else None,
                        type(self).__name__)
