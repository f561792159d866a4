"""mmdet 2.x ``ConvUpsample`` (Panoptic FPN's semantic branch): ``num_layers`` 3x3
ConvModules, the first ``num_upsample`` of them each followed by a 2x bilinear upsample.

State-dict keys as mmdet's (``conv.0.conv.weight``, ``conv.0.gn.weight``, ...)."""
import torch.nn as nn
import torch.nn.functional as F

from .conv_module import ConvModule
from .weight_init import apply_init_cfg

__all__ = ['ConvUpsample']


class ConvUpsample(nn.Module):
    """Args as mmdet 2.x: ``in_channels``, ``inner_channels`` (every conv's output),
    ``num_layers`` (default 1), ``num_upsample`` (default ``num_layers``; at most
    ``num_layers``), ``conv_cfg``, ``norm_cfg``, ``init_cfg``; other keyword arguments go to
    each ConvModule."""

    def __init__(self, in_channels, inner_channels, num_layers=1, num_upsample=None,
                 conv_cfg=None, norm_cfg=None, init_cfg=None, **kwargs):
        super().__init__()
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 0:
            raise ValueError(f'ConvUpsample num_layers must be a non-negative int, '
                             f'got {num_layers!r}')
        if num_upsample is None:
            num_upsample = num_layers
        if not isinstance(num_upsample, int) or not 0 <= num_upsample <= num_layers:
            raise ValueError(f'ConvUpsample num_upsample ({num_upsample!r}) must be an int '
                             f'from 0 to num_layers ({num_layers})')
        self.num_layers = num_layers
        self.num_upsample = num_upsample
        self.init_cfg = init_cfg
        self.conv = nn.ModuleList()
        for _ in range(num_layers):
            self.conv.append(ConvModule(in_channels, inner_channels, 3, padding=1, stride=1,
                                        conv_cfg=conv_cfg, norm_cfg=norm_cfg, **kwargs))
            in_channels = inner_channels
        apply_init_cfg(self, init_cfg)

    def forward(self, x):
        for i, conv in enumerate(self.conv):
            x = conv(x)
            if i < self.num_upsample:
                x = F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False)
        return x
