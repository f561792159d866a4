"""Pyramid Vision Transformer v1 / v2 (mmdet 2.x names, arguments and state-dict keys) with
exact checkpointing.

Keys are mmdet's: stage ``i`` is ``layers.{i}``, a list of its patch embedding
(``layers.{i}.0.projection / norm``), its layers (``layers.{i}.1.0.pos_embed`` with
``use_abs_pos_embed``, then the encoder layers ``layers.{i}.1.{j}.attn.attn.in_proj_weight``,
``.attn.attn.out_proj``, ``.attn.sr / .attn.norm`` with ``sr_ratio > 1``, ``.ffn.layers.0 /
1 / 4`` (MixFFN's 1x1 convs, the 3x3 depth-wise conv of ``use_conv_ffn``; ``0 / 3`` without
it)) and its final norm (``layers.{i}.2``, an identity unless ``norm_after_stage``), so
mmdet's PVT detector checkpoints load strictly. ``convert_weights=True`` (mmdet's default)
converts an ``init_cfg`` checkpoint of the official PVT release (``pvt_tiny.pth``,
``pvt_v2_b0.pth``; keys ``patch_embed1.proj``, ``block1.0.attn.q / kv``, ``mlp.fc1``,
``pos_embed1``) with :func:`pvt_convert`.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`), named as the modules: per stage
``layers.{i}.0`` (patch embedding), ``layers.{i}.1.0`` (the position embedding, when used),
every encoder layer ``layers.{i}.1.{j}``, and ``layers.{i}.2`` (the stage's norm and its
NCHW output), all one chain. mmdet has no ``with_cp`` for PVT; here ``with_cp`` (one flag or
one per stage) sets a stage's units to ``'full'``. Dropout, attention dropout and drop path
(mmcv's draw, :class:`~ckptzoo.models.utils.drop.DropPath`) recompute identically.
``frozen_stages`` and ``norm_eval`` are ckptzoo additions too (Swin's meaning).

Attention runs through ``nn.MultiheadAttention`` with ``need_weights=False`` (fused
scaled-dot-product attention: the full ``N x N/sr^2`` weight matrix is not kept); mmdet asks
for the weights. Results agree to rounding; with ``attn_drop_rate > 0`` the dropout masks of
a seed differ from mmdet's (same distribution).
"""
import math
import warnings
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ...runner.checkpoint import load_file
from ..checkpointing import CheckpointUnit, chain_and_rest, unit_step
from ..utils.ckpt_convert import pvt_convert
from ..utils.conv_module import build_activation_layer
from ..utils.drop import DropPath
from ..utils.pretrained import pretrained_to_init_cfg
from ..utils.transformer import PatchEmbed
from .base import BaseBackbone

__all__ = ['PyramidVisionTransformer', 'PyramidVisionTransformerV2', 'PVTEncoderLayer',
           'SpatialReductionAttention', 'MixFFN', 'AbsolutePositionEmbedding', 'pvt_convert']


def _pair(value, name):
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) in (1, 2) and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return (value[0], value[-1])
    raise ValueError(f'{name} must be an int or a tuple of 1 or 2 ints, got {value!r}')


def _ln_eps(norm_cfg):
    """The ``eps`` of the one norm type PVT uses, ``dict(type='LN', eps=...)`` (mmcv's
    default 1e-5)."""
    if not isinstance(norm_cfg, dict) or norm_cfg.get('type') != 'LN' \
            or set(norm_cfg) - {'type', 'eps', 'requires_grad'}:
        raise ValueError(f"norm_cfg must be dict(type='LN', eps=...), got {norm_cfg!r}")
    return norm_cfg.get('eps', 1e-5)


def _layer_norm(norm_cfg, dims):
    """mmcv's ``build_norm_layer`` for ``dict(type='LN', eps=..., requires_grad=...)``."""
    norm = nn.LayerNorm(dims, eps=_ln_eps(norm_cfg))
    norm.requires_grad_(norm_cfg.get('requires_grad', True))
    return norm


