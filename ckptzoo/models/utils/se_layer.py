"""mmdet's ``SELayer`` (squeeze and excitation): keys ``conv1.conv.*`` / ``conv2.conv.*``."""
import torch
import torch.nn as nn

from .conv_module import ConvModule

__all__ = ['SELayer', 'DyReLU']


class SELayer(nn.Module):
    """``x * act2(conv2(act1(conv1(avgpool(x)))))``, the squeeze ``int(channels / ratio)``
    wide; ``act_cfg`` is one dict for both activations or a pair (default ReLU, Sigmoid)."""

    def __init__(self, channels, ratio=16, conv_cfg=None,
                 act_cfg=(dict(type='ReLU'), dict(type='Sigmoid')), init_cfg=None):
        super().__init__()
        if isinstance(act_cfg, dict):
            act_cfg = (act_cfg, act_cfg)
        if not (isinstance(act_cfg, (list, tuple)) and len(act_cfg) == 2
                and all(isinstance(a, dict) for a in act_cfg)):
            raise ValueError(f'SELayer act_cfg must be a dict or two dicts, got {act_cfg!r}')
        squeeze = int(channels / ratio)
        self.global_avgpool = nn.AdaptiveAvgPool2d(1)
        self.conv1 = ConvModule(channels, squeeze, 1, conv_cfg=conv_cfg, act_cfg=act_cfg[0])
        self.conv2 = ConvModule(squeeze, channels, 1, conv_cfg=conv_cfg, act_cfg=act_cfg[1])

    def forward(self, x):
        return x * self.conv2(self.conv1(self.global_avgpool(x)))


class DyReLU(nn.Module):
    """mmdet's ``DyReLU`` (dynamic ReLU, Chen et al. 2020, as DyHead's task attention):
    ``max(x * a1 + b1, x * a2 + b2)`` with the four per-channel coefficients predicted from
    the global average of ``x`` (``conv1`` / ``conv2`` ConvModules, ``channels / ratio``
    wide, activations ``act_cfg``: one dict or a pair, default ReLU and HSigmoid(3, 6))."""

    def __init__(self, channels, ratio=4, conv_cfg=None,
                 act_cfg=(dict(type='ReLU'), dict(type='HSigmoid', bias=3.0, divisor=6.0)),
                 init_cfg=None):
        super().__init__()
        if isinstance(act_cfg, dict):
            act_cfg = (act_cfg, act_cfg)
        if len(act_cfg) != 2 or not all(isinstance(c, dict) for c in act_cfg):
            raise ValueError(f'DyReLU act_cfg must be a dict or a pair of dicts, got {act_cfg!r}')
        self.channels = channels
        self.expansion = 4  # a1, b1, a2, b2
        self.global_avgpool = nn.AdaptiveAvgPool2d(1)
        self.conv1 = ConvModule(channels, int(channels / ratio), 1, stride=1,
                                conv_cfg=conv_cfg, act_cfg=act_cfg[0])
        self.conv2 = ConvModule(int(channels / ratio), channels * self.expansion, 1, stride=1,
                                conv_cfg=conv_cfg, act_cfg=act_cfg[1])
        self.init_cfg = init_cfg

    def forward(self, x):
        coeffs = self.conv2(self.conv1(self.global_avgpool(x))) - 0.5  # in [-0.5, 0.5]
        a1, b1, a2, b2 = coeffs.split(self.channels, dim=1)
        return torch.max(x * (a1 * 2.0 + 1.0) + b1, x * (a2 * 2.0) + b2)
