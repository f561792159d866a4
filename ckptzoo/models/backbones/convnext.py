"""ConvNeXt (mmcls 0.25's ``ConvNeXt``: arguments, defaults, state-dict keys) with exact
checkpointing. Registered as ``ConvNeXt``; mmdet 2.x configs name it ``mmcls.ConvNeXt``
(scoped names resolve through :mod:`ckptzoo.registry`), so their mmcls checkpoints
(``init_cfg=dict(type='Pretrained', checkpoint=..., prefix='backbone.')``) load as they are.

Keys: ``downsample_layers.0.0 / .1`` (stem conv, norm), ``downsample_layers.{i}.0 / .1``
(norm, 2x2 stride-2 conv) for ``i >= 1``, ``stages.{i}.{j}.depthwise_conv / norm /
pointwise_conv1 / pointwise_conv2 / gamma``, ``norm{i}`` for each of ``out_indices``.
timm's ``convnext_*`` keys map one to one (``stem.0/1`` -> ``downsample_layers.0.0/1``,
``stages.{i}.downsample.0/1`` -> ``downsample_layers.{i}.0/1``, ``stages.{i}.blocks.{j}.conv_dw
/ norm / mlp.fc1 / mlp.fc2 / gamma`` -> ``stages.{i}.{j}.depthwise_conv / norm /
pointwise_conv1 / pointwise_conv2 / gamma``, ``head.norm`` -> ``norm3``); the features agree.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): every downsampling layer
``downsample_layers.{i}`` (the stem is ``downsample_layers.0``) and every block
``stages.{i}.{j}``, one chain. ``with_cp`` (one flag, or one per stage) sets the blocks to
``'full'``, as mmcls does, and also the stage's downsampling layer. Drop path draws as mmcv's
(:class:`~ckptzoo.models.utils.drop.DropPath`) and recomputes identically.
"""
from functools import partial

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointUnit, chain_and_rest, unit_step
from ..utils.conv_module import build_activation_layer
from ..utils.drop import DropPath
from ..utils.norm import build_norm_layer
from ..utils.pretrained import check_pretrained_cfg, load_pretrained
from .base import BaseBackbone

__all__ = ['ConvNeXt', 'ConvNeXtBlock']


class ConvNeXtBlock(nn.Module):
    """7x7 depth-wise conv, norm, pointwise conv (``mlp_ratio`` x), activation, pointwise
    conv, layer scale ``gamma``, drop path, residual; NCHW. ``linear_pw_conv``: the pointwise
    convs are ``nn.Linear`` on channels-last (mmcls's and the official default)."""

    def __init__(self, in_channels, norm_cfg=dict(type='LN2d', eps=1e-6),
                 act_cfg=dict(type='GELU'), mlp_ratio=4.0, linear_pw_conv=True,
                 drop_path_rate=0.0, layer_scale_init_value=1e-6):
        super().__init__()
        self.depthwise_conv = nn.Conv2d(in_channels, in_channels, 7, padding=3,
                                        groups=in_channels)
        self.linear_pw_conv = linear_pw_conv
        self.norm = build_norm_layer(norm_cfg, in_channels)[1]
        mid = int(mlp_ratio * in_channels)
        pw_conv = nn.Linear if linear_pw_conv else partial(nn.Conv2d, kernel_size=1)
        self.pointwise_conv1 = pw_conv(in_channels, mid)
        self.act = build_activation_layer(act_cfg)
        self.pointwise_conv2 = pw_conv(mid, in_channels)
        self.gamma = nn.Parameter(layer_scale_init_value * torch.ones(in_channels)) \
            if layer_scale_init_value > 0 else None
        self.drop_path = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()
        self.cp_unit = CheckpointUnit()

    def forward(self, x):
        out = self.norm(self.depthwise_conv(x))
        if self.linear_pw_conv:
            out = out.permute(0, 2, 3, 1)
        out = self.pointwise_conv2(self.act(self.pointwise_conv1(out)))
        if self.linear_pw_conv:
            out = out.permute(0, 3, 1, 2)
        if self.gamma is not None:
            out = out.mul(self.gamma.view(1, -1, 1, 1))
        return x + self.drop_path(out)


