"""DenseNet-BC (mmcls-style arguments, torchvision state-dict keys) with exact checkpointing.

torchvision ``densenet121(...).state_dict()`` loads directly (same keys: ``features.conv0``,
``features.denseblock1.denselayer1.norm1``, ``features.transition1.conv``, ``features.norm5``;
its ``classifier.*`` is ignored by a non-strict load) and gives the same features.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`), in execution order: ``stem``
(conv0 / norm0 / relu0 / pool0), every dense layer ``denseblock{i}.denselayer{j}`` (under
``'full'`` and ``'offload'`` its concat -> BN -> ReLU -> 1x1 conv bottleneck, the region
torchvision's ``memory_efficient`` checkpoints; under ``'selective'`` the whole layer, keeping
only the convolutions' outputs), every transition ``transition{i}`` (norm / relu / 1x1 conv / avg pool) and the
final ``norm5`` + ReLU. ``with_cp`` sets them to ``'full'`` per dense block (the stem with the
first block's flag, a transition or norm5 with its block's flag); outputs, gradients and BN
buffers are those of the plain model in every mode. All units are one chain (the state inside a
dense block is the list of its features), so a segment may span layers, transitions and blocks.

Outputs (``out_indices``), one per dense block, each at the block's resolution and normalised:
index ``i`` is ``relu(norm(block_i(x)))`` with the BN that follows the block (the transition's
``norm``; ``norm5`` after the last block), i.e. the tensor torchvision's transition convolves,
and for the last index torchvision's final features after ``F.relu``. Strides are 4, 8, 16, 32
and the channels are ``init_channels + depth_i * growth_rate`` for the first block, then
``int(prev * compression) + depth_i * growth_rate`` (``DenseNet.out_channels`` gives them per
index):

    densenet121: (256, 512, 1024, 1024)    densenet169: (256, 512, 1280, 1664)
    densenet201: (256, 512, 1792, 1920)    densenet161: (384, 768, 2112, 2208)

(mmcls returns the transition's pooled output instead, strides 8, 16, 32, 32, unusable by an
FPN; here the pyramid is the usual one, e.g. ``out_indices=(1, 2, 3)`` -> 512, 1024, 1024
channels at strides 8, 16, 32 for densenet121.)
"""
from collections import OrderedDict
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointUnit, chain_and_rest, checkpoint, unit_step
from ..utils import build_norm_layer
from ..utils.pretrained import load_pretrained, pretrained_to_init_cfg
from .base import BaseBackbone

__all__ = ['DenseNet', 'DenseLayer', 'DenseBlock', 'DenseTransition']


def _norm(norm_cfg, channels):
    return build_norm_layer(norm_cfg, channels)[1]


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv bottleneck over the concatenated inputs, then BN-ReLU-3x3 conv."""

    def __init__(self, in_channels, growth_rate, bn_size, drop_rate, norm_cfg,
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        mid = bn_size * growth_rate
        self.norm1 = _norm(norm_cfg, in_channels)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.norm2 = _norm(norm_cfg, mid)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(mid, growth_rate, 3, padding=1, bias=False)
        self.drop_rate = float(drop_rate)
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    @property
    def with_cp(self):
        return self.cp_unit.mode is not None

    def bottleneck(self, *inputs):
        return self.conv1(self.relu1(self.norm1(torch.cat(inputs, 1))))

    def _tail(self, x):
        return self.conv2(self.relu2(self.norm2(x)))

    def forward(self, inputs):
        # tensors as separate arguments: the reentrant implementation sees no tensor in a list
        bottleneck = [self.norm1, self.relu1, self.conv1]
        if self.cp_unit.mode != 'selective':
            return self._dropout(self._tail(self.cp_unit(self.bottleneck, *inputs,
                                                         module=bottleneck)))
        # 'selective' keeps both convolutions' outputs and recomputes the BN-ReLU before each.
        # In this BN-ReLU-conv chain that is one 'full' checkpoint per BN-ReLU-conv: each keeps
        # its input (the concatenated features, then conv1's output) and its recompute stops
        # before the convolution (non-reentrant early stop). Same tensors kept and recomputed as
        # a selective policy over the layer, without its per-op Python dispatch (~0.8 ms a
        # layer on CPU), and the ReLUs stay in place. Neither region draws random numbers
        # (dropout comes after), so no RNG state is kept for them.
        out = checkpoint(self.bottleneck, *inputs, module=bottleneck, preserve_rng_state=False)
        out = checkpoint(self._tail, out, module=[self.norm2, self.relu2, self.conv2],
                         preserve_rng_state=False)
        return self._dropout(out)

    def _dropout(self, out):
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        return out


def _layer_step(layer, state):
    """A dense layer in a chain: the block's features so far (a tensor at the block's start)
    grow by the layer's output."""
    features = state if isinstance(state, list) else [state]
    return features + [layer(features)], None


