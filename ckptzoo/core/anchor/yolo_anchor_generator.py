"""mmdet 2.x ``YOLOAnchorGenerator``: YOLOv3's priors, given as (w, h) per level, centred on
the middle of each stride cell, and the *responsible* flags of YOLOv3's assignment (the grid
cell that holds a ground truth's centre). (mmdet keeps it in ``anchor_generator.py``; it sits
in its own module here so that the shared file stays as it is.)"""
import torch
from torch.nn.modules.utils import _pair

from ...registry import TASK_UTILS
from .anchor_generator import AnchorGenerator

__all__ = ['YOLOAnchorGenerator']


@TASK_UTILS.register_module()
class YOLOAnchorGenerator(AnchorGenerator):
    """Args:
        strides (list[int | tuple[int, int]]): per level.
        base_sizes (list[list[tuple[int, int]]]): per level, the (w, h) of each anchor; every
            level has the same number.
    """

    def __init__(self, strides, base_sizes):
        self.strides = [_pair(s) for s in strides]
        self.centers = [(s[0] / 2., s[1] / 2.) for s in self.strides]
        if len(base_sizes) != len(self.strides):
            raise ValueError(f'base_sizes needs one list per stride ({len(self.strides)}), '
                             f'got {len(base_sizes)}')
        per_level = len(base_sizes[0])
        if any(len(sizes) != per_level for sizes in base_sizes):
            raise ValueError(f'every level of base_sizes needs the same number of anchors, '
                             f'got {[len(s) for s in base_sizes]}')
        self.base_sizes = [[_pair(size) for size in sizes] for sizes in base_sizes]
        self.center_offset = 0
        self.scale_major = True
        self.base_anchors = self.gen_base_anchors()

    @property
    def num_levels(self):
        return len(self.base_sizes)

    def gen_base_anchors(self):
        return [self.gen_single_level_base_anchors(sizes, self.centers[i])
                for i, sizes in enumerate(self.base_sizes)]

    def gen_single_level_base_anchors(self, base_sizes_per_level, center=None):
        x_center, y_center = center
        return torch.stack([torch.Tensor([x_center - 0.5 * w, y_center - 0.5 * h,
                                          x_center + 0.5 * w, y_center + 0.5 * h])
                            for w, h in base_sizes_per_level])

    def responsible_flags(self, featmap_sizes, gt_bboxes, device='cuda'):
        """Per level, a uint8 flag per anchor: 1 at every anchor of the grid cell that holds a
        ground-truth box centre."""
        self._check_levels(featmap_sizes)
        return [self.single_level_responsible_flags(featmap_sizes[i], gt_bboxes,
                                                    self.strides[i], self.num_base_priors[i],
                                                    device=device)
                for i in range(self.num_levels)]

    def single_level_responsible_flags(self, featmap_size, gt_bboxes, stride,
                                       num_base_anchors, device='cuda'):
        feat_h, feat_w = featmap_size
        cx = ((gt_bboxes[:, 0] + gt_bboxes[:, 2]) * 0.5).to(device)
        cy = ((gt_bboxes[:, 1] + gt_bboxes[:, 3]) * 0.5).to(device)
        grid_x = torch.floor(cx / stride[0]).long()
        grid_y = torch.floor(cy / stride[1]).long()
        grid = torch.zeros(feat_h * feat_w, dtype=torch.uint8, device=device)
        grid[grid_y * feat_w + grid_x] = 1
        return grid[:, None].expand(grid.size(0), num_base_anchors).contiguous().view(-1)

    def __repr__(self):
        return f'{type(self).__name__}(strides={self.strides}, base_sizes={self.base_sizes})'
