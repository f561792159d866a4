"""mmdet 2.x's positional encodings of a padding mask (``[bs, h, w]``, nonzero = padding):
``SinePositionalEncoding`` (DETR's) and ``LearnedPositionalEncoding`` (keys ``row_embed``,
``col_embed``). Both return ``[bs, 2 * num_feats, h, w]``, y features first for the sine
encoding, x first for the learned one (mmdet's orders)."""
import math

import torch
import torch.nn as nn

from ...registry import MODELS
from .transformer_layers import InitCfgMixin

__all__ = ['SinePositionalEncoding', 'LearnedPositionalEncoding']


@MODELS.register_module()
class SinePositionalEncoding(InitCfgMixin, nn.Module):
    """Sine / cosine of the cumulative count of valid pixels along y and x.

    Args:
        num_feats (int): features per axis (the output has twice as many).
        temperature (int): the wavelength base.
        normalize (bool): scale the counts to ``[0, scale]`` by each column's / row's valid
            length (``offset`` added first, ``eps`` in the denominator).
    """

    def __init__(self, num_feats, temperature=10000, normalize=False, scale=2 * math.pi,
                 eps=1e-6, offset=0., init_cfg=None):
        super().__init__()
        if normalize and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
            raise TypeError(f'SinePositionalEncoding: with normalize=True scale must be a '
                            f'float or int, got {scale!r}')
        self.num_feats = num_feats
        self.temperature = temperature
        self.normalize = normalize
        self.scale = scale
        self.eps = eps
        self.offset = offset
        self.init_cfg = init_cfg

    def forward(self, mask):
        not_mask = 1 - mask.to(torch.int)
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            y_embed = (y_embed + self.offset) / (y_embed[:, -1:, :] + self.eps) * self.scale
            x_embed = (x_embed + self.offset) / (x_embed[:, :, -1:] + self.eps) * self.scale
        dim_t = torch.arange(self.num_feats, dtype=torch.float32, device=mask.device)
        dim_t = self.temperature**(2 * (dim_t // 2) / self.num_feats)
        b, h, w = mask.shape

        def embed(values):
            pos = values[..., None] / dim_t
            return torch.stack((pos[..., 0::2].sin(), pos[..., 1::2].cos()),
                               dim=4).view(b, h, w, -1)

        return torch.cat((embed(y_embed), embed(x_embed)), dim=3).permute(0, 3, 1, 2)

    def __repr__(self):
        return (f'{type(self).__name__}(num_feats={self.num_feats}, temperature='
                f'{self.temperature}, normalize={self.normalize}, scale={self.scale}, '
                f'eps={self.eps})')


@MODELS.register_module()
class LearnedPositionalEncoding(InitCfgMixin, nn.Module):
    """Learned row / column embeddings (``row_num_embed`` / ``col_num_embed`` positions at
    most); a feature map larger than that fails naming the sizes (mmdet: an index error)."""

    def __init__(self, num_feats, row_num_embed=50, col_num_embed=50,
                 init_cfg=dict(type='Uniform', layer='Embedding')):
        super().__init__()
        self.row_embed = nn.Embedding(row_num_embed, num_feats)
        self.col_embed = nn.Embedding(col_num_embed, num_feats)
        self.num_feats = num_feats
        self.row_num_embed = row_num_embed
        self.col_num_embed = col_num_embed
        self.init_cfg = init_cfg

    def forward(self, mask):
        h, w = mask.shape[-2:]
        if h > self.row_num_embed or w > self.col_num_embed:
            raise ValueError(f'LearnedPositionalEncoding: a {h}x{w} feature map needs '
                             f'row_num_embed >= {h} and col_num_embed >= {w}, have '
                             f'{self.row_num_embed} and {self.col_num_embed}')
        x_embed = self.col_embed(torch.arange(w, device=mask.device))
        y_embed = self.row_embed(torch.arange(h, device=mask.device))
        pos = torch.cat((x_embed.unsqueeze(0).repeat(h, 1, 1),
                         y_embed.unsqueeze(1).repeat(1, w, 1)), dim=-1)
        return pos.permute(2, 0, 1).unsqueeze(0).repeat(mask.shape[0], 1, 1, 1)

    def __repr__(self):
        return (f'{type(self).__name__}(num_feats={self.num_feats}, row_num_embed='
                f'{self.row_num_embed}, col_num_embed={self.col_num_embed})')