class DenseBlock(nn.ModuleDict):
    """``denselayer1..n`` (torchvision's keys); returns the concatenation of all features."""

    def __init__(self, num_layers, in_channels, growth_rate, **layer_kwargs):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f'denselayer{i + 1}',
                            DenseLayer(in_channels + i * growth_rate, growth_rate, **layer_kwargs))

    def forward(self, x):
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseTransition(nn.Module):
    """BN-ReLU (the block's normalised output), 1x1 conv (compression), 2x2 average pooling."""

    def __init__(self, in_channels, out_channels, norm_cfg):
        super().__init__()
        self.norm = _norm(norm_cfg, in_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x, return_feat=False):
        feat = self.relu(self.norm(x))
        down = self.pool(self.conv(feat))
        return (feat, down) if return_feat else down


@MODELS.register_module()
class DenseNet(BaseBackbone):
    """DenseNet-BC backbone.

    Args:
        arch (str | int | dict): '121', '169', '201', '161' (or the int), or
            ``dict(growth_rate=32, depths=(6, 12, 24, 16), init_channels=64)``.
        in_channels (int): input image channels.
        bn_size (int): bottleneck width is ``bn_size * growth_rate``.
        drop_rate (float): dropout after each dense layer (torchvision's).
        compression (float): channel reduction of the transitions, in (0, 1].
        out_indices (int | sequence[int]): dense blocks whose normalised outputs are returned
            (see the module docstring); negative indices count from the end. Default: the last.
        frozen_stages (int): -1 freezes nothing, 0 the stem, ``k`` the stem and the first ``k``
            dense blocks with their transitions.
        norm_eval (bool): keep BatchNorm layers in eval mode while training.
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing for all dense blocks or one flag
            per block; the stem follows the first block's flag, a transition (norm5 for the
            last block) its block's flag. ``set_checkpoint_plan`` changes modes later; the
            attribute ``with_cp`` reads them (:attr:`BaseBackbone.with_cp`).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=PATH or 'torchvision://NAME')``.
    """

    arch_settings = {
        '121': dict(growth_rate=32, depths=(6, 12, 24, 16), init_channels=64),
        '169': dict(growth_rate=32, depths=(6, 12, 32, 32), init_channels=64),
        '201': dict(growth_rate=32, depths=(6, 12, 48, 32), init_channels=64),
        '161': dict(growth_rate=48, depths=(6, 12, 36, 24), init_channels=96),
    }

    def __init__(self, arch='121', in_channels=3, bn_size=4, drop_rate=0.0, compression=0.5,
                 out_indices=-1, frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=True),
                 norm_eval=False, with_cp=False, cp_use_reentrant=False, pretrained=None,
                 init_cfg=None):
        super().__init__()
        arch = self._arch(arch)
        growth, depths, init_channels = arch['growth_rate'], arch['depths'], arch['init_channels']
        num_blocks = len(depths)
        if not isinstance(bn_size, int) or bn_size < 1:
            raise ValueError(f'bn_size must be a positive int, got {bn_size!r}')
        if not 0.0 <= float(drop_rate) < 1.0:
            raise ValueError(f'drop_rate must be in [0, 1), got {drop_rate!r}')
        if not 0.0 < float(compression) <= 1.0:
            raise ValueError(f'compression must be in (0, 1], got {compression!r}')
        self.out_indices = self._check_out_indices(out_indices, num_blocks, 'dense block',
                                                   'blocks', negative=True)
        self._check_frozen_stages(frozen_stages, num_blocks)
        init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        self.growth_rate, self.depths, self.init_channels = growth, tuple(depths), init_channels
        self.num_blocks = num_blocks
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        flags = self._stage_flags(with_cp, num_blocks, 'dense block')
        self.stem_unit = CheckpointUnit.from_flag(flags[0], cp_use_reentrant)
        # transition{i + 1} after block i; the last one is norm5 (+ ReLU)
        self.transition_units = [CheckpointUnit.from_flag(f, cp_use_reentrant) for f in flags]
        self.cp_use_reentrant = cp_use_reentrant
        self.init_cfg = init_cfg

        layers = OrderedDict(
            conv0=nn.Conv2d(in_channels, init_channels, 7, stride=2, padding=3, bias=False),
            norm0=_norm(norm_cfg, init_channels), relu0=nn.ReLU(inplace=True),
            pool0=nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        channels, block_channels = init_channels, []
        for i, depth in enumerate(depths):
            layers[f'denseblock{i + 1}'] = DenseBlock(
                depth, channels, growth, bn_size=bn_size, drop_rate=drop_rate,
                norm_cfg=norm_cfg, with_cp=flags[i], cp_use_reentrant=cp_use_reentrant)
            channels += depth * growth
            block_channels.append(channels)
            if i < num_blocks - 1:
                out = int(channels * compression)
                layers[f'transition{i + 1}'] = DenseTransition(channels, out, norm_cfg)
                channels = out
        layers[f'norm{num_blocks + 1}'] = _norm(norm_cfg, channels)
        self.features = nn.ModuleDict(layers)
        self.block_channels = tuple(block_channels)
        self.out_channels = tuple(block_channels[i] for i in self.out_indices)
        self.feat_dim = block_channels[-1]
        self._init_default_weights()
        self._freeze_stages()

    def _arch(self, arch):
        if isinstance(arch, dict):
            keys = {'growth_rate', 'depths', 'init_channels'}
            if set(arch) != keys:
                raise ValueError(f'an arch dict needs exactly the keys {sorted(keys)}, '
                                 f'got {sorted(arch)}')
            depths = arch['depths']
            ints = [arch['growth_rate'], arch['init_channels'], *depths] \
                if isinstance(depths, (list, tuple)) and depths else [0]
            if any(not isinstance(v, int) or v < 1 for v in ints):
                raise ValueError(f'arch growth_rate, init_channels and depths must be positive '
                                 f'ints (depths a non-empty sequence), got {arch!r}')
            return arch
        if str(arch) not in self.arch_settings:
            raise ValueError(f'invalid arch {arch!r} for DenseNet: allowed are '
                             f'{", ".join(self.arch_settings)} or a dict with growth_rate, '
                             'depths, init_channels')
        return self.arch_settings[str(arch)]

    @property
    def final_norm(self):
        return self.features[f'norm{self.num_blocks + 1}']

    def _stem_modules(self):
        return [self.features[k] for k in ('conv0', 'norm0', 'relu0', 'pool0')]

    def _stem_forward(self, x):
        f = self.features
        return f.pool0(f.relu0(f.norm0(f.conv0(x))))

    def _final_forward(self, x):
        return F.relu(self.final_norm(x))

    def _init_default_weights(self):
        """torchvision's initialisation (kaiming normal convs, unit norms)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, (_BatchNorm, nn.GroupNorm)) and m.weight is not None:
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def init_weights(self):
        """Load ``init_cfg=dict(type='Pretrained', checkpoint=...)`` if given (torchvision
        DenseNet checkpoints load as they are)."""
        load_pretrained(self, self.init_cfg, 'DenseNet')

    def _stage_modules(self, i):
        """Dense block ``i`` (0-based) and the norm after it."""
        nxt = self.features[f'transition{i + 1}'] if i < self.num_blocks - 1 else self.final_norm
        return [self.features[f'denseblock{i + 1}'], nxt]

    def _frozen_modules(self):
        frozen = self._stem_modules() if self.frozen_stages >= 0 else []
        for i in range(self.frozen_stages):
            frozen += self._stage_modules(i)
        return frozen

    def _after_block(self, i, features):
        """Transition ``i`` (norm5 after the last block) on the block's concatenated features:
        ``(the next block's input, the normalised output or None)``."""
        x = torch.cat(features, 1)
        unit = self.transition_units[i]
        if i == self.num_blocks - 1:
            out = unit(self._final_forward, x, module=self.final_norm)
            return out, out
        trans = self.features[f'transition{i + 1}']
        if i in self.out_indices:
            # partial, not a lambda: the recompute in backward runs after the loop moved on
            feat, x = unit(partial(trans, return_feat=True), x, module=trans)
            return x, feat
        return unit(trans, x, module=trans), None

    def _checkpoint_steps(self):
        """One chain: the stem, then per dense block its layers and its transition (norm5
        after the last block), up to the last block ``out_indices`` takes; the units after it
        never run. A dense layer's output stays in the state to its block's end, so it leaves
        a segment that ends inside the block."""
        steps = [unit_step('stem', self.stem_unit, self._stem_forward, self._stem_modules())]
        for i in range(self.num_blocks):
            for name, layer in self.features[f'denseblock{i + 1}'].items():
                steps.append(ChainStep(f'denseblock{i + 1}.{name}', layer.cp_unit,
                                       partial(_layer_step, layer), layer, leaves=True))
            name = f'norm{i + 2}' if i == self.num_blocks - 1 else f'transition{i + 1}'
            steps.append(ChainStep(name, self.transition_units[i], partial(self._after_block, i),
                                   self._stage_modules(i)[1], leaves=i in self.out_indices))
            if i == max(self.out_indices):
                stop = len(steps)
        return chain_and_rest(steps, stop)

    def forward(self, x):
        """Normalised outputs of the dense blocks in ``out_indices``; blocks after the last
        requested one are not run."""
        _, outs = self._run_chain(self._checkpoint_steps()[0], x)
        return tuple(o for o in outs if o is not None)
