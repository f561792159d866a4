"""Res2Net (mmdet 2.x ``Res2Net``: arguments, state-dict keys) with exact activation checkpointing.

A ResNet-D (deep stem, average-pool downsampling) whose Bottle2neck splits conv1's output into
``scales`` slices of ``width = floor(planes * base_width / base_channels)`` channels: slice i
(i < scales - 1) goes through its own 3x3 conv (``convs.i``, ``bns.i``), after the previous
slice's result was added to it ('normal' blocks) or on its own (the first block of a stage,
'stage'); the last slice passes through (average-pooled in a strided 'stage' block, ``pool``).
Keys as mmdet's checkpoints (``open-mmlab://res2net101_v1d_26w_4s``): ``stem.0 ...
layer1.0.conv1``, ``layer1.0.convs.0``, ``layer1.0.bns.0``, ``layer1.0.conv3``,
``layer1.0.downsample.1``. Stem, freezing, ``norm_eval``, plugins and the checkpoint units
(``stem``, ``layer{i}.{j}``; ``with_cp`` sets them to ``'full'``) are ResNet's.
"""
import math

import torch
import torch.nn as nn

from ...registry import MODELS
from ..utils import build_conv_layer, build_norm_layer
from .resnest import _check_positive_int
from .resnet import Bottleneck as _Bottleneck
from .resnet import ResNet

__all__ = ['Bottle2neck', 'Res2Layer', 'Res2Net']


class Bottle2neck(_Bottleneck):
    """mmdet's Bottle2neck: ResNet's Bottleneck with conv2 / norm2 replaced by the
    ``convs`` / ``bns`` of ``scales - 1`` slices (see the module). Plugins after conv1 / conv2
    see ``width * scales`` channels (mmdet builds them for ``planes`` and then fails)."""

    expansion = 4
    STAGE_TYPES = ('normal', 'stage')

    def __init__(self, inplanes, planes, scales=4, base_width=26, base_channels=64,
                 stage_type='normal', **kwargs):
        _check_positive_int('Bottle2neck', 'scales', scales, minimum=2)
        _check_positive_int('Bottle2neck', 'base_width', base_width)
        if stage_type not in self.STAGE_TYPES:
            raise ValueError(f"Bottle2neck stage_type must be 'normal' or 'stage', "
                             f'got {stage_type!r}')
        super().__init__(inplanes, planes, **kwargs)
        norm_cfg = kwargs.get('norm_cfg', dict(type='BN'))
        conv_cfg = self.conv_cfg
        width = int(math.floor(planes * (base_width / base_channels)))
        conv2_stride = self.conv2.stride[0]
        # replaced in place, then conv2 / norm2 removed: the state-dict order is mmdet's
        self.conv1 = build_conv_layer(conv_cfg, inplanes, width * scales, 1,
                                      stride=self.conv1.stride, bias=False)
        self.add_module(self.norm1_name,
                        build_norm_layer(norm_cfg, width * scales, postfix=1)[1])
        # rebuilt before pool / convs / bns come: the plugins' keys stay where mmdet has them
        self.remove_all_block_plugins()
        self.make_all_block_plugins(width * scales, width * scales)
        if stage_type == 'stage' and conv2_stride != 1:
            self.pool = nn.AvgPool2d(kernel_size=3, stride=conv2_stride, padding=1)
        # each slice's 3x3 conv as ResNet's conv2: ``dcn``'s layer where the stage has one
        self.convs = nn.ModuleList(self._make_conv2(width, conv2_stride, self.dilation)
                                   for _ in range(scales - 1))
        self.bns = nn.ModuleList(build_norm_layer(norm_cfg, width, postfix=i + 1)[1]
                                 for i in range(scales - 1))
        self.conv3 = build_conv_layer(conv_cfg, width * scales, planes * self.expansion, 1,
                                      bias=False)
        self.add_module(self.norm3_name,
                        build_norm_layer(norm_cfg, planes * self.expansion, postfix=3)[1])
        self.stage_type = stage_type
        self.scales = scales
        self.width = width
        self.conv2_stride = conv2_stride
        delattr(self, 'conv2')
        delattr(self, self.norm2_name)

    def _inner_forward(self, x):
        identity = x
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.forward_plugin(out, 'after_conv1')
        spx = torch.split(out, self.width, 1)
        parts = []
        for i in range(self.scales - 1):
            sp = spx[i] if i == 0 or self.stage_type == 'stage' else sp + spx[i]
            sp = self.relu(self.bns[i](self.convs[i](sp.contiguous())))
            parts.append(sp)
        last = spx[self.scales - 1]
        parts.append(self.pool(last) if hasattr(self, 'pool') else last)
        out = self.forward_plugin(torch.cat(parts, 1), 'after_conv2')
        out = self.norm3(self.conv3(out))
        out = self.forward_plugin(out, 'after_conv3')
        if self.downsample is not None:
            identity = self.downsample(x)
        return out + identity


