"""mmcv 1.x's ``RoIAlign`` layer on ``torchvision.ops.roi_align``.

mmcv's ``aligned=True`` (the default) is torchvision's ``aligned=True``: box corners are
shifted by -0.5 pixel so that samples sit on pixel centres; ``sampling_ratio=0`` samples
``ceil(roi size / output size)`` points per bin in both. ``use_torchvision=True`` called
torchvision without ``aligned`` in mmcv, so it means ``aligned=False`` here too.
"""
import torch.nn as nn
from torch.nn.modules.utils import _pair
from torchvision.ops import roi_align

__all__ = ['RoIAlign']


class RoIAlign(nn.Module):
    """Args as mmcv: ``output_size`` (int or (h, w)), ``spatial_scale`` (feature size over
    image size, 1 / stride), ``sampling_ratio`` (0: adaptive), ``pool_mode`` (only
    ``'avg'``), ``aligned``, ``use_torchvision``."""

    def __init__(self, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode='avg',
                 aligned=True, use_torchvision=False):
        super().__init__()
        if pool_mode != 'avg':
            raise NotImplementedError(f"RoIAlign pool_mode must be 'avg' (torchvision has no "
                                      f"'max'), got {pool_mode!r}")
        if not (isinstance(sampling_ratio, int) and sampling_ratio >= 0):
            raise ValueError(f'RoIAlign sampling_ratio must be an int >= 0 (0: adaptive), got '
                             f'{sampling_ratio!r}')
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = sampling_ratio
        self.pool_mode = pool_mode
        self.aligned = bool(aligned) and not use_torchvision
        self.use_torchvision = use_torchvision

    def forward(self, input, rois):
        """``input [B, C, H, W]``, ``rois [K, 5]`` (image index, x1, y1, x2, y2 in image
        pixels) -> ``[K, C, *output_size]``."""
        return roi_align(input, rois.to(input.dtype), self.output_size, self.spatial_scale,
                         self.sampling_ratio, self.aligned)

    def extra_repr(self):
        return (f'output_size={self.output_size}, spatial_scale={self.spatial_scale}, '
                f'sampling_ratio={self.sampling_ratio}, pool_mode={self.pool_mode!r}, '
                f'aligned={self.aligned}')
