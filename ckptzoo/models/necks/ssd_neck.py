"""SSD's extra layers (mmdet 2.x's ``SSDNeck``, since 2.18 where SSDVGG's extras moved): the
backbone features pass through (the first L2-normalised when ``l2_norm_scale``), then each
extra level is a 1x1 conv to half width and a strided kxk conv (depthwise separable with
``use_depthwise``: SSDLite). Keys ``l2_norm.weight extra_layers.{i}.{0,1}.*`` as mmdet's.

Checkpoint units (not an mmdet 2.x feature): ``level0`` (the L2 norm) and every extra level
``level{k}`` (k counts the outputs); the extra levels are one chain. ``with_cp`` sets them all
to ``'full'``.
"""

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import ConvModule, DepthwiseSeparableConvModule, apply_init_cfg

__all__ = ['L2Norm', 'SSDNeck']


class L2Norm(nn.Module):
    """Per-position L2 normalisation over channels times a learned per-channel ``weight``
    (initialised to ``scale`` by SSDNeck's init_cfg), computed in float32 as mmdet does."""

    def __init__(self, n_dims, scale=20., eps=1e-10):
        super().__init__()
        self.n_dims = n_dims
        self.weight = nn.Parameter(torch.empty(n_dims).fill_(scale))
        self.eps = eps
        self.scale = scale

    def forward(self, x):
        x_float = x.float()
        norm = x_float.pow(2).sum(1, keepdim=True).sqrt() + self.eps
        return (self.weight[None, :, None, None].float().expand_as(x_float) * x_float /
                norm).type_as(x)


@MODELS.register_module()
class SSDNeck(CheckpointOwnerMixin, nn.Module):
    """SSDNeck, mmdet 2.x arguments.

    Args:
        in_channels (Sequence[int]): the backbone features' widths.
        out_channels (Sequence[int]): every output's width; starts with ``in_channels``.
        level_strides, level_paddings (Sequence[int]): one per extra level.
        l2_norm_scale (float | None): L2 norm on the first input, its initial scale (20).
        last_kernel_size (int): the last extra level's kernel (3).
        use_depthwise (bool): depthwise separable second convs.
        conv_cfg, norm_cfg, act_cfg (ReLU), init_cfg: as mmdet.
        with_cp (bool), cp_use_reentrant (bool): checkpointing (not in mmdet 2.x).
    """

    def __init__(self, in_channels, out_channels, level_strides, level_paddings,
                 l2_norm_scale=20., last_kernel_size=3, use_depthwise=False, conv_cfg=None,
                 norm_cfg=None, act_cfg=dict(type='ReLU'),
                 init_cfg=[dict(type='Xavier', distribution='uniform', layer='Conv2d'),
                           dict(type='Constant', val=1, layer='BatchNorm2d')],
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        in_channels, out_channels = list(in_channels), list(out_channels)
        if not len(out_channels) > len(in_channels) or \
                out_channels[:len(in_channels)] != in_channels:
            raise ValueError(f'out_channels must start with in_channels ({in_channels}) and add '
                             f'at least one extra level, got {out_channels}')
        if not len(out_channels) - len(in_channels) == len(level_strides) == \
                len(level_paddings):
            raise ValueError(f'level_strides and level_paddings need one entry per extra level '
                             f'({len(out_channels) - len(in_channels)}), got {level_strides!r}, '
                             f'{level_paddings!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'SSDNeck with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.init_cfg = list(init_cfg) if isinstance(init_cfg, (list, tuple)) else \
            [init_cfg] if init_cfg is not None else []
        if l2_norm_scale:
            self.l2_norm = L2Norm(in_channels[0], l2_norm_scale)
            self.init_cfg += [dict(type='Constant', val=self.l2_norm.scale,
                                   override=dict(name='l2_norm'))]
        self.extra_layers = nn.ModuleList()
        extra = out_channels[len(in_channels):]
        second_conv = DepthwiseSeparableConvModule if use_depthwise else ConvModule
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        for i, (channels, stride, padding) in enumerate(zip(extra, level_strides,
                                                            level_paddings)):
            kernel = last_kernel_size if i == len(extra) - 1 else 3
            self.extra_layers.append(nn.Sequential(
                ConvModule(out_channels[len(in_channels) - 1 + i], channels // 2, 1, **cfg),
                second_conv(channels // 2, channels, kernel, stride=stride, padding=padding,
                            **cfg)))
        self.l2_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in self.extra_layers]
        apply_init_cfg(self, self.init_cfg)

    def _checkpoint_steps(self):
        """``level0`` (the L2 norm) alone, then the extra levels as one chain."""
        chains = [[unit_step('level0', self.l2_unit, self.l2_norm)]] \
            if hasattr(self, 'l2_norm') else []
        first = len(self.in_channels)
        return chains + [[unit_step(f'level{first + i}', unit, layer, emit=True)
                          for i, (unit, layer) in enumerate(zip(self.level_units,
                                                                self.extra_layers))]]

    def forward(self, inputs):
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'SSDNeck expects {len(self.in_channels)} inputs (in_channels), '
                             f'got {len(inputs)}')
        chains = self._checkpoint_steps()
        outs = list(inputs)
        if hasattr(self, 'l2_norm'):
            outs[0] = self._run_chain(chains[0], outs[0])[0]
        outs += self._run_chain(chains[-1], outs[-1])[1]
        return tuple(outs)
