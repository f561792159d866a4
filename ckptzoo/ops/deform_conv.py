"""mmcv 1.x ``DeformConv2d`` on ``torchvision.ops.deform_conv2d`` (no compiled mmcv).

Same arguments and state-dict key as mmcv (``weight`` only: mmcv supports no bias) and the
same offset layout (``y0, x0, y1, x1, ...`` per kernel point). Like mmcv, an input smaller than
the kernel is zero-padded at its bottom / right and the output cropped back, so a tiny
pyramid level gives mmcv's numbers.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair
from torchvision.ops import deform_conv2d

__all__ = ['DeformConv2d']


class DeformConv2d(nn.Module):
    """Deformable convolution v1 (Dai et al. 2017), mmcv 1.x arguments; ``forward(x,
    offset)`` with ``offset`` ``[B, deform_groups * 2 * kh * kw, H_out, W_out]``."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, deform_groups=1, bias=False, im2col_step=32):
        super().__init__()
        if bias:
            raise ValueError(f'bias={bias} is not supported in DeformConv2d (as mmcv)')
        if in_channels % groups or out_channels % groups:
            raise ValueError(f'in_channels {in_channels} and out_channels {out_channels} must '
                             f'be divisible by groups {groups}')
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(stride)
        self.padding = _pair(padding)
        self.dilation = _pair(dilation)
        self.groups = groups
        self.deform_groups = deform_groups
        self.im2col_step = im2col_step  # accepted as mmcv's; torchvision needs no such step
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups,
                                               *self.kernel_size))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=0, nonlinearity='relu')

    def forward(self, x, offset):
        kh, kw = self.kernel_size
        pad_h, pad_w = max(kh - x.size(2), 0), max(kw - x.size(3), 0)
        if pad_h or pad_w:  # mmcv pads an input smaller than the kernel
            x = F.pad(x, (0, pad_w, 0, pad_h))
            offset = F.pad(offset, (0, pad_w, 0, pad_h))
        out = deform_conv2d(x, offset.to(x.dtype), self.weight, None, stride=self.stride,
                            padding=self.padding, dilation=self.dilation)
        if pad_h or pad_w:
            out = out[:, :, :out.size(2) - pad_h, :out.size(3) - pad_w].contiguous()
        return out

    def extra_repr(self):
        return (f'{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, '
                f'stride={self.stride}, padding={self.padding}, dilation={self.dilation}, '
                f'groups={self.groups}, deform_groups={self.deform_groups}, bias=False')
