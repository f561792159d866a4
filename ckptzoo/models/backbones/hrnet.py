"""HRNet (mmdet 2.28.2's arguments, semantics and state-dict keys) with exact activation
checkpointing.

Keys as mmdet's: ``conv1``, ``norm1`` (``bn1``), ``conv2``, ``bn2``, ``layer1.*``,
``transition{1,2,3}.{i}.*``, ``stage{2,3,4}.{m}.branches.{b}.{k}.*`` and
``stage{2,3,4}.{m}.fuse_layers.{i}.{j}.*``, so mmdet 2.x checkpoints load unchanged.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`), in execution order: ``stem`` (conv1 /
norm1 / ReLU / conv2 / norm2 / ReLU, which mmdet leaves out), every block (``layer1.{k}``,
``stage{s}.{m}.branches.{b}.{k}``: as ResNet's, the block's ``_inner_forward`` with the last ReLU
outside), each transition (``transition{t}``: its new branches, from the previous stage's last
output), and each HRModule's fuse step (``stage{s}.{m}.fuse``: every fuse layer, the sums and
their ReLUs, from the branch outputs to the module's outputs). ``with_cp`` sets them all to
``'full'``; mmdet checkpoints the blocks only. They are one chain whose state is the list of
branch tensors: a segment may span blocks, fuses and stages.
"""
from functools import partial

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointUnit, chain_step, unit_step
from ..utils import apply_init_cfg, build_norm_layer
from ..utils.pretrained import load_pretrained, pretrained_to_init_cfg
from .base import BaseBackbone
from .resnet import BasicBlock, Bottleneck

__all__ = ['HRModule', 'HRNet']

_STAGE_KEYS = ('num_modules', 'num_branches', 'block', 'num_blocks', 'num_channels')


def _conv(cin, cout, kernel, stride=1):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


def _norm(norm_cfg, channels):
    return build_norm_layer(norm_cfg, channels)[1]


class HRModule(nn.Module):
    """mmdet's HRModule: ``num_branches`` branches of blocks, then the fuse layers (every
    output branch sums every input branch, upsampled by a 1x1 conv + nearest upsampling or
    downsampled by stride-2 3x3 convs, then a ReLU). ``in_channels`` is updated in place, as
    mmdet's. ``fuse_unit`` is the fuse step's checkpoint unit."""

    def __init__(self, num_branches, blocks, num_blocks, in_channels, num_channels,
                 multiscale_output=True, with_cp=False, conv_cfg=None,
                 norm_cfg=dict(type='BN'), cp_use_reentrant=False):
        super().__init__()
        for name, value in (('NUM_BLOCKS', num_blocks), ('NUM_CHANNELS', num_channels),
                            ('NUM_INCHANNELS', in_channels)):
            if num_branches != len(value):
                raise ValueError(f'NUM_BRANCHES({num_branches}) != {name}({len(value)})')
        if conv_cfg is not None:
            raise NotImplementedError(f'HRModule conv_cfg is not supported, got {conv_cfg!r}')
        self.in_channels = in_channels
        self.num_branches = num_branches
        self.multiscale_output = multiscale_output
        self.norm_cfg = norm_cfg
        self.conv_cfg = conv_cfg
        self.branches = nn.ModuleList(
            self._make_one_branch(i, blocks, num_blocks, num_channels, with_cp,
                                  cp_use_reentrant) for i in range(num_branches))
        self.fuse_layers = self._make_fuse_layers()
        self.relu = nn.ReLU(inplace=False)
        self.fuse_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    def _make_one_branch(self, index, block, num_blocks, num_channels, with_cp, reentrant):
        planes = num_channels[index]
        downsample = None
        if self.in_channels[index] != planes * block.expansion:
            downsample = nn.Sequential(_conv(self.in_channels[index], planes * block.expansion, 1),
                                       _norm(self.norm_cfg, planes * block.expansion))
        kwargs = dict(with_cp=with_cp, cp_use_reentrant=reentrant, norm_cfg=self.norm_cfg)
        layers = [block(self.in_channels[index], planes, 1, downsample=downsample, **kwargs)]
        self.in_channels[index] = planes * block.expansion
        layers += [block(self.in_channels[index], planes, **kwargs)
                   for _ in range(1, num_blocks[index])]
        return nn.Sequential(*layers)

    def _make_fuse_layers(self):
        if self.num_branches == 1:
            return None
        ch = self.in_channels
        fuse_layers = nn.ModuleList()
        for i in range(self.num_branches if self.multiscale_output else 1):
            layer = []
            for j in range(self.num_branches):
                if j > i:
                    layer.append(nn.Sequential(
                        _conv(ch[j], ch[i], 1), _norm(self.norm_cfg, ch[i]),
                        nn.Upsample(scale_factor=2**(j - i), mode='nearest')))
                elif j == i:
                    layer.append(None)
                else:
                    downs = []
                    for k in range(i - j):
                        if k == i - j - 1:
                            downs.append(nn.Sequential(_conv(ch[j], ch[i], 3, 2),
                                                       _norm(self.norm_cfg, ch[i])))
                        else:
                            downs.append(nn.Sequential(_conv(ch[j], ch[j], 3, 2),
                                                       _norm(self.norm_cfg, ch[j]),
                                                       nn.ReLU(inplace=False)))
                    layer.append(nn.Sequential(*downs))
            fuse_layers.append(nn.ModuleList(layer))
        return fuse_layers

    def _fuse(self, *x):
        """mmdet's fuse, in its order of additions: output ``i`` is
        ``relu(sum_j fuse_layers[i][j](x[j]))`` with ``x[i]`` itself for ``j == i``."""
        outs = []
        for i, layer in enumerate(self.fuse_layers):
            y = None
            for j in range(self.num_branches):
                t = x[j] if i == j else layer[j](x[j])
                y = t if y is None else y + t
            outs.append(self.relu(y))
        return tuple(outs)

    def fuse(self, x):
        """The fuse step through its unit (the module's outputs, a list)."""
        if self.fuse_layers is None:
            return list(x)
        return list(self.fuse_unit(self._fuse, *x, module=self.fuse_layers))

    def forward(self, x):
        if self.num_branches == 1:
            return [self.branches[0](x[0])]
        x = [self.branches[i](x[i]) for i in range(self.num_branches)]
        return self.fuse(x)


