"""mmdet 2.x ``DyHead`` neck (Dynamic Head, Dai et al. 2021), as mmdet's ATSS configs stack it
after an FPN: ``num_blocks`` :class:`DyHeadBlock`, each attending over scale (levels summed
with an HSigmoid weight), space (modulated deformable convs, offsets and masks from the
level's own feature) and task (:class:`DyReLU`). The levels keep their shapes.

State-dict keys equal mmdet's (``dyhead_blocks.{i}.spatial_conv_high.conv.weight``, ...).
Checkpoint units: ``block{i}``, one chain over the blocks (each block mixes all levels)."""
from functools import partial

import torch.nn as nn
import torch.nn.functional as F

from ...ops import ModulatedDeformConv2d
from ...registry import MODELS
from ..checkpointing import ChainStep, CheckpointOwnerMixin, CheckpointUnit
from ..utils import DyReLU, build_activation_layer, build_norm_layer, constant_init, normal_init

__all__ = ['DyHead', 'DyHeadBlock', 'DyDCNv2']


def _read_as_mmcv(t, height, width):
    """``t [B, C, H, W]`` as mmcv's deformable-conv kernels read it for an output of
    ``height x width``: each image's memory laid out as ``[C, height, width]`` (its first
    ``C * height * width`` values). DyHead hands the finer level's offsets and mask to the
    coarser level's conv (``spatial_conv_high``); mmcv reads them this way, and trained
    DyHead weights depend on it, so it is kept (torchvision's op would refuse the shapes)."""
    if t.shape[-2:] == (height, width):
        return t
    b, c = t.shape[:2]
    if t[0].numel() < c * height * width:
        raise ValueError(f'DyDCNv2: offsets / mask of {tuple(t.shape)} are too small for an '
                         f'output of {height} x {width}')
    return t.reshape(b, -1)[:, :c * height * width].reshape(b, c, height, width)


class DyDCNv2(nn.Module):
    """A 3x3 modulated deformable conv (offsets and mask given) and a norm (GN 16 groups by
    default; the conv has a bias only without one)."""

    def __init__(self, in_channels, out_channels, stride=1,
                 norm_cfg=dict(type='GN', num_groups=16, requires_grad=True)):
        super().__init__()
        self.with_norm = norm_cfg is not None
        self.conv = ModulatedDeformConv2d(in_channels, out_channels, 3, stride=stride,
                                          padding=1, bias=not self.with_norm)
        if self.with_norm:
            self.norm = build_norm_layer(norm_cfg, out_channels)[1]

    def forward(self, x, offset, mask):
        stride = self.conv.stride
        height, width = ((x.size(2) - 1) // stride[0] + 1, (x.size(3) - 1) // stride[1] + 1)
        x = self.conv(x.contiguous(), _read_as_mmcv(offset.contiguous(), height, width),
                      _read_as_mmcv(mask.contiguous(), height, width))
        return self.norm(x) if self.with_norm else x


class DyHeadBlock(nn.Module):
    """One DyHead block over all levels: per level, the deformable convs of the level itself,
    the level below (stride 2) and the level above (upsampled, bilinear with aligned
    corners), each weighted by the scale attention, averaged, then DyReLU."""

    def __init__(self, in_channels, out_channels, zero_init_offset=True,
                 act_cfg=dict(type='HSigmoid', bias=3.0, divisor=6.0)):
        super().__init__()
        self.zero_init_offset = zero_init_offset
        self.offset_and_mask_dim = 3 * 3 * 3
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
        """mmdet's: every ``nn.Conv2d`` normal(0.01) (the deformable convs keep theirs), the
        offset conv zero."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, 0, 0.01)
        if self.zero_init_offset:
            constant_init(self.spatial_conv_offset, 0)

    def forward(self, x):
        outs = []
        for level in range(len(x)):
            offset_and_mask = self.spatial_conv_offset(x[level])
            offset = offset_and_mask[:, :self.offset_dim, :, :]
            mask = offset_and_mask[:, self.offset_dim:, :, :].sigmoid()
            mid_feat = self.spatial_conv_mid(x[level], offset, mask)
            sum_feat = mid_feat * self.scale_attn_module(mid_feat)
            summed_levels = 1
            if level > 0:
                low_feat = self.spatial_conv_low(x[level - 1], offset, mask)
                sum_feat = sum_feat + low_feat * self.scale_attn_module(low_feat)
                summed_levels += 1
            if level < len(x) - 1:
                high_feat = F.interpolate(self.spatial_conv_high(x[level + 1], offset, mask),
                                          size=x[level].shape[-2:], mode='bilinear',
                                          align_corners=True)
                sum_feat = sum_feat + high_feat * self.scale_attn_module(high_feat)
                summed_levels += 1
            outs.append(self.task_attn_module(sum_feat / summed_levels))
        return outs


@MODELS.register_module()
class DyHead(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's): ``in_channels``, ``out_channels``, ``num_blocks`` (6),
    ``zero_init_offset`` (True), ``init_cfg`` (must be None, as mmdet requires: the blocks
    initialise themselves). Ours: ``with_cp`` (``'full'`` on every block, default False),
    ``cp_use_reentrant``."""

    def __init__(self, in_channels, out_channels, num_blocks=6, zero_init_offset=True,
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'DyHead initialises its blocks itself: init_cfg must be None '
                             f'(as mmdet requires), got {init_cfg!r}')
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
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
        """Nothing to load: the blocks were initialised at construction (mmdet's)."""

    def _block(self, i, *levels):
        return tuple(self.dyhead_blocks[i](list(levels)))

    def _block_step(self, i, feats):
        return self.block_units[i](partial(self._block, i), *feats,
                                   module=self.dyhead_blocks[i]), None

    def _checkpoint_steps(self):
        return [[ChainStep(f'block{i}', unit, partial(self._block_step, i),
                           self.dyhead_blocks[i]) for i, unit in enumerate(self.block_units)]]

    def forward(self, inputs):
        if not isinstance(inputs, (tuple, list)):
            raise TypeError(f'DyHead takes a tuple or list of level features, got '
                            f'{type(inputs).__name__}')
        return tuple(self._run_chain(self._checkpoint_steps()[0], tuple(inputs))[0])
