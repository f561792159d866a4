"""mmdet's ``SELayer`` (squeeze and excitation): keys ``conv1.conv.*`` / ``conv2.conv.*``."""
import torch.nn as nn

from .conv_module import ConvModule

__all__ = ['SELayer']


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
