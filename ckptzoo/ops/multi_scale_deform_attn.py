"""Deformable DETR's multi-scale deformable attention (mmcv 1.x's
``MultiScaleDeformableAttention``: arguments, defaults, keys ``sampling_offsets``,
``attention_weights``, ``value_proj``, ``output_proj``), in plain PyTorch: every level's values
are sampled bilinearly with ``grid_sample`` (zeros outside, ``align_corners=False``), the
algorithm of mmcv's CPU path, on CPU and CUDA alike (mmcv's CUDA kernel computes the same
sum). Registered in MODELS by :mod:`ckptzoo.models.utils.transformer_layers` (ops import
nothing of ckptzoo)."""
import math
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['MultiScaleDeformableAttention', 'multi_scale_deformable_attn_pytorch']


def multi_scale_deformable_attn_pytorch(value, value_spatial_shapes, sampling_locations,
                                        attention_weights):
    """``value`` (bs, num_keys, heads, dims), ``value_spatial_shapes`` (levels, 2) as (h, w),
    ``sampling_locations`` (bs, queries, heads, levels, points, 2) as (x, y) in [0, 1],
    ``attention_weights`` (bs, queries, heads, levels, points) -> (bs, queries, heads * dims)."""
    bs, _, num_heads, dims = value.shape
    _, num_queries, _, num_levels, num_points, _ = sampling_locations.shape
    shapes = [(int(h), int(w)) for h, w in value_spatial_shapes]
    values = value.split([h * w for h, w in shapes], dim=1)
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (h, w) in enumerate(shapes):
        v = values[level].flatten(2).transpose(1, 2).reshape(bs * num_heads, dims, h, w)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(F.grid_sample(v, grid, mode='bilinear', padding_mode='zeros',
                                     align_corners=False))
    weights = attention_weights.transpose(1, 2).reshape(bs * num_heads, 1, num_queries,
                                                        num_levels * num_points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, num_heads * dims, num_queries).transpose(1, 2).contiguous()


class MultiScaleDeformableAttention(nn.Module):
    """Each query attends to ``num_points`` points per head and level around its reference
    point (2-d: a point, offsets in pixels of each level; 4-d: a box, offsets relative to its
    size / ``num_points``), weighted by a softmax over levels x points.

    Args:
        embed_dims, num_heads, num_levels, num_points: as mmcv (256, 8, 4, 4).
        im2col_step (int): mmcv's CUDA kernel's batch step; no effect here.
        dropout (float): dropout on the output before the identity is added.
        batch_first (bool): (bs, n, c) inputs instead of (n, bs, c).
        norm_cfg: accepted as mmcv does; unused (as in mmcv).
    """

    def __init__(self, embed_dims=256, num_heads=8, num_levels=4, num_points=4, im2col_step=64,
                 dropout=0.1, batch_first=False, norm_cfg=None, init_cfg=None):
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f'embed_dims must be divisible by num_heads, but got {embed_dims} '
                             f'and {num_heads}')
        per_head = embed_dims // num_heads
        if per_head & (per_head - 1):
            warnings.warn("You'd better set embed_dims in MultiScaleDeformAttention to make "
                          'the dimension of each attention head a power of 2 which is more '
                          'efficient in our CUDA implementation.')
        self.norm_cfg = norm_cfg
        self.init_cfg = init_cfg
        self.dropout = nn.Dropout(dropout)
        self.batch_first = batch_first
        self.im2col_step = im2col_step
        self.embed_dims = embed_dims
        self.num_levels = num_levels
        self.num_heads = num_heads
        self.num_points = num_points
        self.sampling_offsets = nn.Linear(embed_dims, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(embed_dims, num_heads * num_levels * num_points)
        self.value_proj = nn.Linear(embed_dims, embed_dims)
        self.output_proj = nn.Linear(embed_dims, embed_dims)
        self.init_weights()

    def init_weights(self):
        """mmcv's: zero offsets with a bias pointing each head in its own direction (point
        ``i`` at distance ``i + 1``), zero attention weights (uniform), Xavier projections."""
        nn.init.zeros_(self.sampling_offsets.weight)
        thetas = torch.arange(self.num_heads, dtype=torch.float32,
                              device=self.sampling_offsets.weight.device) * \
            (2.0 * math.pi / self.num_heads)
        grid = torch.stack([thetas.cos(), thetas.sin()], -1)
        grid = (grid / grid.abs().max(-1, keepdim=True)[0]).view(self.num_heads, 1, 1, 2)
        grid = grid.repeat(1, self.num_levels, self.num_points, 1)
        grid = grid * torch.arange(1, self.num_points + 1, dtype=grid.dtype,
                                   device=grid.device).view(1, 1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.view(-1))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, query, key=None, value=None, identity=None, query_pos=None,
                key_padding_mask=None, reference_points=None, spatial_shapes=None,
                level_start_index=None, **kwargs):
        """``dropout(output_proj(attention)) + identity``; value defaults to query, identity
        to query; ``key`` is unused (as mmcv); padded keys (``key_padding_mask``) give zero
        values."""
        value = query if value is None else value
        identity = query if identity is None else identity
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query, value = query.permute(1, 0, 2), value.permute(1, 0, 2)
        bs, num_query, _ = query.shape
        _, num_value, _ = value.shape
        if spatial_shapes is None or reference_points is None:
            raise ValueError('MultiScaleDeformableAttention needs spatial_shapes and '
                             'reference_points')
        if int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum()) != num_value:
            raise ValueError(f'MultiScaleDeformableAttention: spatial_shapes '
                             f'{spatial_shapes.tolist()} cover '
                             f'{int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum())} keys, '
                             f'the value has {num_value}')
        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_value, self.num_heads, -1)
        offsets = self.sampling_offsets(query).view(bs, num_query, self.num_heads,
                                                    self.num_levels, self.num_points, 2)
        weights = self.attention_weights(query).view(
            bs, num_query, self.num_heads, self.num_levels * self.num_points).softmax(-1)
        weights = weights.view(bs, num_query, self.num_heads, self.num_levels, self.num_points)
        if reference_points.shape[-1] == 2:
            normalizer = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            locations = reference_points[:, :, None, :, None, :] + \
                offsets / normalizer[None, None, None, :, None, :]
        elif reference_points.shape[-1] == 4:
            locations = reference_points[:, :, None, :, None, :2] + \
                offsets / self.num_points * reference_points[:, :, None, :, None, 2:] * 0.5
        else:
            raise ValueError(f'Last dim of reference_points must be 2 or 4, but get '
                             f'{reference_points.shape[-1]} instead.')
        output = self.output_proj(
            multi_scale_deformable_attn_pytorch(value, spatial_shapes, locations, weights))
        if not self.batch_first:
            output = output.permute(1, 0, 2)
        return self.dropout(output) + identity