@MODELS.register_module()
class ConvNeXt(BaseBackbone):
    """ConvNeXt backbone (mmcls 0.25).

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large', 'xlarge', or
            ``dict(depths=[...], channels=[...])`` (sequences of one length).
        in_channels (int); stem_patch_size (int): the stem conv's kernel and stride.
        norm_cfg (dict): ``dict(type='LN2d', eps=1e-6)`` (mmcls's); act_cfg: ``GELU``.
        linear_pw_conv (bool): pointwise convs as ``nn.Linear`` (True) or 1x1 ``nn.Conv2d``.
        drop_path_rate (float): stochastic depth, rising linearly from 0 over all blocks.
        layer_scale_init_value (float): initial ``gamma``; 0 or less: no layer scale.
        out_indices (int | sequence[int]): stages returned (negative count from the end),
            each through its ``norm{i}``, NCHW (contiguous).
        frozen_stages (int): the first ``k`` stages with their downsampling layers are
            frozen (mmcls's; 0 nothing, -1 too).
        gap_before_final_norm (bool): global average pool before ``norm{i}``, outputs
            ``[N, C]`` (classification; mmdet configs set False).
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing of a stage's blocks and
            downsampling layer; cp_use_reentrant (bool): torch's reentrant implementation.
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=PATH, prefix=None)``.
    """

    arch_settings = {
        'tiny': dict(depths=[3, 3, 9, 3], channels=[96, 192, 384, 768]),
        'small': dict(depths=[3, 3, 27, 3], channels=[96, 192, 384, 768]),
        'base': dict(depths=[3, 3, 27, 3], channels=[128, 256, 512, 1024]),
        'large': dict(depths=[3, 3, 27, 3], channels=[192, 384, 768, 1536]),
        'xlarge': dict(depths=[3, 3, 27, 3], channels=[256, 512, 1024, 2048]),
    }

    def __init__(self, arch='tiny', in_channels=3, stem_patch_size=4,
                 norm_cfg=dict(type='LN2d', eps=1e-6), act_cfg=dict(type='GELU'),
                 linear_pw_conv=True, drop_path_rate=0.0, layer_scale_init_value=1e-6,
                 out_indices=-1, frozen_stages=0, gap_before_final_norm=True, with_cp=False,
                 cp_use_reentrant=False, init_cfg=None):
        super().__init__()
        arch = self._arch(arch)
        depths, channels = list(arch['depths']), list(arch['channels'])
        num_stages = len(depths)
        if not 0.0 <= float(drop_path_rate) < 1.0:
            raise ValueError(f'drop_path_rate must be in [0, 1), got {drop_path_rate!r}')
        self.out_indices = self._check_out_indices(out_indices, num_stages, negative=True)
        self.frozen_stages = self._check_frozen_stages(frozen_stages, num_stages)
        flags = self._stage_flags(with_cp, num_stages)
        self.init_cfg = check_pretrained_cfg(init_cfg, 'ConvNeXt')
        self.depths, self.channels, self.num_stages = depths, channels, num_stages
        self.gap_before_final_norm = gap_before_final_norm

        rates = torch.linspace(0, float(drop_path_rate), sum(depths), device='cpu').tolist()
        self.downsample_layers = nn.ModuleList()
        self.stages = nn.ModuleList()
        self.downsample_units = []
        for i, (depth, width) in enumerate(zip(depths, channels)):
            if i == 0:
                down = nn.Sequential(
                    nn.Conv2d(in_channels, width, stem_patch_size, stride=stem_patch_size),
                    build_norm_layer(norm_cfg, width)[1])
            else:
                down = nn.Sequential(build_norm_layer(norm_cfg, channels[i - 1])[1],
                                     nn.Conv2d(channels[i - 1], width, 2, stride=2))
            self.downsample_layers.append(down)
            self.downsample_units.append(CheckpointUnit.from_flag(flags[i], cp_use_reentrant))
            blocks = [ConvNeXtBlock(width, norm_cfg, act_cfg, linear_pw_conv=linear_pw_conv,
                                    drop_path_rate=rates[sum(depths[:i]) + j],
                                    layer_scale_init_value=layer_scale_init_value)
                      for j in range(depth)]
            for block in blocks:
                block.cp_unit = CheckpointUnit.from_flag(flags[i], cp_use_reentrant)
            self.stages.append(nn.Sequential(*blocks))
            if i in self.out_indices:
                self.add_module(f'norm{i}', build_norm_layer(norm_cfg, width)[1])
        self.out_channels = tuple(channels[i] for i in self.out_indices)
        self._freeze_stages()

    def _arch(self, arch):
        if isinstance(arch, dict):
            if set(arch) != {'depths', 'channels'}:
                raise ValueError(f'an arch dict needs exactly the keys channels, depths, got '
                                 f'{sorted(arch)}')
            depths, channels = arch['depths'], arch['channels']
            if not isinstance(depths, (list, tuple)) or not isinstance(channels, (list, tuple)) \
                    or not depths or len(depths) != len(channels) or any(
                        isinstance(v, bool) or not isinstance(v, int) or v < 1
                        for v in list(depths) + list(channels)):
                raise ValueError(f'arch depths and channels must be sequences of positive ints '
                                 f'of one length, got {arch!r}')
            return arch
        if arch not in self.arch_settings:
            raise ValueError(f'invalid arch {arch!r} for ConvNeXt: allowed are '
                             f'{", ".join(self.arch_settings)} or a dict with depths, channels')
        return self.arch_settings[arch]

    def init_weights(self):
        """Load the Pretrained ``init_cfg`` (non-strict); without one, torch's defaults stay
        (mmcls's ConvNeXt initialises nothing itself)."""
        load_pretrained(self, self.init_cfg, 'ConvNeXt')

    def _frozen_modules(self):
        return [m for i in range(self.frozen_stages)
                for m in (self.downsample_layers[i], self.stages[i])]

    def _checkpoint_steps(self):
        """One chain: per stage its downsampling layer and its blocks (the last one emits the
        stage output), up to the last stage ``out_indices`` takes."""
        steps = []
        for i, (down, stage) in enumerate(zip(self.downsample_layers, self.stages)):
            steps.append(unit_step(f'downsample_layers.{i}', self.downsample_units[i], down))
            steps += [unit_step(f'stages.{i}.{j}', block.cp_unit, block,
                                emit=i in self.out_indices and j == len(stage) - 1)
                      for j, block in enumerate(stage)]
            if i == max(self.out_indices):
                stop = len(steps)
        return chain_and_rest(steps, stop)

    def forward(self, x):
        """NCHW image -> one feature per ``out_indices`` through its ``norm{i}``: NCHW, or
        ``[N, C]`` with ``gap_before_final_norm`` (later stages do not run)."""
        feats = [f for f in self._run_chain(self._checkpoint_steps()[0], x)[1] if f is not None]
        outs = []
        for i, feat in zip(self.out_indices, feats):
            norm = getattr(self, f'norm{i}')
            if self.gap_before_final_norm:
                outs.append(norm(feat.mean([-2, -1], keepdim=True)).flatten(1))
            else:
                outs.append(norm(feat).contiguous())
        return tuple(outs)
