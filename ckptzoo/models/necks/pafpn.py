"""mmdet 2.x ``PAFPN`` (Liu et al. 2018, PANet): an FPN whose outputs get a bottom-up path
aggregation: level ``i + 1`` adds a stride-2 conv of level ``i``'s aggregated output, then a
3x3 conv (the lowest level is the FPN output itself).

Keys: FPN's (``lateral_convs.{i}``, ``fpn_convs.{i}`` incl. the extra convs) plus
``downsample_convs.{i}`` and ``pafpn_convs.{i}`` (levels 1 ..).

Checkpoint units: FPN's ``level{i}`` (top-down: lateral, addition, 3x3 conv; and the extra
levels), and ``bottom_up{i}`` for levels 1 .. (downsample conv, addition, pafpn conv). Three
chains: top-down, bottom-up (the state: the aggregated level), the extra levels.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.fp16 import auto_fp16
from ..checkpointing import ChainStep, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg
from .fpn import FPN

__all__ = ['PAFPN']


@MODELS.register_module()
class PAFPN(FPN):
    """Args: FPN's (mmdet's PAFPN takes no ``upsample_cfg``: the top-down path resizes with
    'nearest' to the lower level's size), plus ``with_cp`` / ``cp_use_reentrant`` (not mmdet
    arguments) for every unit."""

    def __init__(self, in_channels, out_channels, num_outs, start_level=0, end_level=-1,
                 add_extra_convs=False, relu_before_extra_convs=False, no_norm_on_lateral=False,
                 conv_cfg=None, norm_cfg=None, act_cfg=None,
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__(in_channels, out_channels, num_outs, start_level, end_level,
                         add_extra_convs, relu_before_extra_convs, no_norm_on_lateral,
                         conv_cfg, norm_cfg, act_cfg, init_cfg=None, with_cp=with_cp,
                         cp_use_reentrant=cp_use_reentrant)
        self.downsample_convs = nn.ModuleList()
        self.pafpn_convs = nn.ModuleList()
        for _ in range(self.start_level + 1, self.backbone_end_level):
            self.downsample_convs.append(ConvModule(
                out_channels, out_channels, 3, stride=2, padding=1, conv_cfg=conv_cfg,
                norm_cfg=norm_cfg, act_cfg=act_cfg, inplace=False))
            self.pafpn_convs.append(ConvModule(
                out_channels, out_channels, 3, padding=1, conv_cfg=conv_cfg,
                norm_cfg=norm_cfg, act_cfg=act_cfg, inplace=False))
        self.bottom_up_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                                for _ in self.pafpn_convs]
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def _checkpoint_steps(self, inputs=None, inter_outs=None):
        """FPN's top-down chain, the bottom-up chain (``inter_outs``: the top-down outputs its
        levels take), FPN's extra levels."""
        down, extra = super()._checkpoint_steps(inputs)
        up = [ChainStep(f'bottom_up{i + 1}', unit, partial(self._bottom_up_step, i),
                        [self.downsample_convs[i], self.pafpn_convs[i]], leaves=True,
                        args=() if inter_outs is None else (inter_outs[i + 1], ))
              for i, unit in enumerate(self.bottom_up_units)]
        return [down, up, extra]

    def _bottom_up_step(self, i, below, inter):
        modules = [self.downsample_convs[i], self.pafpn_convs[i]]
        merged, out = self.bottom_up_units[i](partial(self._bottom_up, i), below, inter,
                                              module=modules)
        return merged, out

    def _bottom_up(self, i, below, inter):
        merged = inter + self.downsample_convs[i](below)
        return merged, self.pafpn_convs[i](merged)

    def _level(self, i, feat, top=None):
        """mmdet's PAFPN resizes with 'nearest' to the lower level's size."""
        lateral = self.lateral_convs[i](feat)
        if top is not None:
            lateral = lateral + F.interpolate(top, size=lateral.shape[2:], mode='nearest')
        return lateral, self.fpn_convs[i](lateral)

    @auto_fp16()
    def forward(self, inputs):
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'PAFPN expects {len(self.in_channels)} inputs (in_channels), '
                             f'got {len(inputs)}')
        down, _, _ = self._checkpoint_steps(inputs)
        _, inter_outs = self._run_chain(down, None)
        inter_outs[0], top_lateral = inter_outs[0]
        inter_outs = inter_outs[::-1]  # run top-down, bottom-up here
        _, up, extra = self._checkpoint_steps(inputs, inter_outs)
        outs = [inter_outs[0]] + self._run_chain(up, inter_outs[0])[1]
        if self.num_outs > len(outs):
            if not self.add_extra_convs:
                for _ in range(self.num_outs - len(outs)):
                    outs.append(F.max_pool2d(outs[-1], 1, stride=2))
            else:
                source = {'on_input': inputs[self.backbone_end_level - 1],
                          'on_lateral': top_lateral, 'on_output': outs[-1]}
                first = extra[0]._replace(args=(source[self.add_extra_convs], ))
                outs += self._run_chain([first] + extra[1:], None)[1]
        return tuple(outs)