class AbsolutePositionEmbedding(nn.Module):
    """A learnt ``[1, H0 * W0, C]`` embedding, bilinearly resized to the tokens' grid and
    added, then dropout; NHWC in and out."""

    def __init__(self, pos_shape, pos_dim, drop_rate=0.0):
        super().__init__()
        self.pos_shape = _pair(pos_shape, 'pos_shape')
        self.pos_dim = pos_dim
        self.pos_embed = nn.Parameter(torch.zeros(1, self.pos_shape[0] * self.pos_shape[1],
                                                  pos_dim))
        self.drop = nn.Dropout(drop_rate)
        self.cp_unit = CheckpointUnit()

    def init_weights(self):
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def resize_pos_embed(self, pos_embed, input_shape, mode='bilinear'):
        """``pos_embed`` ``[1, L, C]`` (its last ``H0 * W0`` tokens) at ``input_shape``, as
        ``[1, H * W, C]`` (mmdet's method)."""
        h0, w0 = self.pos_shape
        grid = pos_embed[:, -h0 * w0:].reshape(1, h0, w0, self.pos_dim).permute(0, 3, 1, 2)
        if tuple(input_shape) != (h0, w0):  # the same size interpolates to itself
            grid = F.interpolate(grid, size=tuple(input_shape), mode=mode)
        return grid.flatten(2).transpose(1, 2)

    def forward(self, x):
        b, h, w, c = x.shape
        return self.drop(x + self.resize_pos_embed(self.pos_embed, (h, w)).view(1, h, w, c))


class SpatialReductionAttention(nn.Module):
    """Multi-head attention whose keys / values come from the tokens reduced by an
    ``sr_ratio`` strided conv and a LayerNorm; ``identity + drop_path(proj_drop(attn))``,
    NHWC in and out. ``attn`` is ``nn.MultiheadAttention`` (mmcv's wrapper keeps it as
    ``attn.attn``)."""

    def __init__(self, embed_dims, num_heads, attn_drop=0.0, proj_drop=0.0, drop_path_rate=0.0,
                 qkv_bias=True, norm_cfg=dict(type='LN'), sr_ratio=1):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'num_heads={num_heads} must divide embed_dims={embed_dims}')
        self.attn = nn.MultiheadAttention(embed_dims, num_heads, dropout=attn_drop,
                                          bias=qkv_bias, batch_first=True)
        self.proj_drop = nn.Dropout(proj_drop)
        self.dropout_layer = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, stride=sr_ratio)
            self.norm = _layer_norm(norm_cfg, embed_dims)

    def forward(self, x, identity=None):
        b, h, w, c = x.shape
        q = x.reshape(b, h * w, c)
        kv = q
        if self.sr_ratio > 1:
            kv = self.norm(self.sr(x.permute(0, 3, 1, 2)).flatten(2).transpose(1, 2))
        out = self.attn(q, kv, kv, need_weights=False)[0]
        out = self.dropout_layer(self.proj_drop(out)).view(b, h, w, c)
        return out + (x if identity is None else identity)


