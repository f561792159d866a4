"""CARAFE (Wang et al. 2019, content-aware reassembly of features) in plain PyTorch, mmcv 1.x's
``carafe`` op and ``CARAFEPack`` (keys ``channel_compressor.*``, ``content_encoder.*``).

Output pixel ``(y * s + i, x * s + j)`` of channel ``c`` (group ``g = c // (C / group_size)``)
is ``sum_{dy, dx} feat[c, y + dy, x + dx] * mask[g * k * k + (dy + r) * k + (dx + r), y*s+i,
x*s+j]`` over the ``k x k`` window (``r = (k - 1) / 2``, zero outside), as mmcv's kernel. Here
the window comes from ``F.unfold`` and the sum from one ``einsum``, so autograd gives the
gradients and it runs on CPU and CUDA alike.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['carafe', 'CARAFEPack']


def carafe(features, masks, kernel_size, group_size, scale_factor):
    """Reassemble ``features`` (N, C, h, w) into (N, C, h * s, w * s) with the per-location
    kernels ``masks`` (N, group_size * k * k, h * s, w * s), ``s = scale_factor``."""
    n, c, h, w = features.shape
    k, g, s = kernel_size, group_size, scale_factor
    if not (isinstance(s, int) and s >= 1):
        raise ValueError(f'carafe scale_factor must be an int >= 1, got {scale_factor!r}')
    if not (isinstance(k, int) and k >= 1 and k % 2 == 1):
        raise ValueError(f'carafe kernel_size must be an odd int >= 1, got {kernel_size!r}')
    if not (isinstance(g, int) and g >= 1 and c % g == 0):
        raise ValueError(f'carafe group_size must divide the {c} channels, got {group_size!r}')
    if tuple(masks.shape) != (n, g * k * k, h * s, w * s):
        raise ValueError(f'carafe masks must be of shape {(n, g * k * k, h * s, w * s)} '
                         f'(group_size * kernel_size**2 channels, scale_factor times the '
                         f'features), got {tuple(masks.shape)}')
    windows = F.unfold(features, k, padding=(k - 1) // 2).view(n, g, c // g, k * k, h, w)
    masks = masks.view(n, g, k * k, h, s, w, s)
    out = torch.einsum('ngckyx,ngkyixj->ngcyixj', windows, masks)
    return out.reshape(n, c, h * s, w * s)


class CARAFEPack(nn.Module):
    """mmcv's CARAFE upsampler: a 1x1 channel compressor, a content encoder predicting
    ``up_group * up_kernel**2`` kernel weights per output pixel (pixel-shuffled and softmax
    normalised over the window), then :func:`carafe`.

    Args (mmcv's): channels, scale_factor, up_kernel=5, up_group=1, encoder_kernel=3,
    encoder_dilation=1, compressed_channels=64.
    """

    def __init__(self, channels, scale_factor, up_kernel=5, up_group=1, encoder_kernel=3,
                 encoder_dilation=1, compressed_channels=64):
        super().__init__()
        self.channels = channels
        self.scale_factor = scale_factor
        self.up_kernel = up_kernel
        self.up_group = up_group
        self.encoder_kernel = encoder_kernel
        self.encoder_dilation = encoder_dilation
        self.compressed_channels = compressed_channels
        self.channel_compressor = nn.Conv2d(channels, compressed_channels, 1)
        self.content_encoder = nn.Conv2d(
            compressed_channels, up_kernel * up_kernel * up_group * scale_factor**2,
            encoder_kernel, padding=int((encoder_kernel - 1) * encoder_dilation / 2),
            dilation=encoder_dilation)
        self.init_weights()

    def init_weights(self):
        """mmcv's: Xavier uniform, then the encoder N(0, 0.001) (near-uniform kernels)."""
        for m in (self.channel_compressor, self.content_encoder):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
        nn.init.normal_(self.content_encoder.weight, 0, 0.001)
        nn.init.zeros_(self.content_encoder.bias)

    def kernel_normalizer(self, mask):
        mask = F.pixel_shuffle(mask, self.scale_factor)
        n, c, h, w = mask.shape
        mask = F.softmax(mask.view(n, c // self.up_kernel**2, -1, h, w), dim=2)
        return mask.view(n, c, h, w)

    def forward(self, x):
        mask = self.kernel_normalizer(self.content_encoder(self.channel_compressor(x)))
        return carafe(x, mask, self.up_kernel, self.up_group, self.scale_factor)
