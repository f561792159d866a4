"""YOLOX's path aggregation network (mmdet 2.x's ``YOLOXPAFPN``): a top-down pass (1x1
reduce, upsample, concat, CSP layer) then a bottom-up pass (stride-2 conv, concat, CSP layer),
then a 1x1 conv per level. Keys ``reduce_layers.{k} top_down_blocks.{k} downsamples.{k}
bottom_up_blocks.{k} out_convs.{i}`` as mmdet's.

Checkpoint units (not an mmdet 2.x feature): ``top_down.{k}`` (reduce, upsample, concat, CSP
layer), ``bottom_up.{k}`` (downsample, concat, CSP layer) and ``out_convs.{i}``; the top-down
steps are one chain (the state: the deeper merged feature), the bottom-up steps another, each
out conv a unit of its own. ``with_cp`` sets them all to ``'full'``.
"""
import math
from functools import partial

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import ConvModule, CSPLayer, DepthwiseSeparableConvModule, apply_init_cfg

__all__ = ['YOLOXPAFPN']


@MODELS.register_module()
class YOLOXPAFPN(CheckpointOwnerMixin, nn.Module):
    """YOLOXPAFPN, mmdet 2.x arguments: ``in_channels`` (list), ``out_channels`` (int),
    ``num_csp_blocks`` (3), ``use_depthwise``, ``upsample_cfg`` (``nn.Upsample`` arguments,
    2x nearest), ``conv_cfg``, ``norm_cfg`` (BN, momentum 0.03, eps 1e-3), ``act_cfg``
    (Swish), ``init_cfg`` (Kaiming uniform, a=sqrt(5), fan_in); ``with_cp`` /
    ``cp_use_reentrant`` added."""

    def __init__(self, in_channels, out_channels, num_csp_blocks=3, use_depthwise=False,
                 upsample_cfg=dict(scale_factor=2, mode='nearest'), conv_cfg=None,
                 norm_cfg=dict(type='BN', momentum=0.03, eps=0.001), act_cfg=dict(type='Swish'),
                 init_cfg=dict(type='Kaiming', layer='Conv2d', a=math.sqrt(5),
                               distribution='uniform', mode='fan_in', nonlinearity='leaky_relu'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, (list, tuple)) or len(in_channels) < 2:
            raise ValueError(f'in_channels must list at least two levels, got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise ValueError(f'YOLOXPAFPN with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.init_cfg = init_cfg
        conv = DepthwiseSeparableConvModule if use_depthwise else ConvModule
        cfg = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg)
        csp = dict(num_blocks=num_csp_blocks, add_identity=False, use_depthwise=use_depthwise,
                   **cfg)
        self.upsample = nn.Upsample(**upsample_cfg)
        self.reduce_layers = nn.ModuleList()
        self.top_down_blocks = nn.ModuleList()
        for idx in range(len(in_channels) - 1, 0, -1):
            self.reduce_layers.append(ConvModule(in_channels[idx], in_channels[idx - 1], 1,
                                                 **cfg))
            self.top_down_blocks.append(CSPLayer(in_channels[idx - 1] * 2,
                                                 in_channels[idx - 1], **csp))
        self.downsamples = nn.ModuleList()
        self.bottom_up_blocks = nn.ModuleList()
        for idx in range(len(in_channels) - 1):
            self.downsamples.append(conv(in_channels[idx], in_channels[idx], 3, stride=2,
                                         padding=1, **cfg))
            self.bottom_up_blocks.append(CSPLayer(in_channels[idx] * 2, in_channels[idx + 1],
                                                  **csp))
        self.out_convs = nn.ModuleList([ConvModule(c, out_channels, 1, **cfg)
                                        for c in in_channels])
        n = len(in_channels) - 1
        unit = partial(CheckpointUnit.from_flag, with_cp, cp_use_reentrant)
        self.top_down_units = [unit() for _ in range(n)]
        self.bottom_up_units = [unit() for _ in range(n)]
        self.out_units = [unit() for _ in in_channels]
        apply_init_cfg(self, init_cfg)

    def _checkpoint_steps(self, inputs=None, inner=None):
        """Top-down chain (step k merges input ``n-1-k`` with the deeper feature; it leaves
        the deeper feature reduced), bottom-up chain (step k takes ``inner[k + 1]``), then
        each out conv. ``inputs`` / ``inner``: the tensors the steps take (None: the
        description alone)."""
        n = len(self.in_channels) - 1
        down = [ChainStep(f'top_down.{k}', self.top_down_units[k], partial(self._down_step, k),
                          [self.reduce_layers[k], self.top_down_blocks[k]], leaves=True,
                          args=() if inputs is None else (inputs[n - 1 - k], ))
                for k in range(n)]
        up = [ChainStep(f'bottom_up.{k}', self.bottom_up_units[k], partial(self._up_step, k),
                        [self.downsamples[k], self.bottom_up_blocks[k]], leaves=True,
                        args=() if inner is None else (inner[k + 1], ))
              for k in range(n)]
        outs = [[unit_step(f'out_convs.{i}', self.out_units[i], self.out_convs[i], emit=True)]
                for i in range(n + 1)]
        return [down, up] + outs

    def _down_step(self, k, high, low):
        return self.top_down_units[k](partial(self._down, k), high, low,
                                      module=[self.reduce_layers[k], self.top_down_blocks[k]])

    def _down(self, k, high, low):
        """(the merged feature, the deeper feature reduced)."""
        high = self.reduce_layers[k](high)
        return self.top_down_blocks[k](torch.cat([self.upsample(high), low], 1)), high

    def _up_step(self, k, low, high):
        out = self.bottom_up_units[k](partial(self._up, k), low, high,
                                      module=[self.downsamples[k], self.bottom_up_blocks[k]])
        return out, out

    def _up(self, k, low, high):
        return self.bottom_up_blocks[k](torch.cat([self.downsamples[k](low), high], 1))

    def forward(self, inputs):
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'YOLOXPAFPN expects {len(self.in_channels)} inputs '
                             f'(in_channels), got {len(inputs)}')
        chains = self._checkpoint_steps(inputs)
        top, reduced = self._run_chain(chains[0], inputs[-1])
        inner = [top] + reduced[::-1]
        chains = self._checkpoint_steps(inputs, inner)
        outs = [top] + self._run_chain(chains[1], top)[1]
        return tuple(self._run_chain(chain, o)[0] for chain, o in zip(chains[2:], outs))