def _branch_call(block, b, state):
    state = list(state)
    state[b] = block(state[b])
    return state


def _as_list(x):
    return [x]


def _check_extra(extra):
    if not isinstance(extra, dict):
        raise TypeError(f'HRNet extra must be a dict of stage1..stage4, got {extra!r}')
    for s in range(1, 5):
        key = f'stage{s}'
        if key not in extra:
            raise ValueError(f"HRNet extra needs '{key}' (stage1..stage4), got keys "
                             f'{sorted(extra)}')
        cfg = extra[key]
        missing = [k for k in _STAGE_KEYS if k not in cfg]
        if missing:
            raise ValueError(f"HRNet extra['{key}'] misses {missing} (needs "
                             f'{", ".join(_STAGE_KEYS)})')
        if cfg['block'] not in HRNet.blocks_dict:
            raise ValueError(f"HRNet extra['{key}']['block'] must be 'BASIC' or 'BOTTLENECK', "
                             f"got {cfg['block']!r}")
        n = cfg['num_branches']
        for k in ('num_blocks', 'num_channels'):
            if len(cfg[k]) != n:
                raise ValueError(f"HRNet extra['{key}']['{k}'] needs {n} entries "
                                 f"(num_branches), got {cfg[k]!r}")
        if cfg['num_modules'] < 1:
            raise ValueError(f"HRNet extra['{key}']['num_modules'] must be at least 1, "
                             f"got {cfg['num_modules']!r}")


