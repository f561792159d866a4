"""mmdet 2.x ``FPG``, Feature Pyramid Grids (Chen et al. 2020): 1x1 laterals (and extra levels)
form pathway 0, then ``stack_times`` pathways, each bottom-up ('bu') or top-down ('td'): a
level's new feature sums (in this order) the same-pathway transition of the level just made,
the across-lateral transition of the same level in the previous pathway, the across-up /
across-down transitions of its neighbours there, and the across-skip transition of pathway 0.
``skip_inds[i]`` lists the pathways in which level ``i`` is passed through unchanged. Each
output is the ``output_trans`` of the last pathway's level.

Keys: ``lateral_convs.{i}.*``, ``extra_downsamples.{i}.*`` (convs with ``add_extra_convs``),
``fpn_transitions.{s}.{i}.{same_up,same_down,across_lateral,across_down,across_up,
across_skip}.*`` (a ConvModule's ``conv`` / ``bn``, an ``UpInterpolationConv``'s ``conv.*``),
``output_transition.{i}.conv_out.*``.

Where mmdet's FPG fails, ours works and says so: ``across_skip_trans=dict(type='identity')``
(its default) is the identity (mmdet has no such transition type), ``skip_inds=None`` skips
nothing (mmdet indexes None), and an ``output_trans`` other than 'last_conv' is applied to the
last pathway's level (mmdet passes it the list of every pathway's). In a top-down pathway
``skip_inds`` names levels, as in a bottom-up one (mmdet checks the position in the pathway's
order there, so a skipped top-down level fails or passes the wrong level through).

Checkpoint units, one chain whose state is (pathway 0, the last pathway): ``lateral``,
``stage{s}`` per pathway, ``out{i}`` per output level (its output transition).
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import ConvModule, apply_init_cfg
from ..utils.pretrained import load_pretrained
from .nas_fpn import _level_range

__all__ = ['FPG', 'Transition', 'UpInterpolationConv', 'LastConv']


class Transition(nn.Module):
    """A connection of the grid: ``in_channels`` -> ``out_channels``."""

    def __init__(self, in_channels, out_channels, init_cfg=None):
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        apply_init_cfg(self, init_cfg)


class UpInterpolationConv(Transition):
    """Upsample (``F.interpolate``) then a ConvModule (``kwargs`` go to it)."""

    def __init__(self, in_channels, out_channels, scale_factor=2, mode='nearest',
                 align_corners=None, kernel_size=3, init_cfg=None, **kwargs):
        super().__init__(in_channels, out_channels)
        self.mode = mode
        self.scale_factor = scale_factor
        self.align_corners = align_corners
        self.conv = ConvModule(in_channels, out_channels, kernel_size,
                               padding=(kernel_size - 1) // 2, **kwargs)
        apply_init_cfg(self, init_cfg)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=self.scale_factor, mode=self.mode,
                          align_corners=self.align_corners)
        return self.conv(x)


class LastConv(Transition):
    """A ConvModule on the last of ``num_inputs`` features (a level's pathways)."""

    def __init__(self, in_channels, out_channels, num_inputs, kernel_size=3, init_cfg=None,
                 **kwargs):
        super().__init__(in_channels, out_channels)
        self.num_inputs = num_inputs
        self.conv_out = ConvModule(in_channels, out_channels, kernel_size,
                                   padding=(kernel_size - 1) // 2, **kwargs)
        apply_init_cfg(self, init_cfg)

    def forward(self, inputs):
        if len(inputs) != self.num_inputs:
            raise ValueError(f'LastConv expects {self.num_inputs} inputs, got {len(inputs)}')
        return self.conv_out(inputs[-1])


class _Identity(nn.Identity):
    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__()


_TRANS = ('same_up', 'same_down', 'across_lateral', 'across_down', 'across_up', 'across_skip')


@MODELS.register_module()
class FPG(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (list[int]), out_channels (int), num_outs (int).
        stack_times (int): number of pathways after the laterals.
        paths (list[str]): 'bu' or 'td' per pathway.
        inter_channels (int | list[int] | None): channels of each level in the grid.
        same_down_trans, same_up_trans, across_lateral_trans, across_down_trans,
        across_up_trans, across_skip_trans, output_trans (dict | None): transitions, by
            ``type`` 'conv' (ConvModule), 'interpolation_conv', 'last_conv' or 'identity',
            the other keys their arguments; None: no such connection.
        start_level, end_level (int): backbone outputs used.
        add_extra_convs (bool): extra levels by a stride-2 3x3 conv, else a stride-2 pooling.
        norm_cfg (dict | None): stored (mmdet's transitions take their own).
        skip_inds (list[tuple[int]] | None): per level, the pathways that pass it through.
        init_cfg (list[dict]): Caffe2 Xavier on Conv2d, constant 1 on the norms.
        with_cp (bool): ``'full'`` on every unit (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    transition_types = {'conv': ConvModule, 'interpolation_conv': UpInterpolationConv,
                        'last_conv': LastConv, 'identity': _Identity}

    def __init__(self, in_channels, out_channels, num_outs, stack_times, paths,
                 inter_channels=None, same_down_trans=None,
                 same_up_trans=dict(type='conv', kernel_size=3, stride=2, padding=1),
                 across_lateral_trans=dict(type='conv', kernel_size=1),
                 across_down_trans=dict(type='conv', kernel_size=3), across_up_trans=None,
                 across_skip_trans=dict(type='identity'),
                 output_trans=dict(type='last_conv', kernel_size=3), start_level=0,
                 end_level=-1, add_extra_convs=False, norm_cfg=None, skip_inds=None,
                 init_cfg=[dict(type='Caffe2Xavier', layer='Conv2d'),
                           dict(type='Constant', layer=['_BatchNorm', '_InstanceNorm',
                                                        'GroupNorm', 'LayerNorm'], val=1.0)],
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, list) or not in_channels:
            raise TypeError(f'FPG in_channels must be a non-empty list, got {in_channels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'FPG with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_ins = len(in_channels)
        self.num_outs = num_outs
        if inter_channels is None:
            inter_channels = [out_channels] * num_outs
        elif isinstance(inter_channels, int):
            inter_channels = [inter_channels] * num_outs
        elif not isinstance(inter_channels, list) or len(inter_channels) != num_outs:
            raise ValueError(f'FPG inter_channels must be None, an int or a list of {num_outs} '
                             f'(num_outs), got {inter_channels!r}')
        self.inter_channels = inter_channels
        self.stack_times = stack_times
        if not isinstance(paths, list) or len(paths) != stack_times \
                or any(p not in ('bu', 'td') for p in paths):
            raise ValueError(f"FPG paths must be a list of {stack_times} (stack_times) 'bu' or "
                             f"'td', got {paths!r}")
        self.paths = paths
        self.same_down_trans = same_down_trans
        self.same_up_trans = same_up_trans
        self.across_lateral_trans = across_lateral_trans
        self.across_down_trans = across_down_trans
        self.across_up_trans = across_up_trans
        self.output_trans = output_trans
        self.across_skip_trans = across_skip_trans
        self.with_bias = norm_cfg is None
        if skip_inds is None:
            skip_inds = [()] * num_outs
        if len(skip_inds) != num_outs:
            raise ValueError(f'FPG skip_inds must list the skipped pathways of each of the '
                             f'{num_outs} levels, got {skip_inds!r}')
        self.skip_inds = skip_inds
        self.backbone_end_level = _level_range('FPG', self.num_ins, num_outs, start_level,
                                               end_level)
        self.start_level = start_level
        self.end_level = end_level
        self.add_extra_convs = add_extra_convs
        self.init_cfg = init_cfg

        self.lateral_convs = nn.ModuleList(
            nn.Conv2d(in_channels[i], inter_channels[i - start_level], 1)
            for i in range(start_level, self.backbone_end_level))
        self.extra_downsamples = nn.ModuleList()
        for i in range(num_outs - self.backbone_end_level + start_level):
            if add_extra_convs:
                idx = self.backbone_end_level - start_level + i
                self.extra_downsamples.append(nn.Conv2d(
                    inter_channels[idx - 1], inter_channels[idx], 3, stride=2, padding=1))
            else:
                self.extra_downsamples.append(nn.MaxPool2d(1, stride=2))

        ch = inter_channels
        self.fpn_transitions = nn.ModuleList()
        for s in range(stack_times):
            stage = nn.ModuleList()
            for i in range(num_outs):
                trans = nn.ModuleDict()
                if s not in skip_inds[i]:
                    top, bottom = i == num_outs - 1, i == 0
                    trans['same_up'] = None if bottom else self.build_trans(
                        same_up_trans, ch[i - 1], ch[i])
                    trans['same_down'] = None if top else self.build_trans(
                        same_down_trans, ch[i + 1], ch[i])
                    trans['across_lateral'] = self.build_trans(across_lateral_trans, ch[i],
                                                               ch[i])
                    trans['across_down'] = None if top else self.build_trans(
                        across_down_trans, ch[i + 1], ch[i])
                    trans['across_up'] = None if bottom else self.build_trans(
                        across_up_trans, ch[i - 1], ch[i])
                    # mmdet's channels (those of the level below; of the top level for 0)
                    trans['across_skip'] = self.build_trans(across_skip_trans, ch[i - 1],
                                                            ch[i])
                stage.append(trans)
            self.fpn_transitions.append(stage)
        self.output_transition = nn.ModuleList(
            self.build_trans(output_trans, ch[i], out_channels, num_inputs=stack_times + 1)
            for i in range(num_outs))
        if any(t is None for t in self.output_transition):
            raise ValueError('FPG output_trans must be a transition, got None')
        self.relu = nn.ReLU(inplace=True)
        self.units = {name: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                      for name in ['lateral'] + [f'stage{s}' for s in range(stack_times)]
                      + [f'out{i}' for i in range(num_outs)]}
        apply_init_cfg(self, init_cfg)

    def build_trans(self, cfg, in_channels, out_channels, **extra_args):
        if cfg is None:
            return None
        cfg = dict(cfg)
        kind = cfg.pop('type', None)
        if kind not in self.transition_types:
            raise ValueError(f'FPG transition type must be one of '
                             f'{", ".join(self.transition_types)}, got {kind!r}')
        if kind != 'last_conv':
            extra_args.pop('num_inputs', None)
        return self.transition_types[kind](in_channels, out_channels, **cfg, **extra_args)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    @staticmethod
    def fuse(fuse_dict):
        out = None
        for item in fuse_dict.values():
            if item is not None:
                out = item if out is None else out + item
        return out

    def _laterals(self, *inputs):
        feats = [conv(inputs[i + self.start_level]) for i, conv in enumerate(self.lateral_convs)]
        for downsample in self.extra_downsamples:
            feats.append(downsample(feats[-1]))
        return tuple(feats)

    def _stage(self, s, n, *feats):
        """Pathway ``s`` from pathway 0 (``feats[:n]``) and the previous one (``feats[n:]``)."""
        first, current = feats[:n], feats[n:]
        td = self.paths[s] == 'td'
        made = []
        for j in range(self.num_outs):
            lvl = self.num_outs - j - 1 if td else j
            if s in self.skip_inds[lvl]:
                made.append(current[lvl])
                continue
            trans = self.fpn_transitions[s][lvl]
            same = trans['same_down'] if td else trans['same_up']
            to_fuse = dict(same=None, lateral=None, across_up=None, across_down=None)
            if same is not None:
                to_fuse['same'] = same(made[-1])
            if trans['across_lateral'] is not None:
                to_fuse['lateral'] = trans['across_lateral'](current[lvl])
            if lvl > 0 and trans['across_up'] is not None:
                to_fuse['across_up'] = trans['across_up'](current[lvl - 1])
            if lvl < self.num_outs - 1 and trans['across_down'] is not None:
                to_fuse['across_down'] = trans['across_down'](current[lvl + 1])
            if trans['across_skip'] is not None:
                to_fuse['across_skip'] = trans['across_skip'](first[lvl])
            made.append(self.fuse(to_fuse))
        return tuple(made[::-1] if td else made)

    def _output(self, i, x):
        trans = self.output_transition[i]
        return trans.conv_out(x) if isinstance(trans, LastConv) else trans(x)

    def _lateral_step(self, _, *inputs):
        modules = [self.lateral_convs, self.extra_downsamples]
        feats = list(self.units['lateral'](self._laterals, *inputs, module=modules))
        return (feats, feats), None

    def _stage_step(self, s, state):
        first, current = state
        made = self.units[f'stage{s}'](partial(self._stage, s, len(first)), *first, *current,
                                       module=self.fpn_transitions[s])
        return (first, list(made)), None

    def _out_step(self, i, state):
        out = self.units[f'out{i}'](partial(self._output, i), state[1][i],
                                    module=self.output_transition[i])
        return state, out

    def _checkpoint_steps(self, inputs=None):
        steps = [ChainStep('lateral', self.units['lateral'], self._lateral_step,
                           [self.lateral_convs, self.extra_downsamples],
                           () if inputs is None else tuple(inputs))]
        steps += [ChainStep(f'stage{s}', self.units[f'stage{s}'], partial(self._stage_step, s),
                            self.fpn_transitions[s]) for s in range(self.stack_times)]
        steps += [ChainStep(f'out{i}', self.units[f'out{i}'], partial(self._out_step, i),
                            self.output_transition[i], leaves=True)
                  for i in range(self.num_outs)]
        return [steps]

    def forward(self, inputs):
        if len(inputs) != self.num_ins:
            raise ValueError(f'FPG expects {self.num_ins} inputs (in_channels), '
                             f'got {len(inputs)}')
        _, outs = self._run_chain(self._checkpoint_steps(inputs)[0], None)
        return [o for o in outs if o is not None]
