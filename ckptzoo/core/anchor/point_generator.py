"""Points as priors (mmdet 2.x ``core/anchor/point_generator.py``): the anchor-free heads
(FCOS, FoveaBox, RepPoints, YOLOX, ...) predict at the centres of feature-map cells."""
import math

import torch
from torch.nn.modules.utils import _pair

from ...registry import TASK_UTILS

__all__ = ['MlvlPointGenerator', 'PointGenerator']


def _meshgrid(x, y, row_major=True):
    yy, xx = torch.meshgrid(y, x, indexing='ij')
    return (xx.reshape(-1), yy.reshape(-1)) if row_major else (yy.reshape(-1), xx.reshape(-1))


@TASK_UTILS.register_module()
class PointGenerator:
    """One level's points ``(x, y, stride)`` at the cells' top-left corners (RepPoints'
    older API)."""

    def grid_points(self, featmap_size, stride=16, device='cpu'):
        feat_h, feat_w = featmap_size
        xx, yy = _meshgrid(torch.arange(0., feat_w, device=device) * stride,
                           torch.arange(0., feat_h, device=device) * stride)
        return torch.stack([xx, yy, xx.new_full((xx.shape[0], ), stride)], dim=-1)

    def valid_flags(self, featmap_size, valid_size, device='cpu'):
        return _valid_flags(featmap_size, valid_size, device)


def _valid_flags(featmap_size, valid_size, device):
    feat_h, feat_w = featmap_size
    valid_h, valid_w = valid_size
    if valid_h > feat_h or valid_w > feat_w:
        raise ValueError(f'valid size {tuple(valid_size)} exceeds the feature map '
                         f'{tuple(featmap_size)}')
    valid_x = torch.arange(feat_w, device=device) < valid_w
    valid_y = torch.arange(feat_h, device=device) < valid_h
    xx, yy = _meshgrid(valid_x, valid_y)
    return xx & yy


@TASK_UTILS.register_module()
class MlvlPointGenerator:
    """Points of several levels.

    Args:
        strides (list[int | tuple[int, int]]): each level's stride, ``(w, h)`` when a pair.
        offset (float): the points' offset in the cell, in strides (0.5: cell centres).
    """

    def __init__(self, strides, offset=0.5):
        self.strides = [_pair(stride) for stride in strides]
        self.offset = offset

    @property
    def num_levels(self):
        return len(self.strides)

    @property
    def num_base_priors(self):
        """One point per cell at every level."""
        return [1 for _ in self.strides]

    def _check_levels(self, featmap_sizes):
        if len(featmap_sizes) != self.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the point generator '
                             f'has {self.num_levels} strides {self.strides}')

    def grid_priors(self, featmap_sizes, dtype=torch.float32, device='cpu', with_stride=False):
        """Per level ``[h*w, 2]`` points ``(x, y)`` (``[h*w, 4]`` with ``(stride_w,
        stride_h)`` appended when ``with_stride``), row-major."""
        self._check_levels(featmap_sizes)
        return [self.single_level_grid_priors(size, i, dtype, device, with_stride)
                for i, size in enumerate(featmap_sizes)]

    def single_level_grid_priors(self, featmap_size, level_idx, dtype=torch.float32,
                                 device='cpu', with_stride=False):
        feat_h, feat_w = featmap_size
        stride_w, stride_h = self.strides[level_idx]
        shift_x = ((torch.arange(0, feat_w, device=device) + self.offset) * stride_w).to(dtype)
        shift_y = ((torch.arange(0, feat_h, device=device) + self.offset) * stride_h).to(dtype)
        xx, yy = _meshgrid(shift_x, shift_y)
        if not with_stride:
            return torch.stack([xx, yy], dim=-1)
        return torch.stack([xx, yy, xx.new_full(xx.shape, stride_w),
                            yy.new_full(yy.shape, stride_h)], dim=-1)

    def valid_flags(self, featmap_sizes, pad_shape, device='cpu'):
        """Per level, which points lie on the padded image (``pad_shape`` ``(h, w)``)."""
        self._check_levels(featmap_sizes)
        h, w = pad_shape[:2]
        flags = []
        for (stride_w, stride_h), (feat_h, feat_w) in zip(self.strides, featmap_sizes):
            valid = (min(int(math.ceil(h / stride_h)), feat_h),
                     min(int(math.ceil(w / stride_w)), feat_w))
            flags.append(self.single_level_valid_flags((feat_h, feat_w), valid, device))
        return flags

    def single_level_valid_flags(self, featmap_size, valid_size, device='cpu'):
        return _valid_flags(featmap_size, valid_size, device)

    def sparse_priors(self, prior_idxs, featmap_size, level_idx, dtype=torch.float32,
                      device='cpu'):
        """The points of the flat indices ``prior_idxs`` of one level's ``(h, w)`` map."""
        height, width = featmap_size
        x = (prior_idxs % width + self.offset) * self.strides[level_idx][0]
        y = ((prior_idxs // width) % height + self.offset) * self.strides[level_idx][1]
        return torch.stack([x, y], 1).to(dtype).to(device)

    def __repr__(self):
        return f'{type(self).__name__}(strides={self.strides}, offset={self.offset})'