@MODELS.register_module()
class HRNet(BaseBackbone):
    """HRNet backbone (Sun et al. 2019), mmdet 2.28.2's.

    Args:
        extra (dict): ``stage1`` .. ``stage4``, each with ``num_modules``, ``num_branches``,
            ``block`` ('BASIC' or 'BOTTLENECK'), ``num_blocks`` and ``num_channels`` (one per
            branch); a missing or malformed key is refused, naming it.
        in_channels (int): image channels.
        conv_cfg (None): only plain convolutions are supported.
        norm_cfg (dict): norm layers' config.
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        with_cp (bool): ``'full'`` checkpointing of every unit (see the module docstring);
            ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint (not an mmdet argument).
        zero_init_residual (bool): accepted and, as in mmdet 2.28.2, without effect (its block
            init_cfg is only set when the module has no ``init_cfg`` attribute, which never
            happens).
        multiscale_output (bool): all four branches out (True) or only the first.
        frozen_stages (int): not an mmdet 2.28.2 argument (mmseg's): -1 freezes nothing, 0 the
            stem, 1 also ``layer1``, ``s`` > 1 also ``transition{s-1}`` and ``stage{s}``.
        pretrained (str): deprecated, ``init_cfg=dict(type='Pretrained', checkpoint=...)``.
        init_cfg: default (neither given) mmdet's Kaiming on Conv2d and constant 1 on norms,
            applied at construction; ``Pretrained`` is loaded by ``init_weights``.
    """

    blocks_dict = {'BASIC': BasicBlock, 'BOTTLENECK': Bottleneck}

    def __init__(self, extra, in_channels=3, conv_cfg=None, norm_cfg=dict(type='BN'),
                 norm_eval=True, with_cp=False, zero_init_residual=False,
                 multiscale_output=True, frozen_stages=-1, cp_use_reentrant=False,
                 pretrained=None, init_cfg=None):
        super().__init__()
        if pretrained is not None and not isinstance(pretrained, str):
            raise TypeError(f'pretrained must be a str or None, got {pretrained!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'HRNet with_cp must be a bool, got {with_cp!r}')
        if conv_cfg is not None:
            raise NotImplementedError(f'HRNet conv_cfg is not supported, got {conv_cfg!r}')
        _check_extra(extra)
        self._check_frozen_stages(frozen_stages, 4)
        init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        if init_cfg is None:
            init_cfg = [dict(type='Kaiming', layer='Conv2d'),
                        dict(type='Constant', val=1, layer=['_BatchNorm', 'GroupNorm'])]
        self.pretrained = pretrained
        self.init_cfg = init_cfg
        self.extra = extra
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.norm_eval = norm_eval
        self.zero_init_residual = zero_init_residual
        self.multiscale_output = multiscale_output
        self.frozen_stages = frozen_stages
        self.cp_use_reentrant = cp_use_reentrant
        unit = partial(CheckpointUnit.from_flag, with_cp, cp_use_reentrant)

        self.norm1_name, norm1 = build_norm_layer(norm_cfg, 64, postfix=1)
        self.norm2_name, norm2 = build_norm_layer(norm_cfg, 64, postfix=2)
        self.conv1 = _conv(in_channels, 64, 3, 2)
        self.add_module(self.norm1_name, norm1)
        self.conv2 = _conv(64, 64, 3, 2)
        self.add_module(self.norm2_name, norm2)
        self.relu = nn.ReLU(inplace=True)
        self.stem_unit = unit()

        self.stage1_cfg = extra['stage1']
        block = self.blocks_dict[self.stage1_cfg['block']]
        planes = self.stage1_cfg['num_channels'][0]
        self.layer1 = self._make_layer(block, 64, planes, self.stage1_cfg['num_blocks'][0],
                                       with_cp)
        pre = [planes * block.expansion]
        self.transition_units = []
        for s in (2, 3, 4):
            cfg = extra[f'stage{s}']
            setattr(self, f'stage{s}_cfg', cfg)
            block = self.blocks_dict[cfg['block']]
            channels = [c * block.expansion for c in cfg['num_channels']]
            setattr(self, f'transition{s - 1}', self._make_transition_layer(pre, channels))
            self.transition_units.append(unit())
            stage, pre = self._make_stage(cfg, channels, with_cp,
                                          multiscale_output if s == 4 else True)
            setattr(self, f'stage{s}', stage)
        apply_init_cfg(self, init_cfg)
        self._freeze_stages()

    @property
    def norm1(self):
        return getattr(self, self.norm1_name)

    @property
    def norm2(self):
        return getattr(self, self.norm2_name)

    def _make_transition_layer(self, pre, cur):
        layers = []
        for i in range(len(cur)):
            if i < len(pre):
                if cur[i] != pre[i]:
                    layers.append(nn.Sequential(_conv(pre[i], cur[i], 3),
                                                _norm(self.norm_cfg, cur[i]),
                                                nn.ReLU(inplace=True)))
                else:
                    layers.append(None)
            else:
                downs = []
                for j in range(i + 1 - len(pre)):
                    cin = pre[-1]
                    cout = cur[i] if j == i - len(pre) else cin
                    downs.append(nn.Sequential(_conv(cin, cout, 3, 2), _norm(self.norm_cfg, cout),
                                               nn.ReLU(inplace=True)))
                layers.append(nn.Sequential(*downs))
        return nn.ModuleList(layers)

    def _make_layer(self, block, inplanes, planes, num_blocks, with_cp):
        downsample = None
        if inplanes != planes * block.expansion:
            downsample = nn.Sequential(_conv(inplanes, planes * block.expansion, 1),
                                       _norm(self.norm_cfg, planes * block.expansion))
        kwargs = dict(with_cp=with_cp, cp_use_reentrant=self.cp_use_reentrant,
                      norm_cfg=self.norm_cfg)
        layers = [block(inplanes, planes, 1, downsample=downsample, **kwargs)]
        layers += [block(planes * block.expansion, planes, **kwargs)
                   for _ in range(1, num_blocks)]
        return nn.Sequential(*layers)

    def _make_stage(self, cfg, in_channels, with_cp, multiscale_output=True):
        block = self.blocks_dict[cfg['block']]
        modules = []
        for i in range(cfg['num_modules']):
            # multiscale_output only applies to the last module
            multiscale = multiscale_output or i != cfg['num_modules'] - 1
            modules.append(HRModule(cfg['num_branches'], block, cfg['num_blocks'], in_channels,
                                    cfg['num_channels'], multiscale, with_cp=with_cp,
                                    norm_cfg=self.norm_cfg, conv_cfg=self.conv_cfg,
                                    cp_use_reentrant=self.cp_use_reentrant))
        return nn.Sequential(*modules), in_channels

    def _stem_modules(self):
        return [self.conv1, self.norm1, self.conv2, self.norm2, self.relu]

    def _stem_forward(self, x):
        x = self.relu(self.norm1(self.conv1(x)))
        return self.relu(self.norm2(self.conv2(x)))

    def _new_branches(self, t, x):
        """The new tensors of transition ``t`` (its non-None entries), all from ``x``."""
        layer = getattr(self, f'transition{t}')
        return tuple(m(x) for m in layer if m is not None)

    def _transition(self, t, y):
        """mmdet's transition: entry ``i`` is ``y[i]`` where the layer is None, else the layer
        on the last of ``y``; the new tensors through the transition's unit."""
        layer = getattr(self, f'transition{t}')
        made = []
        if any(m is not None for m in layer):
            modules = [m for m in layer if m is not None]
            made = list(self.transition_units[t - 1](partial(self._new_branches, t), y[-1],
                                                     module=modules))
        return [y[i] if m is None else made.pop(0) for i, m in enumerate(layer)]

    def init_weights(self):
        """Load ``init_cfg=dict(type='Pretrained', checkpoint=...)`` if given; the other kinds
        were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    def _frozen_modules(self):
        if self.frozen_stages < 0:
            return []
        modules = [self.conv1, self.norm1, self.conv2, self.norm2]
        for s in range(1, self.frozen_stages + 1):
            if s == 1:
                modules.append(self.layer1)
            else:
                modules += [getattr(self, f'transition{s - 1}'), getattr(self, f'stage{s}')]
        return modules

    def _checkpoint_steps(self):
        """One chain: stem, ``layer1`` blocks, then per stage its transition and, per module,
        its branches' blocks and its fuse; the state is the list of branch tensors (a tensor
        until ``layer1`` ends). The last step emits the outputs."""
        steps = [unit_step('stem', self.stem_unit, self._stem_forward, self._stem_modules())]
        steps += [chain_step(f'layer1.{k}', b.cp_unit, b, b) for k, b in enumerate(self.layer1)]
        for s in (2, 3, 4):
            t = s - 1
            layer = getattr(self, f'transition{t}')
            call = partial(self._transition, t)
            if t == 1:
                call = _compose(call, _as_list)
            steps.append(chain_step(f'transition{t}', self.transition_units[t - 1], call,
                                    [m for m in layer if m is not None]))
            for m, module in enumerate(getattr(self, f'stage{s}')):
                for b, branch in enumerate(module.branches):
                    for k, block in enumerate(branch):
                        steps.append(chain_step(f'stage{s}.{m}.branches.{b}.{k}', block.cp_unit,
                                                partial(_branch_call, block, b), block))
                if module.fuse_layers is not None:
                    steps.append(chain_step(f'stage{s}.{m}.fuse', module.fuse_unit, module.fuse,
                                            module.fuse_layers))
        last = steps[-1]
        steps[-1] = chain_step(last.name, last.unit, _state_of(last.fn), last.module, emit=True)
        return [steps]

    def forward(self, x):
        if getattr(self, '_cp_segments', None):
            _, outs = self._run_chain(self._checkpoint_steps()[0], x)
            return outs[-1]
        # no segment: the stages run as modules, so hooks on them fire as in mmdet
        x = self.layer1(self.stem_unit(self._stem_forward, x, module=self._stem_modules()))
        y = [x]
        for s in (2, 3, 4):
            y = getattr(self, f'stage{s}')(self._transition(s - 1, y))
        return y


def _compose(f, g):
    return lambda state: f(g(state))


def _state_of(fn):
    """A chain step's function as a ``call`` (state -> state) for :func:`chain_step`."""
    return lambda state: fn(state)[0]
