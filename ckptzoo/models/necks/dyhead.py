"""mmdet 2.x ``DyHead`` neck (Dai et al. 2021, Dynamic Head): ``num_blocks`` DyHeadBlocks, each
on every pyramid level applying scale-aware attention (a pooled 1x1 conv, ReLU and HSigmoid
weighting each of the level's, the level below's (stride 2) and the level above's (bilinear
upsampled, ``align_corners=True``) modulated deformable convs, whose offsets and masks come from
the level itself), the mean of those, then task-aware attention (DyReLU).

Keys: ``dyhead_blocks.{i}.spatial_conv_{high,mid,low}.conv.{weight}`` (``.norm.*``: GN 16),
``.spatial_conv_offset.*``, ``.scale_attn_module.1.*``, ``.task_attn_module.conv{1,2}.conv.*``.

Checkpoint units: ``block{i}``, one per DyHeadBlock, one chain whose state is all levels.
"""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...ops.deform_conv import ModulatedDeformConv2d
from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import DyReLU, build_activation_layer, build_norm_layer, constant_init, normal_init

__all__ = ['DyHead', 'DyHeadBlock', 'DyDCNv2']


class DyDCNv2(nn.Module):
    """A 3x3 ModulatedDeformConv2d (offset and mask given: DyHead computes them from the
    middle level) and a norm (GN 16 by default; the conv has a bias only without a norm)."""

    def __init__(self, in_channels, out_channels, stride=1,
                 norm_cfg=dict(type='GN', num_groups=16, requires_grad=True)):
        super().__init__()
        self.with_norm = norm_cfg is not None
        self.conv = ModulatedDeformConv2d(in_channels, out_channels, 3, stride=stride,
                                          padding=1, bias=not self.with_norm)
        if self.with_norm:
            self.norm = build_norm_layer(norm_cfg, out_channels)[1]

    def forward(self, x, offset, mask):
        h = (x.size(2) + 2 - 3) // self.conv.stride[0] + 1
        w = (x.size(3) + 2 - 3) // self.conv.stride[1] + 1
        offset, mask = _as_kernel_reads(offset, h, w), _as_kernel_reads(mask, h, w)
        x = self.conv(x.contiguous(), offset, mask)
        return self.norm(x) if self.with_norm else x


def _as_kernel_reads(t, h, w):
    """``t`` ``[B, C, H', W']`` as mmcv's compiled kernel reads it for an ``h x w`` output: each
    image's buffer from its start, ``C x h x w`` of it. DyHead gives the level above the middle
    level's (larger) offsets and masks; the kernel then reads the first ``C*h*w`` values of each
    image's ones. That is what mmdet's DyHead checkpoints were trained with, so it is kept
    (torchvision would refuse the size mismatch)."""
    if t.shape[-2:] == (h, w):
        return t.contiguous()
    n, c = t.shape[:2]
    if t[0].numel() < c * h * w:
        raise ValueError(f'DyDCNv2: an offset / mask of {tuple(t.shape)} is too small for a '
                         f'{h}x{w} output')
    return t.contiguous().reshape(n, -1)[:, :c * h * w].reshape(n, c, h, w)


class DyHeadBlock(nn.Module):
    """One block over all levels (see the module docstring). ``act_cfg``: the last activation
    of the scale-aware attention (HSigmoid(3, 6), the official code's, not the paper's)."""

    def __init__(self, in_channels, out_channels, zero_init_offset=True,
                 act_cfg=dict(type='HSigmoid', bias=3.0, divisor=6.0)):
        super().__init__()
        self.zero_init_offset = zero_init_offset
        self.offset_and_mask_dim = 3 * 3 * 3  # (offset y, offset x, mask) per kernel point
        self.offset_dim = 2 * 3 * 3
        self.spatial_conv_high = DyDCNv2(in_channels, out_channels)
        self.spatial_conv_mid = DyDCNv2(in_channels, out_channels)
        self.spatial_conv_low = DyDCNv2(in_channels, out_channels, stride=2)
        self.spatial_conv_offset = nn.Conv2d(in_channels, self.offset_and_mask_dim, 3,
                                             padding=1)
        self.scale_attn_module = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(out_channels, 1, 1), nn.ReLU(inplace=True),
            build_activation_layer(act_cfg))
        self.task_attn_module = DyReLU(out_channels)
        self._init_weights()

    def _init_weights(self):
        """mmdet's: N(0, 0.01) on every nn.Conv2d (not the deformable convs), zero offsets."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, 0, 0.01)
        if self.zero_init_offset:
            constant_init(self.spatial_conv_offset, 0)

    def forward(self, *x):
        """Levels in, levels out (a tuple)."""
        outs = []
        for level in range(len(x)):
            offset_and_mask = self.spatial_conv_offset(x[level])
            offset = offset_and_mask[:, :self.offset_dim]
            mask = offset_and_mask[:, self.offset_dim:].sigmoid()
            mid = self.spatial_conv_mid(x[level], offset, mask)
            total = mid * self.scale_attn_module(mid)
            n = 1
            if level > 0:
                low = self.spatial_conv_low(x[level - 1], offset, mask)
                total = total + low * self.scale_attn_module(low)
                n += 1
            if level < len(x) - 1:
                # conv then upsample (the official code's order, faster than the natural one)
                high = F.interpolate(self.spatial_conv_high(x[level + 1], offset, mask),
                                     size=x[level].shape[-2:], mode='bilinear',
                                     align_corners=True)
                total = total + high * self.scale_attn_module(high)
                n += 1
            outs.append(self.task_attn_module(total / n))
        return tuple(outs)


@MODELS.register_module()
class DyHead(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's):
        in_channels (int): channels of every input level.
        out_channels (int): channels of every output level.
        num_blocks (int): DyHeadBlocks (default 6).
        zero_init_offset (bool): zero-initialised offset / mask convs.
        init_cfg: must be None (mmdet refuses one: the blocks initialise themselves).
        with_cp (bool): ``'full'`` on every block (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, in_channels, out_channels, num_blocks=6, zero_init_offset=True,
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'DyHead takes no init_cfg (its blocks initialise themselves, as '
                             f'mmdet), got {init_cfg!r}')
        if not (isinstance(num_blocks, int) and num_blocks >= 1):
            raise ValueError(f'DyHead num_blocks must be a positive int, got {num_blocks!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'DyHead with_cp must be a bool, got {with_cp!r}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_blocks = num_blocks
        self.zero_init_offset = zero_init_offset
        self.init_cfg = init_cfg
        self.dyhead_blocks = nn.Sequential(*[
            DyHeadBlock(in_channels if i == 0 else out_channels, out_channels,
                        zero_init_offset=zero_init_offset) for i in range(num_blocks)])
        self.block_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_blocks)]

    def init_weights(self):
        """Nothing: the blocks initialised themselves at construction (mmdet's init)."""

    def _step(self, i, feats):
        block = self.dyhead_blocks[i]
        outs = self.block_units[i](block, *feats, module=block)
        return outs, outs

    def _checkpoint_steps(self):
        return [[ChainStep(f'block{i}', self.block_units[i], partial(self._step, i),
                           self.dyhead_blocks[i]) for i in range(self.num_blocks)]]

    def forward(self, inputs):
        if not isinstance(inputs, (tuple, list)):
            raise TypeError(f'DyHead takes a tuple or list of levels, got {type(inputs)}')
        outs, _ = self._run_chain(self._checkpoint_steps()[0], tuple(inputs))
        return tuple(outs)

