"""mmdet's ``CSPLayer`` and ``DarknetBottleneck`` (YOLOX's CSPDarknet and PAFPN): the input
splits into a main path (1x1 conv, bottlenecks) and a short path (1x1 conv), concatenated and
fused by a 1x1 conv. Keys ``main_conv short_conv final_conv blocks.{i}.conv1/conv2``."""
import torch
import torch.nn as nn

from .conv_module import ConvModule
from .depthwise_separable_conv_module import DepthwiseSeparableConvModule

__all__ = ['CSPLayer', 'DarknetBottleneck']

_NORM = dict(type='BN', momentum=0.03, eps=0.001)


class DarknetBottleneck(nn.Module):
    """1x1 conv to ``int(out_channels * expansion)``, 3x3 conv (depthwise separable with
    ``use_depthwise``), plus the input when ``add_identity`` and the widths agree."""

    def __init__(self, in_channels, out_channels, expansion=0.5, add_identity=True,
                 use_depthwise=False, conv_cfg=None, norm_cfg=_NORM, act_cfg=dict(type='Swish'),
                 init_cfg=None):
        super().__init__()
        hidden = int(out_channels * expansion)
        conv = DepthwiseSeparableConvModule if use_depthwise else ConvModule
        self.conv1 = ConvModule(in_channels, hidden, 1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                                act_cfg=act_cfg)
        self.conv2 = conv(hidden, out_channels, 3, stride=1, padding=1, conv_cfg=conv_cfg,
                          norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.add_identity = add_identity and in_channels == out_channels

    def forward(self, x):
        out = self.conv2(self.conv1(x))
        return out + x if self.add_identity else out


class CSPLayer(nn.Module):
    """Cross Stage Partial layer: ``final_conv(cat(blocks(main_conv(x)), short_conv(x)))``,
    both paths ``int(out_channels * expand_ratio)`` wide."""

    def __init__(self, in_channels, out_channels, expand_ratio=0.5, num_blocks=1,
                 add_identity=True, use_depthwise=False, conv_cfg=None, norm_cfg=_NORM,
                 act_cfg=dict(type='Swish'), init_cfg=None):
        super().__init__()
        mid = int(out_channels * expand_ratio)
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.main_conv = ConvModule(in_channels, mid, 1, **cfg)
        self.short_conv = ConvModule(in_channels, mid, 1, **cfg)
        self.final_conv = ConvModule(2 * mid, out_channels, 1, **cfg)
        self.blocks = nn.Sequential(*[
            DarknetBottleneck(mid, mid, 1.0, add_identity, use_depthwise, **cfg)
            for _ in range(num_blocks)])

    def forward(self, x):
        x_short = self.short_conv(x)
        x_main = self.blocks(self.main_conv(x))
        return self.final_conv(torch.cat((x_main, x_short), dim=1))