class Res2Layer(nn.Sequential):
    """mmdet's Res2Layer: a stage whose first block is a 'stage' Bottle2neck and whose
    downsample (when the stride or the width changes) always average-pools before its 1x1
    conv (``downsample.0`` pool, ``.1`` conv, ``.2`` norm), whatever ``avg_down`` says (kept
    for the signature, as mmdet)."""

    def __init__(self, block, inplanes, planes, num_blocks, stride=1, avg_down=True,
                 conv_cfg=None, norm_cfg=dict(type='BN'), scales=4, base_width=26,
                 **kwargs):
        self.block = block
        downsample = None
        if stride != 1 or inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.AvgPool2d(kernel_size=stride, stride=stride, ceil_mode=True,
                             count_include_pad=False),
                build_conv_layer(conv_cfg, inplanes, planes * block.expansion, 1, stride=1,
                                 bias=False),
                build_norm_layer(norm_cfg, planes * block.expansion)[1])
        common = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, scales=scales,
                      base_width=base_width, **kwargs)
        blocks = [block(inplanes, planes, stride=stride, downsample=downsample,
                        stage_type='stage', **common)]
        blocks += [block(planes * block.expansion, planes, stride=1, **common)
                   for _ in range(1, num_blocks)]
        super().__init__(*blocks)


@MODELS.register_module()
class Res2Net(ResNet):
    """Res2Net backbone, mmdet 2.x arguments (mmdet's docstring example: 26w x 4s).

    mmdet's Res2Net silently builds ``style='pytorch', deep_stem=True, avg_down=True``
    whatever is given; here another value is refused with an error instead.

    Args:
        scales (int): slices of each block (> 1). Default 4.
        base_width (int): channels per slice at the first stage's width. Default 26.
        **kwargs: :class:`ResNet`'s (``depth`` 50, 101 or 152).
    """

    arch_settings = {
        50: (Bottle2neck, (3, 4, 6, 3)),
        101: (Bottle2neck, (3, 4, 23, 3)),
        152: (Bottle2neck, (3, 8, 36, 3)),
    }

    def __init__(self, scales=4, base_width=26, style='pytorch', deep_stem=True,
                 avg_down=True, pretrained=None, init_cfg=None, **kwargs):
        _check_positive_int('Res2Net', 'scales', scales, minimum=2)
        _check_positive_int('Res2Net', 'base_width', base_width)
        for name, value, allowed in (('style', style, 'pytorch'), ('deep_stem', deep_stem, True),
                                     ('avg_down', avg_down, True)):
            if value != allowed or type(value) is not type(allowed):
                raise ValueError(f'Res2Net is built with {name}={allowed!r} only (mmdet ignores '
                                 f'other values), got {name}={value!r}')
        self.scales = scales
        self.base_width = base_width
        super().__init__(style='pytorch', deep_stem=True, avg_down=True, pretrained=pretrained,
                         init_cfg=init_cfg, **kwargs)

    def make_res_layer(self, **kwargs):
        return Res2Layer(scales=self.scales, base_width=self.base_width,
                         base_channels=self.base_channels, **kwargs)