class MixFFN(nn.Module):
    """1x1 conv, (3x3 depth-wise conv with ``use_conv``), activation, dropout, 1x1 conv,
    dropout; ``identity + drop_path(...)``, NHWC in and out (keys ``layers.0 / 1 / 4``)."""

    def __init__(self, embed_dims, feedforward_channels, act_cfg=dict(type='GELU'),
                 ffn_drop=0.0, drop_path_rate=0.0, use_conv=False):
        super().__init__()
        drop = nn.Dropout(ffn_drop)
        layers = [nn.Conv2d(embed_dims, feedforward_channels, 1), build_activation_layer(act_cfg),
                  drop, nn.Conv2d(feedforward_channels, embed_dims, 1), drop]
        if use_conv:
            layers.insert(1, nn.Conv2d(feedforward_channels, feedforward_channels, 3, padding=1,
                                       groups=feedforward_channels))
        self.layers = nn.Sequential(*layers)
        self.dropout_layer = DropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()

    def forward(self, x, identity=None):
        out = self.layers(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        return (x if identity is None else identity) + self.dropout_layer(out)


class PVTEncoderLayer(nn.Module):
    """``x + attn(norm1(x))``, then ``x + ffn(norm2(x))`` (drop path on both); NHWC."""

    def __init__(self, embed_dims, num_heads, feedforward_channels, drop_rate=0.0,
                 attn_drop_rate=0.0, drop_path_rate=0.0, qkv_bias=True,
                 act_cfg=dict(type='GELU'), norm_cfg=dict(type='LN'), sr_ratio=1,
                 use_conv_ffn=False):
        super().__init__()
        self.norm1 = _layer_norm(norm_cfg, embed_dims)
        self.attn = SpatialReductionAttention(embed_dims, num_heads, attn_drop_rate, drop_rate,
                                              drop_path_rate, qkv_bias, norm_cfg, sr_ratio)
        self.norm2 = _layer_norm(norm_cfg, embed_dims)
        self.ffn = MixFFN(embed_dims, feedforward_channels, act_cfg, drop_rate, drop_path_rate,
                          use_conv_ffn)
        self.cp_unit = CheckpointUnit()

    def forward(self, x):
        x = self.attn(self.norm1(x), identity=x)
        return self.ffn(self.norm2(x), identity=x)


class PVTStage(nn.ModuleList):
    """``[patch_embed, layers, norm]`` (mmdet's keys ``layers.{i}.0 / 1 / 2``) and the units
    of the embedding and of the stage end."""

    def __init__(self, patch_embed, layers, norm):
        super().__init__([patch_embed, nn.ModuleList(layers), norm])
        self.embed_unit = CheckpointUnit()
        self.end_unit = CheckpointUnit()


def _stage_end(norm, x):
    return norm(x).permute(0, 3, 1, 2).contiguous()


@MODELS.register_module()
class PyramidVisionTransformer(BaseBackbone):
    """PVT: per stage an (overlapping, for v2) patch embedding, then encoder layers with
    spatial-reduction attention; outputs NCHW with ``embed_dims * num_heads[i]`` channels at
    stride ``prod(strides[:i + 1])`` (4, 8, 16, 32).

    Args (mmdet's; the defaults are PVT-small's stages, with ``num_layers`` of each config):
        pretrain_img_size (int | tuple): sizes the position embeddings
            (``pretrain_img_size // prod(patch_sizes[:i + 1])``, mmdet's formula).
        embed_dims (int): channels per head; stage ``i`` has ``embed_dims * num_heads[i]``.
        num_stages, num_layers, num_heads, patch_sizes, strides, paddings, sr_ratios,
        mlp_ratios: per stage (sequences of ``num_stages`` ints).
        out_indices (int | sequence[int]): stages returned, in stage order.
        qkv_bias, drop_rate, attn_drop_rate, drop_path_rate (rising linearly over all layers),
        use_abs_pos_embed, norm_after_stage, use_conv_ffn, act_cfg, norm_cfg: as mmdet's.
        convert_weights (bool): ``init_cfg``'s checkpoint is an official PVT release's.
        pretrained (str), init_cfg (dict): ``dict(checkpoint=PATH)`` (``type='Pretrained'``
            optional, as mmdet's configs write it).
        frozen_stages (int): -1 nothing, 0 stage 0's patch (and position) embedding, ``k``
            the first ``k`` stages whole; norm_eval (bool): accepted, no BatchNorm here.
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing of every unit of a stage.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    def __init__(self, pretrain_img_size=224, in_channels=3, embed_dims=64, num_stages=4,
                 num_layers=[3, 4, 6, 3], num_heads=[1, 2, 5, 8], patch_sizes=[4, 2, 2, 2],
                 strides=[4, 2, 2, 2], paddings=[0, 0, 0, 0], sr_ratios=[8, 4, 2, 1],
                 out_indices=(0, 1, 2, 3), mlp_ratios=[8, 8, 4, 4], qkv_bias=True,
                 drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1, use_abs_pos_embed=True,
                 norm_after_stage=False, use_conv_ffn=False, act_cfg=dict(type='GELU'),
                 norm_cfg=dict(type='LN', eps=1e-6), pretrained=None, convert_weights=True,
                 init_cfg=None, frozen_stages=-1, norm_eval=False, with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        pretrain_img_size = _pair(pretrain_img_size, 'pretrain_img_size')
        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
            raise ValueError(f'num_stages must be a positive int, got {num_stages!r}')
        per_stage = dict(num_layers=num_layers, num_heads=num_heads, patch_sizes=patch_sizes,
                         strides=strides, paddings=paddings, sr_ratios=sr_ratios,
                         mlp_ratios=mlp_ratios)
        for name, value in per_stage.items():
            if not isinstance(value, (list, tuple)) or len(value) != num_stages:
                raise ValueError(f'{name} must be a sequence of num_stages={num_stages} '
                                 f'values, got {value!r}')
            low = 0 if name == 'paddings' else 1
            if any(isinstance(v, bool) or not isinstance(v, (int, float) if name == 'mlp_ratios'
                                                         else int) or v < low for v in value):
                raise ValueError(f'{name} must hold ints >= {low}, got {value!r}')
        for name, rate in (('drop_rate', drop_rate), ('attn_drop_rate', attn_drop_rate),
                           ('drop_path_rate', drop_path_rate)):
            if not 0.0 <= float(rate) < 1.0:
                raise ValueError(f'{name} must be in [0, 1), got {rate!r}')
        self.out_indices = self._check_out_indices(out_indices, num_stages)
        self.frozen_stages = self._check_frozen_stages(frozen_stages, num_stages)
        flags = self._stage_flags(with_cp, num_stages)
        if isinstance(embed_dims, bool) or not isinstance(embed_dims, int) or embed_dims < 1:
            raise ValueError(f'embed_dims must be a positive int, got {embed_dims!r}')
        if pretrained is not None and not isinstance(pretrained, str):
            raise TypeError(f'pretrained must be a str or None, got {pretrained!r}')
        init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        if init_cfg is not None and (not isinstance(init_cfg, dict) or 'checkpoint' not in init_cfg
                                     or init_cfg.get('type', 'Pretrained') != 'Pretrained'):
            raise ValueError(f"{type(self).__name__} init_cfg must be dict(type='Pretrained', "
                             f'checkpoint=PATH) (type optional), got {init_cfg!r}')
        self.init_cfg = init_cfg
        self.convert_weights = convert_weights
        self.embed_dims, self.num_stages = embed_dims, num_stages
        self.num_layers, self.num_heads = tuple(num_layers), tuple(num_heads)
        self.patch_sizes, self.strides = tuple(patch_sizes), tuple(strides)
        self.sr_ratios = tuple(sr_ratios)
        self.norm_eval = norm_eval  # no BatchNorm: accepted, no effect
        self.cp_use_reentrant = cp_use_reentrant

        rates = torch.linspace(0, float(drop_path_rate), sum(num_layers), device='cpu').tolist()
        self.layers = nn.ModuleList()
        for i, depth in enumerate(num_layers):
            dims = embed_dims * num_heads[i]
            embed = PatchEmbed(in_channels, dims, patch_sizes[i], strides[i], paddings[i],
                               norm_eps=_ln_eps(norm_cfg))
            layers = []
            if use_abs_pos_embed:
                grid = math.prod(patch_sizes[:i + 1])
                if min(pretrain_img_size) < grid:
                    raise ValueError(f'pretrain_img_size {pretrain_img_size} gives stage {i} no '
                                     f'position embedding: it must be >= prod(patch_sizes[:{i + 1}]'
                                     f') = {grid}')
                layers.append(AbsolutePositionEmbedding(
                    tuple(s // grid for s in pretrain_img_size), dims, drop_rate))
            layers += [PVTEncoderLayer(dims, num_heads[i], int(mlp_ratios[i] * dims), drop_rate,
                                       attn_drop_rate, rates[sum(num_layers[:i]) + j], qkv_bias,
                                       act_cfg, norm_cfg, sr_ratios[i], use_conv_ffn)
                       for j in range(depth)]
            norm = _layer_norm(norm_cfg, dims) if norm_after_stage else nn.Identity()
            self.layers.append(PVTStage(embed, layers, norm))
            in_channels = dims
        for stage, flag in zip(self.layers, flags):
            stage.embed_unit = CheckpointUnit.from_flag(flag, cp_use_reentrant)
            stage.end_unit = CheckpointUnit.from_flag(flag, cp_use_reentrant)
            for m in stage[1]:
                m.cp_unit = CheckpointUnit.from_flag(flag, cp_use_reentrant)
        self.out_channels = tuple(embed_dims * num_heads[i] for i in self.out_indices)
        self._init_default_weights()
        self._freeze_stages()

    def _init_default_weights(self):
        """mmdet's initialisation without ``init_cfg``: truncated normal (std 0.02) linears
        and position embeddings, unit LayerNorms, He-normal (fan-out) convs, zero biases."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
                nn.init.normal_(m.weight, 0, math.sqrt(2.0 / fan_out))
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, AbsolutePositionEmbedding):
                m.init_weights()

    def init_weights(self):
        """Load ``init_cfg`` (non-strict, as mmdet), converted from the official PVT format
        with ``convert_weights``; warns naming the keys the checkpoint lacks."""
        if self.init_cfg is None:
            return
        ckpt = load_file(self.init_cfg['checkpoint'], map_location='cpu')
        state_dict = ckpt.get('state_dict', ckpt.get('model', ckpt))
        prefix = self.init_cfg.get('prefix')
        if prefix:
            prefix = prefix if prefix.endswith('.') else prefix + '.'
            state_dict = {k[len(prefix):]: v for k, v in state_dict.items()
                          if k.startswith(prefix)}
        if self.convert_weights:
            state_dict = pvt_convert(state_dict)
        missing, _ = self.load_state_dict(state_dict, strict=False)
        if missing:
            warnings.warn(f'keys missing from {self.init_cfg["checkpoint"]}: {missing}')

    def _frozen_modules(self):
        if self.frozen_stages < 0:
            return []
        if self.frozen_stages == 0:
            first = self.layers[0]
            pos = [m for m in first[1] if isinstance(m, AbsolutePositionEmbedding)]
            return [first[0]] + pos
        return list(self.layers[:self.frozen_stages])

    def _checkpoint_steps(self):
        """One chain: per stage its patch embedding, (position embedding,) encoder layers and
        stage end (the NCHW output), up to the last stage ``out_indices`` takes."""
        steps = []
        for i, stage in enumerate(self.layers):
            embed, layers, norm = stage
            steps.append(unit_step(f'layers.{i}.0', stage.embed_unit, embed))
            steps += [unit_step(f'layers.{i}.1.{j}', m.cp_unit, m) for j, m in enumerate(layers)]
            steps.append(unit_step(f'layers.{i}.2', stage.end_unit, partial(_stage_end, norm),
                                   norm, emit=i in self.out_indices))
            if i == max(self.out_indices):
                stop = len(steps)
        return chain_and_rest(steps, stop)

    def forward(self, x):
        """NCHW image -> NCHW features, one per ``out_indices`` (later stages do not run)."""
        outs = self._run_chain(self._checkpoint_steps()[0], x)[1]
        return tuple(o for o in outs if o is not None)


_V2_FIXED = dict(patch_sizes=[7, 3, 3, 3], paddings=[3, 1, 1, 1], use_abs_pos_embed=False,
                 norm_after_stage=True, use_conv_ffn=True)


@MODELS.register_module()
class PyramidVisionTransformerV2(PyramidVisionTransformer):
    """PVTv2: overlapping patch embeddings (kernels 7, 3, 3, 3), no position embedding, a
    depth-wise conv in the FFN, a norm after each stage. Those five arguments are fixed (mmdet
    fails on them with "multiple values"); every other is :class:`PyramidVisionTransformer`'s.
    """

    def __init__(self, **kwargs):
        fixed = sorted(set(kwargs) & set(_V2_FIXED))
        if fixed:
            raise TypeError(f'PyramidVisionTransformerV2 fixes {", ".join(fixed)} '
                            f'({", ".join(f"{k}={_V2_FIXED[k]!r}" for k in fixed)}); use '
                            f'PyramidVisionTransformer to choose them')
        super().__init__(**_V2_FIXED, **kwargs)
