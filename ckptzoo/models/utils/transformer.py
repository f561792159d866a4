"""Patch embedding shared by the transformer backbones (mmcv / mmdet ``PatchEmbed``: keys
``projection`` and ``norm``). Swin uses it non-overlapping (kernel = stride = patch size),
PVT overlapping (PVTv2: kernel 7 / stride 4 / padding 3, then 3 / 2 / 1)."""
import math

import torch.nn as nn
import torch.nn.functional as F

__all__ = ['PatchEmbed']


def _pair(value, name):
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
        raise ValueError(f'{name} must be an int or a pair of ints, got {value!r}')
    return pair


class PatchEmbed(nn.Module):
    """Conv (``kernel_size``, ``stride``), then LayerNorm; NCHW in, NHWC out.

    Args:
        padding (int | 'corner'): the conv's zero padding, or mmcv's ``'corner'`` adaptive
            padding: pad the bottom / right just enough that the last window fits, so no input
            row or column is dropped (for kernel = stride: to a multiple of the stride).
        norm (bool): a LayerNorm (``norm_eps``) after the projection.
        drop_rate (float): dropout on the output (Swin's ``drop_after_pos``).
    """

    def __init__(self, in_channels, embed_dims, kernel_size, stride=None, padding='corner',
                 norm=True, norm_eps=1e-5, drop_rate=0.0, bias=True):
        super().__init__()
        self.kernel_size = _pair(kernel_size, 'kernel_size')
        self.stride = _pair(kernel_size if stride is None else stride, 'stride')
        if padding == 'corner':
            self.corner_pad, conv_padding = True, 0
        elif isinstance(padding, str):
            raise ValueError(f"padding must be an int, a pair of ints or 'corner', "
                             f'got {padding!r}')
        else:
            self.corner_pad, conv_padding = False, _pair(padding, 'padding')
        self.projection = nn.Conv2d(in_channels, embed_dims, self.kernel_size, self.stride,
                                    conv_padding, bias=bias)
        self.norm = nn.LayerNorm(embed_dims, eps=norm_eps) if norm else None
        self.drop_after_pos = nn.Dropout(drop_rate)

    def forward(self, x):
        if self.corner_pad:
            pads = [max((math.ceil(size / s) - 1) * s + k - size, 0)
                    for size, k, s in zip(x.shape[-2:], self.kernel_size, self.stride)]
            if any(pads):
                x = F.pad(x, (0, pads[1], 0, pads[0]))
        x = self.projection(x).permute(0, 2, 3, 1)
        if self.norm is not None:
            x = self.norm(x)
        return self.drop_after_pos(x)
