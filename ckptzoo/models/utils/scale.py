"""mmcv 1.x ``Scale``: one learnable factor (state-dict key ``scale``, shape ``()``), as the
FCOS / ATSS / GFL / TOOD heads keep one per pyramid level so that levels of different stride
can share the regression convs."""
import torch
import torch.nn as nn

__all__ = ['Scale']


class Scale(nn.Module):
    """``x * scale``; ``scale`` (float) is the initial value (default 1.0), stored float32 as
    mmcv stores it."""

    def __init__(self, scale=1.0):
        super().__init__()
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise TypeError(f'Scale scale must be a float, got {scale!r}')
        self.scale = nn.Parameter(torch.tensor(scale, dtype=torch.float))

    def forward(self, x):
        return x * self.scale
