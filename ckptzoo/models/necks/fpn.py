"""Feature Pyramid Network, mmdet 2.x arguments, semantics and state-dict keys.

Keys: ``lateral_convs.{i}.conv.*`` for the 1x1 laterals, ``fpn_convs.{i}.conv.*`` for the 3x3
output convs followed by the extra (stride 2) convs, so mmdet 2.x checkpoints load unchanged.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}`` for each output level with
a conv. A backbone level's unit covers its lateral conv, the top-down addition and its output
conv; the levels run top-down (the deepest first), so that is their execution order. An extra
level's unit covers its stride-2 conv (and the ReLU before it). Outputs equal mmdet's order of
operations bit for bit. The top-down levels are one chain (the state is the merged lateral
passed down), the extra levels another: a segment over the top-down levels keeps no lateral.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.checkpoint import load_checkpoint
from ...runner.fp16 import auto_fp16
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg

__all__ = ['FPN']

_EXTRA_MODES = ('on_input', 'on_lateral', 'on_output')


@MODELS.register_module()
class FPN(CheckpointOwnerMixin, nn.Module):
    """FPN (Lin et al. 2017) as mmdet 2.x.

    Args:
        in_channels (list[int]): channels of each backbone output.
        out_channels (int): channels of every pyramid level.
        num_outs (int): number of pyramid levels returned.
        start_level (int): first backbone output used (RetinaNet: 1, i.e. from stride 8).
        end_level (int): last backbone output used, -1 for the last; when it is not the last,
            no extra level is allowed (``num_outs == end_level - start_level + 1``).
        add_extra_convs (bool | str): how levels beyond the backbone's are made: False
            (max-pool, stride 2, of the last output), or a stride-2 3x3 conv on 'on_input'
            (the last used backbone output; True means this), 'on_lateral' or 'on_output'.
        relu_before_extra_convs (bool): ReLU before every extra conv but the first.
        no_norm_on_lateral (bool): no norm in the lateral convs even if ``norm_cfg`` is given.
        upsample_cfg (dict): ``F.interpolate`` arguments; without ``scale_factor`` the top-down
            path is resized to the lower level's size.
        init_cfg (dict): mmcv init_cfg, applied at construction (default Xavier uniform).
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
            default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    def __init__(self, in_channels, out_channels, num_outs, start_level=0, end_level=-1,
                 add_extra_convs=False, relu_before_extra_convs=False, no_norm_on_lateral=False,
                 conv_cfg=None, norm_cfg=None, act_cfg=None, upsample_cfg=dict(mode='nearest'),
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(with_cp, bool):
            raise TypeError(f'FPN with_cp must be a bool, got {with_cp!r}')
        if not isinstance(in_channels, (list, tuple)) or not in_channels:
            raise TypeError(f'in_channels must be a non-empty list of ints, got {in_channels!r}')
        self.in_channels = list(in_channels)
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        self.relu_before_extra_convs = relu_before_extra_convs
        self.no_norm_on_lateral = no_norm_on_lateral
        self.fp16_enabled = False
        self.upsample_cfg = dict(upsample_cfg)
        self.init_cfg = init_cfg
        if not 0 <= start_level < self.num_ins:
            raise ValueError(f'start_level must be in 0..{self.num_ins - 1} (one per input), '
                             f'got {start_level!r}')
        if end_level == -1 or end_level == self.num_ins - 1:
            self.backbone_end_level = self.num_ins
            if num_outs < self.num_ins - start_level:
                raise ValueError(f'num_outs must be at least {self.num_ins - start_level} '
                                 f'(inputs from start_level {start_level}), got {num_outs!r}')
        else:
            if not start_level <= end_level < self.num_ins:
                raise ValueError(f'end_level must be -1 or in {start_level}..'
                                 f'{self.num_ins - 1}, got {end_level!r}')
            self.backbone_end_level = end_level + 1
            if num_outs != end_level - start_level + 1:
                raise ValueError(f'with end_level={end_level} no extra level is allowed: '
                                 f'num_outs must be {end_level - start_level + 1}, '
                                 f'got {num_outs!r}')
        self.start_level = start_level
        self.end_level = end_level
        if add_extra_convs is True:
            add_extra_convs = 'on_input'
        elif isinstance(add_extra_convs, str) and add_extra_convs not in _EXTRA_MODES:
            raise ValueError(f'add_extra_convs must be a bool or one of {", ".join(_EXTRA_MODES)}'
                             f', got {add_extra_convs!r}')
        elif not isinstance(add_extra_convs, (str, bool)):
            raise TypeError(f'add_extra_convs must be a bool or a str, got {add_extra_convs!r}')
        self.add_extra_convs = add_extra_convs

        self.lateral_convs = nn.ModuleList()
        self.fpn_convs = nn.ModuleList()
        for i in range(self.start_level, self.backbone_end_level):
            self.lateral_convs.append(ConvModule(
                in_channels[i], out_channels, 1, conv_cfg=conv_cfg,
                norm_cfg=None if no_norm_on_lateral else norm_cfg, act_cfg=act_cfg,
                inplace=False))
            self.fpn_convs.append(ConvModule(
                out_channels, out_channels, 3, padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                act_cfg=act_cfg, inplace=False))
        extra_levels = num_outs - self.backbone_end_level + self.start_level
        if self.add_extra_convs and extra_levels >= 1:
            for i in range(extra_levels):
                if i == 0 and self.add_extra_convs == 'on_input':
                    channels = self.in_channels[self.backbone_end_level - 1]
                else:
                    channels = out_channels
                self.fpn_convs.append(ConvModule(
                    channels, out_channels, 3, stride=2, padding=1, conv_cfg=conv_cfg,
                    norm_cfg=norm_cfg, act_cfg=act_cfg, inplace=False))
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(len(self.fpn_convs))]
        apply_init_cfg(self, init_cfg)

    def _checkpoint_steps(self, inputs=None, units=None, prefix=''):
        """Two chains: the backbone levels top-down (the state: the merged lateral passed
        down), then the extra levels; every level's output leaves. ``inputs``: the backbone
        features the former take (None: the description alone). ``units`` / ``prefix``: other
        units for the same levels and a prefix of their names (a neck that runs the pyramid
        more than once, as RFP; default ``level_units``, no prefix)."""
        units = self.level_units if units is None else units
        used = len(self.lateral_convs)
        down = [ChainStep(f'{prefix}level{i}', units[i],
                          partial(self._level_step, i, unit=units[i]),
                          [self.lateral_convs[i], self.fpn_convs[i]], leaves=True,
                          args=() if inputs is None else (inputs[i + self.start_level], ))
                for i in range(used - 1, -1, -1)]
        extra = [ChainStep(f'{prefix}level{i}', units[i],
                           partial(self._extra_step, i, unit=units[i]), self.fpn_convs[i],
                           leaves=True)
                 for i in range(used, len(self.fpn_convs))]
        return [down, extra]

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    def _level_step(self, i, top, feat, unit=None):
        """Level ``i`` through its unit: (its lateral for the level below, its output); the top
        level also returns its lateral for ``add_extra_convs='on_lateral'``."""
        unit = self.level_units[i] if unit is None else unit
        args = (feat, ) if top is None else (feat, top)
        lateral, out = unit(partial(self._level, i), *args,
                            module=[self.lateral_convs[i], self.fpn_convs[i]])
        return lateral, (out, lateral) if top is None else out

    def _level(self, i, feat, top=None):
        """Backbone level ``i``: (its lateral plus the upsampled level above, its output)."""
        lateral = self.lateral_convs[i](feat)
        if top is not None:
            if 'scale_factor' in self.upsample_cfg:
                up = F.interpolate(top, **self.upsample_cfg)
            else:
                up = F.interpolate(top, size=lateral.shape[2:], **self.upsample_cfg)
            lateral = lateral + up
        return lateral, self.fpn_convs[i](lateral)

    def _extra_step(self, i, previous, source=None, unit=None):
        """Extra level ``i`` through its unit, on ``source`` (the first) or the level below."""
        unit = self.level_units[i] if unit is None else unit
        out = unit(partial(self._extra, i), previous if source is None else source,
                   module=self.fpn_convs[i])
        return out, out

    def _extra(self, i, x):
        if i > len(self.lateral_convs) and self.relu_before_extra_convs:
            x = F.relu(x)
        return self.fpn_convs[i](x)

    @auto_fp16()
    def forward(self, inputs):
        return self._pyramid(inputs)

    def _pyramid(self, inputs, units=None, prefix=''):
        """The pyramid of ``inputs`` through ``units`` (see ``_checkpoint_steps``)."""
        if len(inputs) != len(self.in_channels):
            raise ValueError(f'{type(self).__name__} expects {len(self.in_channels)} inputs '
                             f'(in_channels), got {len(inputs)}')
        down, extra = self._checkpoint_steps(inputs, units, prefix)
        _, outs = self._run_chain(down, None)
        outs[0], top_lateral = outs[0]
        outs = outs[::-1]  # run top-down, returned bottom-up
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
