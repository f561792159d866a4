"""mmdet 2.x ``NASFCOS_FPN`` (Wang et al. 2020): 1x1 adapt convs (BN, ReLU), seven searched
concatenation cells (``c{a}{b}`` merges features ``a`` and ``b`` and appends the result), then
P3-P5 as the sum of a cell output and feature 5 resized (bilinear) to the inputs' sizes, plus
stride-2 3x3 extra levels.

Keys: ``adapt_convs.{i}.{conv,bn}.*``, ``fpn.{c22_1,c22_2,c32,c02,c42,c36,c61}.{input1_conv,
input2_conv,out_conv}.*``, ``extra_downsamples.{i}.conv.*``.

Initialisation as mmdet's in effect: Caffe2 Xavier on the adapt and extra convs, the cells'
convs keep ConvModule's Kaiming init (mmdet's ``init_weights`` looks for a ``conv_out`` the
cells do not have, so it never re-initialises their ``out_conv``).

Checkpoint units, one chain whose state is the features so far: ``adapt``, one unit per cell
(named as the cell), ``merge`` (P3-P5), ``extra{i}``.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule
from ..utils.merge_cells import ConcatCell
from ..utils.weight_init import kaiming_init
from .nas_fpn import _level_range

__all__ = ['NASFCOS_FPN']

_CELLS = (('c22_1', True), ('c22_2', True), ('c32', False), ('c02', False), ('c42', True),
          ('c36', True), ('c61', True))


@MODELS.register_module()
class NASFCOS_FPN(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (list[int]), out_channels (int), num_outs (int).
        start_level (int): first backbone output used (default 1); end_level (int).
        add_extra_convs (bool): stored, unused (as in mmdet).
        conv_cfg, norm_cfg (dict | None): of the cells' input convs.
        init_cfg (None): nothing else is allowed (as in mmdet).
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, num_outs, start_level=1, end_level=-1,
                 add_extra_convs=False, conv_cfg=None, norm_cfg=None, init_cfg=None,
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'NASFCOS_FPN init_cfg must be None (as in mmdet, to keep its '
                             f'initialisation), got {init_cfg!r}')
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'NASFCOS_FPN in_channels must be a non-empty list, '
                            f'got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'NASFCOS_FPN with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.norm_cfg = norm_cfg
        self.conv_cfg = conv_cfg
        self.backbone_end_level = _level_range('NASFCOS_FPN', self.num_ins, num_outs,
                                               start_level, end_level)
        if self.backbone_end_level - start_level < 3 or self.num_ins < 4:
            raise ValueError(f'NASFCOS_FPN wires 3 adapted levels at least and takes the sizes '
                             f'of inputs 1-3: in_channels needs 4 entries at least and '
                             f'start_level..end_level 3 levels, got {in_channels!r}, '
                             f'start_level={start_level}, end_level={end_level}')
        self.start_level = start_level
        self.end_level = end_level
        self.add_extra_convs = add_extra_convs
        self.init_cfg = init_cfg

        self.adapt_convs = nn.ModuleList(
            ConvModule(in_channels[i], out_channels, 1, bias=False, norm_cfg=dict(type='BN'),
                       act_cfg=dict(type='ReLU', inplace=False))
            for i in range(start_level, self.backbone_end_level))
        self.fpn = nn.ModuleDict()
        for name, with_input2_conv in _CELLS:
            self.fpn[name] = ConcatCell(
                out_channels, out_channels, with_out_conv=True,
                out_conv_cfg=dict(kernel_size=1, padding=0, bias=False, groups=out_channels),
                out_norm_cfg=dict(type='BN'), out_conv_order=('norm', 'act', 'conv'),
                with_input1_conv=True, with_input2_conv=with_input2_conv,
                input_conv_cfg=conv_cfg, input_norm_cfg=norm_cfg, upsample_mode='nearest')
        extra_levels = num_outs - self.backbone_end_level + start_level
        self.extra_downsamples = nn.ModuleList(
            ConvModule(out_channels, out_channels, 3, stride=2, padding=1,
                       act_cfg=None if i == 0 else dict(type='ReLU', inplace=False),
                       order=('act', 'norm', 'conv'))
            for i in range(extra_levels))
        for modules in (self.adapt_convs, self.extra_downsamples):
            for m in modules.modules():
                if isinstance(m, nn.Conv2d):
                    kaiming_init(m, a=1, mode='fan_in', nonlinearity='leaky_relu',
                                 distribution='uniform')
        units = ['adapt'] + [name for name, _ in _CELLS] + ['merge'] + [
            f'extra{i}' for i in range(extra_levels)]
        self.units = {name: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                      for name in units}

    def init_weights(self):
        """Everything was initialised at construction."""

    def _adapt(self, *inputs):
        return tuple(conv(inputs[i + self.start_level])
                     for i, conv in enumerate(self.adapt_convs))

    def _merge(self, *feats_and_sizes):
        """P3-P5: cell outputs 9, 8, 7 plus feature 5, resized to inputs 1, 2, 3's sizes (as
        mmdet indexes the inputs, whatever ``start_level``)."""
        feats, sizes = feats_and_sizes[:-3], feats_and_sizes[-3:]
        outs = []
        for idx, size in zip((9, 8, 7), sizes):
            top = F.interpolate(feats[5], size=feats[idx].shape[2:], mode='bilinear',
                                align_corners=False)
            outs.append(F.interpolate(feats[idx] + top, size=size, mode='bilinear',
                                      align_corners=False))
        return tuple(outs)

    def _adapt_step(self, _, *inputs):
        return list(self.units['adapt'](self._adapt, *inputs, module=self.adapt_convs)), None

    def _cell_step(self, name, feats):
        cell = self.fpn[name]
        out = self.units[name](cell, feats[int(name[1])], feats[int(name[2])], module=cell)
        return feats + [out], None

    def _merge_step(self, feats, *inputs):
        sizes = [tuple(inputs[i].shape[2:]) for i in (1, 2, 3)]
        outs = self.units['merge'](lambda *f: self._merge(*f, *sizes), *feats, module=[])
        return outs[-1], list(outs)

    def _extra_step(self, i, x):
        out = self.units[f'extra{i}'](self.extra_downsamples[i], x,
                                      module=self.extra_downsamples[i])
        return out, out

    def _checkpoint_steps(self, inputs=None):
        args = () if inputs is None else tuple(inputs)
        steps = [ChainStep('adapt', self.units['adapt'], self._adapt_step, self.adapt_convs,
                           args)]
        steps += [ChainStep(name, self.units[name], partial(self._cell_step, name),
                            self.fpn[name]) for name, _ in _CELLS]
        steps.append(ChainStep('merge', self.units['merge'], self._merge_step, [], args,
                               leaves=True))
        steps += [ChainStep(f'extra{i}', self.units[f'extra{i}'], partial(self._extra_step, i),
                            m, leaves=True) for i, m in enumerate(self.extra_downsamples)]
        return [steps]

    def forward(self, inputs):
        if len(inputs) != self.num_ins:
            raise ValueError(f'NASFCOS_FPN expects {self.num_ins} inputs (in_channels), '
                             f'got {len(inputs)}')
        _, outs = self._run_chain(self._checkpoint_steps(inputs)[0], None)
        merged, *extra = [o for o in outs if o is not None]
        return tuple(merged) + tuple(extra)
