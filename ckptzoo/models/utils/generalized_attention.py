"""mmcv 1.x ``GeneralizedAttention`` (Zhu et al. 2019, "An Empirical Study of Spatial Attention
Mechanisms in Deep Networks"): multi-head attention whose energy sums up to four terms, chosen
by ``attention_type``; GRoIE's ``post_cfg``.

Keys, their order and the seeded initialisation are mmcv's (``query_conv``, ``key_conv``,
``value_conv``, ``appr_geom_fc_x`` / ``_y``, ``appr_bias``, ``geom_bias``, ``proj_conv``,
``gamma``, ``local_constraint_map``), so mmdet checkpoints load strictly.

Fixes over mmcv, which leave its results otherwise equal: with ``spatial_range >= 0`` mmcv
masks with a uint8 tensor, which torch 2 refuses; the mask is kept as mmcv's uint8 parameter and
read as boolean here. Where mmcv failed (``UnboundLocalError`` for ``spatial_range >= 0`` with
``in_channels`` other than 256 / 512; a shape error for a position embedding size not a multiple
of 4, or for the query-position term without the position-only one, GRoIE's '0100', on a
non-square map) a ``ValueError`` says why. On square maps that term is mmcv's as it is, quirk
included (its row part reads the query transposed), so mmdet's GRoIE checkpoints give their
results. A malformed ``attention_type`` is refused (mmcv read any string of digits).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .weight_init import kaiming_init

__all__ = ['GeneralizedAttention']

#: mmcv's local map side per input width (it assumed the block follows a 3x3 conv of a ResNet)
_MAX_LEN = {256: 84, 512: 42}


def _local_constraint_map(max_len, spatial_range, kv_stride):
    """mmcv's ``[max_len, max_len, max_len_kv, max_len_kv]`` uint8 map: 0 where a key lies
    within ``spatial_range`` of the query (on the strided key grid), 1 (masked) elsewhere."""
    max_len_kv = int((max_len - 1.0) / kv_stride + 1)
    q = torch.arange(max_len)
    lo = ((q - spatial_range) // kv_stride).clamp(min=0)
    hi = ((q + spatial_range + 1) // kv_stride + 1).clamp(max=max_len)
    kv = torch.arange(max_len_kv)
    near = (kv[None] >= lo[:, None]) & (kv[None] < hi[:, None])  # [max_len, max_len_kv]
    inside = near[:, None, :, None] & near[None, :, None, :]
    return (~inside).to(torch.uint8)


class GeneralizedAttention(nn.Module):
    """Args (mmcv's): ``in_channels``; ``spatial_range`` (-1: none, else keys beyond it are
    masked; needs ``in_channels`` 256 or 512); ``num_heads``; ``position_embedding_dim``
    (<= 0: ``in_channels``); ``position_magnitude`` (scales coordinate differences);
    ``kv_stride`` / ``q_stride`` (subsample keys-values / queries, the output upsampled back);
    ``attention_type``: four '0'/'1' characters switching on the query-key content, the
    query-relative-position, the key-content-only and the relative-position-only terms."""

    _abbr_ = 'gen_attention_block'

    def __init__(self, in_channels, spatial_range=-1, num_heads=9, position_embedding_dim=-1,
                 position_magnitude=1, kv_stride=2, q_stride=1, attention_type='1111'):
        super().__init__()
        if not (isinstance(attention_type, str) and len(attention_type) == 4
                and set(attention_type) <= {'0', '1'}):
            raise ValueError(f"GeneralizedAttention attention_type must be 4 characters of '0' "
                             f"/ '1' (e.g. '1111', '0100'), got {attention_type!r}")
        if spatial_range >= 0 and in_channels not in _MAX_LEN:
            raise ValueError(f'GeneralizedAttention spatial_range={spatial_range} (a local '
                             f'map) needs in_channels 256 or 512 as mmcv, got {in_channels}')
        self.position_embedding_dim = (position_embedding_dim if position_embedding_dim > 0
                                       else in_channels)
        if attention_type[1] == '1' or attention_type[3] == '1':
            if self.position_embedding_dim % 4:
                raise ValueError(f'GeneralizedAttention position_embedding_dim (in_channels '
                                 f'when <= 0) must be a multiple of 4 for the position terms '
                                 f'(sin / cos of x and y), got {self.position_embedding_dim}')
        self.position_magnitude = position_magnitude
        self.num_heads = num_heads
        self.in_channels = in_channels
        self.spatial_range = spatial_range
        self.kv_stride = kv_stride
        self.q_stride = q_stride
        self.attention_type = [c == '1' for c in attention_type]
        self.qk_embed_dim = in_channels // num_heads
        self.v_dim = in_channels // num_heads
        content, rel_pos, key_only, pos_only = self.attention_type
        out_c = self.qk_embed_dim * num_heads

        def conv1x1(cout, bias=False):
            return nn.Conv2d(in_channels, cout, kernel_size=1, bias=bias)

        # built in mmcv's order, so one seed gives mmcv's weights
        if content or rel_pos:
            self.query_conv = conv1x1(out_c)
        if content or key_only:
            self.key_conv = conv1x1(out_c)
        self.value_conv = conv1x1(self.v_dim * num_heads)
        if rel_pos or pos_only:
            half = self.position_embedding_dim // 2
            self.appr_geom_fc_x = nn.Linear(half, out_c, bias=False)
            self.appr_geom_fc_y = nn.Linear(half, out_c, bias=False)
        stdv = 1.0 / math.sqrt(self.qk_embed_dim * 2)
        if key_only:
            self.appr_bias = nn.Parameter(-2 * stdv * torch.rand(out_c) + stdv)
        if pos_only:
            self.geom_bias = nn.Parameter(-2 * stdv * torch.rand(out_c) + stdv)
        self.proj_conv = nn.Conv2d(self.v_dim * num_heads, in_channels, 1, bias=True)
        self.gamma = nn.Parameter(torch.zeros(1))
        if spatial_range >= 0:
            self.local_constraint_map = nn.Parameter(_local_constraint_map(
                _MAX_LEN[in_channels], spatial_range, kv_stride), requires_grad=False)
        self.q_downsample = nn.AvgPool2d(1, stride=q_stride) if q_stride > 1 else None
        self.kv_downsample = nn.AvgPool2d(1, stride=kv_stride) if kv_stride > 1 else None
        self.init_weights()

    def init_weights(self):
        """mmcv's: uniform Kaiming (fan_in, leaky_relu, a=1), zero biases, on every conv and
        linear; ``gamma`` stays 0, so the block starts as identity."""
        for name in ('query_conv', 'key_conv', 'value_conv', 'appr_geom_fc_x',
                     'appr_geom_fc_y', 'proj_conv'):
            if hasattr(self, name):
                kaiming_init(getattr(self, name), a=1, mode='fan_in',
                             nonlinearity='leaky_relu', bias=0, distribution='uniform')

    def get_position_embedding(self, h, w, h_kv, w_kv, q_stride, kv_stride, device, dtype,
                               feat_dim, wave_length=1000):
        """mmcv's sinusoidal embeddings of the query-key coordinate differences:
        ``([w, w_kv, E], [h, h_kv, E])`` with ``E = 2 * ceil(feat_dim / 4)``; computed in
        ``dtype`` step by step as mmcv, so the values are its own."""
        def axis(n_q, n_kv):
            q = torch.arange(n_q, device=device).to(dtype).view(n_q, 1) * q_stride
            kv = torch.arange(n_kv, device=device).to(dtype).view(n_kv, 1) * kv_stride
            return (q.unsqueeze(1) - kv.unsqueeze(0)) * self.position_magnitude

        exps = (4. / feat_dim) * torch.arange(0, feat_dim / 4).to(device=device, dtype=dtype)
        freqs = (torch.tensor([wave_length], device=device, dtype=dtype) ** exps).view(1, 1, -1)

        def embed(diff):
            angles = diff / freqs
            return torch.cat((angles.sin(), angles.cos()), dim=2)

        return embed(axis(w, w_kv)), embed(axis(h, h_kv))

    def _energy(self, x_q, x_kv):
        """``[n, heads, h * w (1 for key content only), h_kv * w_kv]`` attention logits."""
        content, rel_pos, key_only, pos_only = self.attention_type
        heads, d = self.num_heads, self.qk_embed_dim
        n, _, h, w = x_q.shape
        _, _, h_kv, w_kv = x_kv.shape
        if content or rel_pos:
            query = self.query_conv(x_q).view(n, heads, d, h * w).transpose(2, 3)
        if content or key_only:
            key = self.key_conv(x_kv).view(n, heads, d, h_kv * w_kv)
        if key_only:
            appr_bias = self.appr_bias.view(1, heads, 1, d)
        if pos_only:
            geom_bias = self.geom_bias.view(1, heads, 1, d)
        if key_only and not (content or rel_pos or pos_only):
            # the key term alone is the same for every query: one row serves them all
            return torch.matmul(appr_bias, key)
        if content:
            q = query + appr_bias if key_only else query
            energy = torch.matmul(q, key).view(n, heads, h, w, h_kv, w_kv)
        else:
            energy = x_q.new_zeros(n, heads, h, w, h_kv, w_kv)
            if key_only:
                energy = energy + torch.matmul(appr_bias, key).view(n, heads, 1, 1, h_kv, w_kv)
        if rel_pos or pos_only:
            emb_x, emb_y = self.get_position_embedding(
                h, w, h_kv, w_kv, self.q_stride, self.kv_stride, x_q.device, x_q.dtype,
                self.position_embedding_dim)
            # [heads, w, d, w_kv] and [heads, h, d, h_kv]
            pos_x = self.appr_geom_fc_x(emb_x).view(w, w_kv, heads, d).permute(2, 0, 3, 1)
            pos_y = self.appr_geom_fc_y(emb_y).view(h, h_kv, heads, d).permute(2, 0, 3, 1)
            pos_x, pos_y = pos_x / math.sqrt(2), pos_y / math.sqrt(2)
            if rel_pos:
                q = (query + geom_bias if pos_only else query).view(n, heads, h, w, d)
                # per column: [n, heads, w, h, d] @ [heads, w, d, w_kv]
                q_t = q.transpose(2, 3)
                e_x = torch.matmul(q_t, pos_x).transpose(2, 3).unsqueeze(4)
                if not pos_only:
                    # mmcv's quirk, kept for its checkpoints: without the geometric bias the
                    # row term reads the query at the transposed position (square maps only)
                    if h != w:
                        raise ValueError(
                            f"GeneralizedAttention with attention_type "
                            f"'{''.join('01'[t] for t in self.attention_type)}' (the "
                            f"query-position term without the position-only one) needs a "
                            f"square query map as mmcv, got {h}x{w}")
                    q = q_t
                e_y = torch.matmul(q, pos_y).unsqueeze(5)
            else:
                bias = geom_bias.view(1, heads, 1, 1, d)
                e_x = torch.matmul(bias, pos_x).view(1, heads, 1, w, 1, w_kv)
                e_y = torch.matmul(bias, pos_y).view(1, heads, h, 1, h_kv, 1)
            energy = energy + (e_x + e_y)
        return energy.view(n, heads, h * w, h_kv * w_kv)

    def forward(self, x_input):
        x_q = x_input if self.q_downsample is None else self.q_downsample(x_input)
        x_kv = x_input if self.kv_downsample is None else self.kv_downsample(x_input)
        n, _, h, w = x_q.shape
        _, _, h_kv, w_kv = x_kv.shape
        energy = self._energy(x_q, x_kv)
        if energy.size(2) == 1 and h * w != 1:
            h = w = 1  # key content only: one output, broadcast over the map as mmcv
        if self.spatial_range >= 0:
            far = self.local_constraint_map[:h, :w, :h_kv, :w_kv].contiguous().view(
                1, 1, h * w, h_kv * w_kv).bool()
            energy = energy.masked_fill(far, float('-inf'))
        attention = F.softmax(energy, dim=3)
        value = self.value_conv(x_kv).view(n, self.num_heads, self.v_dim, h_kv * w_kv)
        out = torch.matmul(attention, value.transpose(2, 3))  # [n, heads, h * w, v_dim]
        out = out.transpose(2, 3).reshape(n, self.v_dim * self.num_heads, h, w)
        out = self.proj_conv(out)
        if self.q_downsample is not None:
            out = F.interpolate(out, size=x_input.shape[2:], mode='bilinear',
                                align_corners=False)
        return self.gamma * out + x_input
