"""mmdet 2.x ``NASFPN`` (Ghiasi et al. 2019): 1x1 laterals (and 1x1 conv + max-pool extra
levels) make P3-P7, then ``stack_times`` searched stages of merge cells (sum and global-pooling
attention) rewire them. Exactly five levels, as mmdet's forward unpacks them.

Keys: ``lateral_convs.{i}.conv.*``, ``extra_downsamples.{i}.0.conv.*``,
``fpn_stages.{s}.{cell}.out_conv.*`` (cells ``gp_64_4``, ``sum_44_4``, ``sum_43_3``,
``sum_34_4``, ``sum_55_5``, ``sum_77_7``, ``gp_75_6``; ``gp_43_5``, ``gp_54_7`` have none).

Checkpoint units, one chain whose state is the five levels: ``lateral`` (the laterals and
extra levels), ``stage{s}`` per stack.
"""
from functools import partial

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg
from ..utils.merge_cells import GlobalPoolingCell, SumCell
from ..utils.pretrained import load_pretrained

__all__ = ['NASFPN']


def _level_range(owner, num_ins, num_outs, start_level, end_level):
    """mmdet's FPN-family level checks: ``backbone_end_level``, refusals naming the argument."""
    if not 0 <= start_level < num_ins:
        raise ValueError(f'{owner} start_level must be in 0..{num_ins - 1}, got {start_level!r}')
    if end_level == -1 or end_level == num_ins - 1:
        if num_outs < num_ins - start_level:
            raise ValueError(f'{owner} num_outs must be at least {num_ins - start_level} '
                             f'(inputs from start_level {start_level}), got {num_outs!r}')
        return num_ins
    if not start_level <= end_level < num_ins:
        raise ValueError(f'{owner} end_level must be -1 or in {start_level}..{num_ins - 1}, '
                         f'got {end_level!r}')
    if num_outs != end_level - start_level + 1:
        raise ValueError(f'{owner} with end_level={end_level} num_outs must be '
                         f'{end_level - start_level + 1}, got {num_outs!r}')
    return end_level + 1


@MODELS.register_module()
class NASFPN(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (list[int]), out_channels (int), num_outs (int: 5).
        stack_times (int): number of searched stages.
        start_level, end_level (int): backbone outputs used.
        add_extra_convs (bool): stored, unused (as in mmdet).
        norm_cfg (dict | None): of every conv.
        init_cfg (dict): Caffe2 Xavier on Conv2d.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, num_outs, stack_times, start_level=0,
                 end_level=-1, add_extra_convs=False, norm_cfg=None,
                 init_cfg=dict(type='Caffe2Xavier', layer='Conv2d'), with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'NASFPN in_channels must be a non-empty list, got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'NASFPN with_cp must be a bool, got {with_cp!r}')
        if num_outs != 5:
            raise ValueError(f'NASFPN num_outs must be 5 (P3-P7, as its stages wire them), '
                             f'got {num_outs!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.stack_times = stack_times
        self.norm_cfg = norm_cfg
        self.backbone_end_level = _level_range('NASFPN', self.num_ins, num_outs, start_level,
                                               end_level)
        self.start_level = start_level
        self.end_level = end_level
        self.add_extra_convs = add_extra_convs
        self.init_cfg = init_cfg

        self.lateral_convs = nn.ModuleList(
            ConvModule(in_channels[i], out_channels, 1, norm_cfg=norm_cfg, act_cfg=None)
            for i in range(start_level, self.backbone_end_level))
        extra_levels = num_outs - self.backbone_end_level + start_level
        self.extra_downsamples = nn.ModuleList(
            nn.Sequential(ConvModule(out_channels, out_channels, 1, norm_cfg=norm_cfg,
                                     act_cfg=None), nn.MaxPool2d(2, 2))
            for _ in range(extra_levels))

        def sum_cell():
            return SumCell(out_channels, out_channels, out_norm_cfg=norm_cfg)

        def gp_cell():
            return GlobalPoolingCell(out_channels, out_channels, out_norm_cfg=norm_cfg)

        self.fpn_stages = nn.ModuleList()
        for _ in range(stack_times):
            stage = nn.ModuleDict()
            stage['gp_64_4'] = gp_cell()
            stage['sum_44_4'] = sum_cell()
            stage['sum_43_3'] = sum_cell()
            stage['sum_34_4'] = sum_cell()
            stage['gp_43_5'] = GlobalPoolingCell(with_out_conv=False)
            stage['sum_55_5'] = sum_cell()
            stage['gp_54_7'] = GlobalPoolingCell(with_out_conv=False)
            stage['sum_77_7'] = sum_cell()
            stage['gp_75_6'] = gp_cell()
            self.fpn_stages.append(stage)
        self.lateral_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
        self.stage_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(stack_times)]
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    def _laterals(self, *inputs):
        feats = [conv(inputs[i + self.start_level]) for i, conv in enumerate(self.lateral_convs)]
        for downsample in self.extra_downsamples:
            feats.append(downsample(feats[-1]))
        if len(feats) != 5:
            raise ValueError(f'NASFPN needs 5 levels (P3-P7) from its inputs, made {len(feats)}')
        return tuple(feats)

    def _stage(self, s, p3, p4, p5, p6, p7):
        stage = self.fpn_stages[s]
        p4_1 = stage['gp_64_4'](p6, p4, out_size=p4.shape[-2:])
        p4_2 = stage['sum_44_4'](p4_1, p4, out_size=p4.shape[-2:])
        p3 = stage['sum_43_3'](p4_2, p3, out_size=p3.shape[-2:])
        p4 = stage['sum_34_4'](p3, p4_2, out_size=p4.shape[-2:])
        p5_tmp = stage['gp_43_5'](p4, p3, out_size=p5.shape[-2:])
        p5 = stage['sum_55_5'](p5, p5_tmp, out_size=p5.shape[-2:])
        p7_tmp = stage['gp_54_7'](p5, p4_2, out_size=p7.shape[-2:])
        p7 = stage['sum_77_7'](p7, p7_tmp, out_size=p7.shape[-2:])
        p6 = stage['gp_75_6'](p7, p5, out_size=p6.shape[-2:])
        return p3, p4, p5, p6, p7

    def _lateral_step(self, _, *inputs):
        modules = [self.lateral_convs, self.extra_downsamples]
        return self.lateral_unit(self._laterals, *inputs, module=modules), None

    def _stage_step(self, s, feats):
        return self.stage_units[s](partial(self._stage, s), *feats,
                                   module=self.fpn_stages[s]), None

    def _checkpoint_steps(self, inputs=None):
        steps = [ChainStep('lateral', self.lateral_unit, self._lateral_step,
                           [self.lateral_convs, self.extra_downsamples],
                           () if inputs is None else tuple(inputs))]
        steps += [ChainStep(f'stage{s}', unit, partial(self._stage_step, s), self.fpn_stages[s])
                  for s, unit in enumerate(self.stage_units)]
        return [steps]

    def forward(self, inputs):
        if len(inputs) != self.num_ins:
            raise ValueError(f'NASFPN expects {self.num_ins} inputs (in_channels), '
                             f'got {len(inputs)}')
        return tuple(self._run_chain(self._checkpoint_steps(inputs)[0], None)[0])
