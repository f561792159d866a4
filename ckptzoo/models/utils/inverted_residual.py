"""mmdet's ``InvertedResidual`` (MobileNetV2, EfficientNet): expand 1x1, depthwise kxk,
optional SE, linear 1x1, residual (through drop path) when shape allows. Keys
``expand_conv.* depthwise_conv.* se.* linear_conv.*`` as mmdet's.

``with_cp`` sets the block's checkpoint unit (``cp_unit``), which owners list and
``set_checkpoint_plan`` changes; the block's drop path runs inside the unit and draws the same
mask in the recompute (the wrapper restores the RNG)."""
import torch.nn as nn

from ..checkpointing import CheckpointUnit
from .conv_module import ConvModule
from .drop import DropPath
from .se_layer import SELayer

__all__ = ['InvertedResidual']


class InvertedResidual(nn.Module):
    """Args as mmdet's: ``in_channels``, ``out_channels``, ``mid_channels`` (the depthwise
    width), ``kernel_size`` (3), ``stride`` (1 or 2), ``se_cfg`` (SELayer kwargs or None),
    ``with_expand_conv`` (False needs ``mid_channels == in_channels``), ``conv_cfg``,
    ``norm_cfg``, ``act_cfg`` (ReLU), ``drop_path_rate``, ``with_cp``; plus
    ``cp_use_reentrant``."""

    def __init__(self, in_channels, out_channels, mid_channels, kernel_size=3, stride=1,
                 se_cfg=None, with_expand_conv=True, conv_cfg=None, norm_cfg=dict(type='BN'),
                 act_cfg=dict(type='ReLU'), drop_path_rate=0., with_cp=False,
                 cp_use_reentrant=False, init_cfg=None):
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f'InvertedResidual stride must be 1 or 2, got {stride!r}')
        if se_cfg is not None and not isinstance(se_cfg, dict):
            raise ValueError(f'se_cfg must be a dict of SELayer arguments or None, got {se_cfg!r}')
        if not with_expand_conv and mid_channels != in_channels:
            raise ValueError(f'without the expand conv mid_channels must equal in_channels '
                             f'({in_channels}), got {mid_channels!r}')
        self.with_res_shortcut = stride == 1 and in_channels == out_channels
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()
        self.with_se = se_cfg is not None
        self.with_expand_conv = with_expand_conv
        if with_expand_conv:
            self.expand_conv = ConvModule(in_channels, mid_channels, 1, conv_cfg=conv_cfg,
                                          norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.depthwise_conv = ConvModule(
            mid_channels, mid_channels, kernel_size, stride=stride, padding=kernel_size // 2,
            groups=mid_channels, conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        if self.with_se:
            self.se = SELayer(**se_cfg)
        self.linear_conv = ConvModule(mid_channels, out_channels, 1, conv_cfg=conv_cfg,
                                      norm_cfg=norm_cfg, act_cfg=None)
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    @property
    def with_cp(self):
        return self.cp_unit.mode is not None

    def _inner_forward(self, x):
        out = self.expand_conv(x) if self.with_expand_conv else x
        out = self.depthwise_conv(out)
        if self.with_se:
            out = self.se(out)
        out = self.linear_conv(out)
        return x + self.drop_path(out) if self.with_res_shortcut else out

    def forward(self, x):
        return self.cp_unit(self._inner_forward, x, module=self)
