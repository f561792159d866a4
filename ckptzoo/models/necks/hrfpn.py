"""HRFPN (High Resolution Feature Pyramids), mmdet 2.28.2's arguments, semantics and keys.

Keys: ``reduction_conv.conv.*`` and ``fpn_convs.{i}.conv.*``. As in mmdet, ``norm_cfg`` is
stored but no conv takes it.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``reduction`` (the upsampling of every
input to the first one's size, their concatenation, the 1x1 reduction conv and the poolings of
its output; mmdet checkpoints the conv only) and ``level{i}`` for each output's 3x3 conv (as
mmdet's). ``with_cp`` sets them all to ``'full'``. They are one chain, the pooled features as
its state, every level's output leaving: a segment over it keeps only the backbone features.
Every pooling runs before any output conv, as in mmdet, so gradients add up in its order.
"""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg

__all__ = ['HRFPN']


@MODELS.register_module()
class HRFPN(CheckpointOwnerMixin, nn.Module):
    """HRFPN (Sun et al. 2019) as mmdet 2.28.2.

    Args:
        in_channels (list[int]): channels of each branch (input ``i`` is upsampled by ``2**i``).
        out_channels (int): channels of every output.
        num_outs (int): number of outputs; output ``i`` pools the reduced feature by ``2**i``.
        pooling_type (str): 'MAX' for max pooling, anything else average pooling (as mmdet).
        conv_cfg (None): only plain convolutions are supported.
        norm_cfg (dict): stored, unused (as in mmdet).
        with_cp (bool): ``'full'`` checkpointing of every unit; ``set_checkpoint_plan``
            changes modes later.
        stride (int): stride of the 3x3 output convs.
        init_cfg (dict): mmcv init_cfg, applied at construction (default Caffe2Xavier).
        cp_use_reentrant (bool): torch's reentrant checkpoint (not an mmdet argument).
    """

    def __init__(self, in_channels, out_channels, num_outs=5, pooling_type='AVG', conv_cfg=None,
                 norm_cfg=None, with_cp=False, stride=1,
                 init_cfg=dict(type='Caffe2Xavier', layer='Conv2d'), cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'HRFPN in_channels must be a non-empty list, got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'HRFPN with_cp must be a bool, got {with_cp!r}')
        if isinstance(num_outs, bool) or not isinstance(num_outs, int) or num_outs < 1:
            raise ValueError(f'HRFPN num_outs must be a positive int, got {num_outs!r}')
        if conv_cfg is not None:
            raise NotImplementedError(f'HRFPN conv_cfg is not supported, got {conv_cfg!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.pooling_type = pooling_type
        self.stride = stride
        self.init_cfg = init_cfg
        self.reduction_conv = ConvModule(sum(in_channels), out_channels, 1, conv_cfg=conv_cfg,
                                         act_cfg=None)
        self.fpn_convs = nn.ModuleList(
            ConvModule(out_channels, out_channels, 3, padding=1, stride=stride,
                       conv_cfg=conv_cfg, act_cfg=None) for _ in range(num_outs))
        self.pooling = F.max_pool2d if pooling_type == 'MAX' else F.avg_pool2d
        self.reduction_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_outs)]
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    def _reduce(self, *inputs):
        """The reduced feature and its poolings, in mmdet's order (every pooling before any
        output conv, which fixes the order in which their gradients add up)."""
        outs = [inputs[0]]
        for i in range(1, self.num_ins):
            outs.append(F.interpolate(inputs[i], scale_factor=2**i, mode='bilinear'))
        out = self.reduction_conv(torch.cat(outs, dim=1))
        return (out, ) + tuple(self.pooling(out, kernel_size=2**i, stride=2**i)
                               for i in range(1, self.num_outs))

    def _reduction_step(self, inputs):
        outs = self.reduction_unit(self._reduce, *inputs, module=self.reduction_conv)
        return list(outs), None

    def _level_step(self, i, pooled):
        return pooled, self.level_units[i](self.fpn_convs[i], pooled[i],
                                           module=self.fpn_convs[i])

    def _checkpoint_steps(self):
        """One chain: the reduction (state: the inputs, then the pooled features), then
        every level, whose output leaves."""
        steps = [ChainStep('reduction', self.reduction_unit, self._reduction_step,
                           self.reduction_conv)]
        steps += [ChainStep(f'level{i}', self.level_units[i], partial(self._level_step, i),
                            self.fpn_convs[i], leaves=True) for i in range(self.num_outs)]
        return [steps]

    def forward(self, inputs):
        if len(inputs) != self.num_ins:
            raise ValueError(f'HRFPN expects {self.num_ins} inputs (in_channels), '
                             f'got {len(inputs)}')
        _, outs = self._run_chain(self._checkpoint_steps()[0], list(inputs))
        return tuple(o for o in outs if o is not None)
