"""mmcv ``Scale``: one learnable factor per pyramid level (FCOS, ATSS, GFL, ... regress
distances whose size grows with the level's stride, with shared convs)."""
import torch
import torch.nn as nn

__all__ = ['Scale']


class Scale(nn.Module):
    """``x * scale``; state-dict key ``scale`` (a 1-element parameter) as mmcv's."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float))

    def forward(self, x):
        return x * self.scale
