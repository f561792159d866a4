"""Swin Transformer backbone (mmdet 2.x arguments and state-dict keys) with exact checkpointing.

Keys are mmdet's (``patch_embed.projection``, ``stages.0.blocks.0.attn.w_msa.qkv``,
``stages.0.blocks.0.ffn.layers.0.0``, ``stages.0.downsample.reduction``, ``norm0..norm3``), so
mmdet Swin detector checkpoints load strictly (``prefix='backbone'``, ``relative_position_index``
buffers included). ``convert_weights=True`` means what it means in mmdet 2.x: ``init_cfg`` is a
checkpoint of the official Swin release (``swin_tiny_patch4_window7_224.pth``; keys
``layers.0.blocks.0.attn.qkv``, ``mlp.fc1``, ...), converted by :func:`convert_official_swin`.
torchvision ``swin_t / swin_s / swin_b`` state dicts load through
:func:`convert_torchvision_swin` (``convert_weights='torchvision'`` with ``init_cfg``) and give
torchvision's features: with ``convert_weights='torchvision'`` the model follows
torchvision's (and the original Swin's) semantics exactly: a window at least as large as the
padded map is not shifted, and stochastic depth draws as torchvision's ``StochasticDepth``.
Otherwise it is mmdet's: every other block shifts its windows whatever the map's size, and
drop path draws as mmcv's ``DropPath`` (so a run from the same seed drops the same samples).
Either way each block pads its input to a multiple of the window, the mask value is -100 and
patch merging pads odd sizes.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``patch_embed``, every block
``stages.{i}.blocks.{j}`` and every patch merging ``stages.{i}.downsample``. ``with_cp`` sets
the blocks to ``'full'`` (as mmdet and timm do) and also the patch embedding (with stage 0's
flag) and each patch merging (with the flag of the stage it ends), which timm and mmdet leave
out. The RNG is replayed, so drop path and dropout recompute identically. All units are one
chain: a segment may span blocks, patch mergings and stages.

Outputs (``out_indices``): stage ``i``'s blocks' output (before its patch merging), normalised
by its own ``norm{i}`` LayerNorm, NCHW, at stride ``patch_size * 2**i``; channels
``embed_dims * 2**i`` (``SwinTransformer.out_channels`` gives them per index):

    tiny / small: (96, 192, 384, 768)    base: (128, 256, 512, 1024)    large: (192, ..., 1536)

A RetinaNet uses e.g. ``out_indices=(1, 2, 3)`` -> FPN ``in_channels=[192, 384, 768]``.
Inputs whose size is not a multiple of ``patch_size`` are padded at the bottom / right
(mmdet's ``corner`` padding; torchvision's patch convolution drops the remainder instead).
"""
import re
import warnings
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import StochasticDepth

from ...registry import MODELS
from ...runner.checkpoint import load_file
from ..checkpointing import CheckpointUnit, chain_and_rest, chain_step, unit_step
from ..utils.drop import DropPath
from ..utils.ckpt_convert import convert_official_swin, unfold_order_vector, unfold_order_weight
from ..utils.pretrained import check_pretrained_cfg, load_pretrained, pretrained_to_init_cfg
from ..utils.transformer import PatchEmbed
from .base import BaseBackbone

__all__ = ['SwinTransformer', 'SwinBlock', 'PatchMerging', 'PatchEmbed',
           'convert_torchvision_swin', 'convert_official_swin']

CONVERT_WEIGHTS = (False, True, 'official', 'torchvision')


def _window_mask(pad_h, pad_w, window, shift, device):
    """The shifted-window attention mask (0 within a region, -100 across), [nW, N, N]."""
    mask = torch.zeros(pad_h, pad_w, device=device)
    count = 0
    h_slices = ((0, -window[0]), (-window[0], -shift[0]), (-shift[0], None))
    w_slices = ((0, -window[1]), (-window[1], -shift[1]), (-shift[1], None))
    for h0, h1 in h_slices:
        for w0, w1 in w_slices:
            mask[h0:h1, w0:w1] = count
            count += 1
    mask = mask.view(pad_h // window[0], window[0], pad_w // window[1], window[1])
    mask = mask.permute(0, 2, 1, 3).reshape(-1, window[0] * window[1])
    mask = mask.unsqueeze(1) - mask.unsqueeze(2)
    return mask.masked_fill(mask != 0, -100.0)


class WindowMSA(nn.Module):
    """Multi-head self attention within windows, with a relative position bias."""

    # buffers computed here and filled in on load: checkpoints may lack them
    # (ckptzoo.runner.checkpoint_match reads this too)
    _derived_state = ('relative_position_index', )

    def __init__(self, embed_dims, num_heads, window_size, qkv_bias=True, qk_scale=None,
                 attn_drop_rate=0.0, proj_drop_rate=0.0):
        super().__init__()
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.window_size = window_size
        self.scale = qk_scale or (embed_dims // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1)**2, num_heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window_size), torch.arange(window_size),
                                            indexing='ij')).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window_size - 1)
        # saved, as mmdet 2.x saves it (its checkpoints load strictly); derived, so the loaded
        # value is replaced by this one and checkpoints without it load too
        self.register_buffer('relative_position_index',
                             rel[..., 0] * (2 * window_size - 1) + rel[..., 1])
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop_rate)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop_rate)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in self._derived_state:
            state_dict[prefix + name] = getattr(self, name)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x, mask=None):
        """``x``: [B * nW, N, C]; ``mask``: [nW, N, N] or None."""
        bw, n, c = x.shape
        qkv = self.qkv(x).reshape(bw, n, 3, self.num_heads, c // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = (q * self.scale).matmul(k.transpose(-2, -1))
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        attn = attn + bias.view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(bw // nw, nw, self.num_heads, n, n) + mask[None, :, None]
            attn = attn.view(bw, self.num_heads, n, n)
        attn = self.attn_drop(attn.softmax(dim=-1))
        x = attn.matmul(v).transpose(1, 2).reshape(bw, n, c)
        return self.proj_drop(self.proj(x))


class ShiftWindowMSA(nn.Module):
    """Pad to whole windows, cyclic shift, window attention, undo; NHWC in and out.
    ``torchvision``: a window covering a whole (padded) side is not shifted along it."""

    def __init__(self, embed_dims, num_heads, window_size, shift_size, torchvision=False,
                 **msa_kwargs):
        super().__init__()
        self.window_size = window_size
        self.shift_size = shift_size
        self.torchvision = torchvision
        self.w_msa = WindowMSA(embed_dims, num_heads, window_size, **msa_kwargs)

    def forward(self, x):
        b, h, w, c = x.shape
        ws = self.window_size
        x = F.pad(x, (0, 0, 0, (ws - w % ws) % ws, 0, (ws - h % ws) % ws))
        ph, pw = x.shape[1:3]
        shift = [self.shift_size, self.shift_size]  # mmdet's: whatever the map's size
        if self.torchvision:  # a window covering the whole (padded) side: no shift
            shift = [0 if ws >= ph else self.shift_size, 0 if ws >= pw else self.shift_size]
        mask = None
        if sum(shift) > 0:
            x = torch.roll(x, shifts=(-shift[0], -shift[1]), dims=(1, 2))
            mask = _window_mask(ph, pw, (ws, ws), shift, x.device).to(x.dtype)
        x = x.view(b, ph // ws, ws, pw // ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        x = self.w_msa(x.reshape(-1, ws * ws, c), mask)
        x = x.view(b, ph // ws, pw // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, ph, pw, c)
        if sum(shift) > 0:
            x = torch.roll(x, shifts=(shift[0], shift[1]), dims=(1, 2))
        return x[:, :h, :w, :].contiguous()


class FFN(nn.Module):
    """mmcv's FFN layout (keys ``layers.0.0`` and ``layers.1``): fc-GELU-drop-fc-drop."""

    def __init__(self, embed_dims, feedforward_channels, drop_rate=0.0):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Sequential(nn.Linear(embed_dims, feedforward_channels), nn.GELU(),
                          nn.Dropout(drop_rate)),
            nn.Linear(feedforward_channels, embed_dims), nn.Dropout(drop_rate))

    def forward(self, x):
        return self.layers(x)


class SwinBlock(nn.Module):
    """``x + drop_path(attn(norm1(x)))``, then ``x + drop_path(ffn(norm2(x)))``; NHWC."""

    def __init__(self, embed_dims, num_heads, window_size, shift, mlp_ratio=4.0, qkv_bias=True,
                 qk_scale=None, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0,
                 with_cp=False, cp_use_reentrant=False, torchvision=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dims)
        self.attn = ShiftWindowMSA(embed_dims, num_heads, window_size,
                                   window_size // 2 if shift else 0, torchvision=torchvision,
                                   qkv_bias=qkv_bias,
                                   qk_scale=qk_scale, attn_drop_rate=attn_drop_rate,
                                   proj_drop_rate=drop_rate)
        self.norm2 = nn.LayerNorm(embed_dims)
        self.ffn = FFN(embed_dims, int(embed_dims * mlp_ratio), drop_rate)
        self.drop_path = StochasticDepth(drop_path_rate, 'row') if torchvision else \
            DropPath(drop_path_rate)
        self.cp_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    @property
    def with_cp(self):
        return self.cp_unit.mode is not None

    def _inner_forward(self, x):
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.ffn(self.norm2(x)))

    def forward(self, x):
        return self.cp_unit(self._inner_forward, x)


class PatchMerging(nn.Module):
    """2x2 neighbourhoods to channels (pad odd sizes), LayerNorm, linear to ``2 * C``; NHWC.

    Channels are ordered as mmcv's ``nn.Unfold`` orders them (``c * 4 + 2 * dy + dx``), so
    mmdet weights load as they are; :func:`convert_torchvision_swin` reorders torchvision's.
    """

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.norm = nn.LayerNorm(4 * in_channels)
        self.reduction = nn.Linear(4 * in_channels, out_channels, bias=False)

    def forward(self, x):
        b, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        h, w = x.shape[1:3]
        x = x.view(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 5, 2, 4)
        return self.reduction(self.norm(x.reshape(b, h // 2, w // 2, 4 * c)))


class SwinStage(nn.Module):
    """``blocks`` and the ``downsample`` (patch merging) that ends the stage (mmdet's layout);
    a container: ``SwinTransformer`` runs all stages as one chain of checkpoint units."""

    def __init__(self, blocks, downsample=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.downsample = downsample
        self.downsample_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be a positive int, got {value!r}')
    return value


@MODELS.register_module()
class SwinTransformer(BaseBackbone):
    """Swin Transformer backbone.

    Args:
        arch (str | dict): 'tiny', 'small', 'base', 'large', or
            ``dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24))``. mmdet's
            ``embed_dims`` / ``depths`` / ``num_heads`` arguments, when given, override it.
        patch_size (int): patch embedding stride; window_size (int): attention window side.
        mlp_ratio (float), qkv_bias (bool), qk_scale (float | None): as in mmdet.
        drop_rate, attn_drop_rate (float): dropout after projections / of attention weights.
        drop_path_rate (float): stochastic depth, rising linearly from 0 over all blocks.
        out_indices (sequence[int]): stages returned, each normalised by its ``norm{i}``, NCHW.
        frozen_stages (int): -1 nothing, 0 the patch embedding, ``k`` also the first ``k``
            stages (with the patch merging that ends each) and their output norms (mmdet's).
        with_cp (bool | tuple[bool]): ``'full'`` checkpointing of every block, the patch
            merging and (stage 0) the patch embedding; for all stages or one flag per stage.
            ``set_checkpoint_plan`` changes modes later; the attribute ``with_cp`` reads them
            (:attr:`BaseBackbone.with_cp`).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        convert_weights (bool | str): ``True`` or ``'official'``: ``init_cfg`` is an official
            Swin checkpoint (mmdet 2.x's meaning); ``'torchvision'``: a torchvision one;
            ``False``: this module's (mmdet's) keys. ``'torchvision'`` also gives torchvision's
            semantics (window shift, stochastic depth draws; module docstring).
        init_cfg (dict): ``dict(type='Pretrained', checkpoint=PATH, prefix=None)``.
    """

    arch_settings = {
        'tiny': dict(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        'small': dict(embed_dims=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
        'base': dict(embed_dims=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
        'large': dict(embed_dims=192, depths=(2, 2, 18, 2), num_heads=(6, 12, 24, 48)),
    }

    def __init__(self, arch='tiny', embed_dims=None, depths=None, num_heads=None, in_channels=3,
                 patch_size=4, window_size=7, mlp_ratio=4.0, qkv_bias=True, qk_scale=None,
                 patch_norm=True, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.1,
                 out_indices=(0, 1, 2, 3), frozen_stages=-1, norm_eval=False, with_cp=False,
                 cp_use_reentrant=False, use_abs_pos_embed=False, convert_weights=False,
                 pretrain_img_size=224, strides=None, pretrained=None, init_cfg=None):
        super().__init__()
        arch = dict(self._arch(arch))
        for key, value in (('embed_dims', embed_dims), ('depths', depths),
                           ('num_heads', num_heads)):
            if value is not None:
                arch[key] = value
        embed_dims, depths, num_heads = arch['embed_dims'], arch['depths'], arch['num_heads']
        _positive_int(embed_dims, 'embed_dims')
        if not isinstance(depths, (list, tuple)) or not depths or \
                not isinstance(num_heads, (list, tuple)) or len(num_heads) != len(depths):
            raise ValueError(f'depths and num_heads must be sequences of the same length, got '
                             f'depths={depths!r}, num_heads={num_heads!r}')
        num_stages = len(depths)
        for i, (d, h) in enumerate(zip(depths, num_heads)):
            _positive_int(d, f'depths[{i}]')
            _positive_int(h, f'num_heads[{i}]')
            if (embed_dims * 2**i) % h:
                raise ValueError(f'num_heads[{i}]={h} must divide the stage width '
                                 f'{embed_dims * 2**i} (embed_dims * 2**{i})')
        _positive_int(patch_size, 'patch_size')
        _positive_int(window_size, 'window_size')
        if strides is not None and tuple(strides) != (patch_size, ) + (2, ) * (num_stages - 1):
            raise ValueError(f'strides must be (patch_size, 2, 2, ...) = '
                             f'{(patch_size, ) + (2, ) * (num_stages - 1)}, got {strides!r}')
        if use_abs_pos_embed:
            raise NotImplementedError('use_abs_pos_embed=True is not supported')
        for name, rate in (('drop_rate', drop_rate), ('attn_drop_rate', attn_drop_rate),
                           ('drop_path_rate', drop_path_rate)):
            if not 0.0 <= float(rate) < 1.0:
                raise ValueError(f'{name} must be in [0, 1), got {rate!r}')
        out_indices = self._check_out_indices(out_indices, num_stages)
        self._check_frozen_stages(frozen_stages, num_stages)
        if not any(convert_weights is v or (isinstance(v, str) and convert_weights == v)
                   for v in CONVERT_WEIGHTS):
            raise ValueError(f"convert_weights must be False, True (= 'official') or "
                             f"'torchvision', got {convert_weights!r}")
        flags = self._stage_flags(with_cp, num_stages)
        init_cfg = pretrained_to_init_cfg(pretrained, init_cfg)
        self.embed_dims, self.depths, self.num_heads = embed_dims, tuple(depths), tuple(num_heads)
        self.num_stages = num_stages
        self.patch_size = patch_size
        self.window_size = window_size
        self.out_indices = out_indices
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval  # no BatchNorm: accepted for mmdet configs, no effect
        self.cp_use_reentrant = cp_use_reentrant
        self.convert_weights = convert_weights
        self.init_cfg = init_cfg

        self.patch_embed = PatchEmbed(in_channels, embed_dims, patch_size, norm=patch_norm,
                                      drop_rate=drop_rate)
        self.patch_embed_unit = CheckpointUnit.from_flag(flags[0], cp_use_reentrant)
        rates = torch.linspace(0, float(drop_path_rate), sum(depths), device='cpu').tolist()
        self.stages = nn.ModuleList()
        for i, depth in enumerate(depths):
            dims = embed_dims * 2**i
            blocks = [SwinBlock(dims, num_heads[i], window_size, shift=j % 2 == 1,
                                mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,
                                drop_rate=drop_rate, attn_drop_rate=attn_drop_rate,
                                drop_path_rate=rates[sum(depths[:i]) + j],
                                with_cp=flags[i], cp_use_reentrant=cp_use_reentrant,
                                torchvision=convert_weights == 'torchvision')
                      for j in range(depth)]
            down = PatchMerging(dims, 2 * dims) if i < num_stages - 1 else None
            self.stages.append(SwinStage(blocks, down, flags[i], cp_use_reentrant))
        self.num_features = tuple(embed_dims * 2**i for i in range(num_stages))
        for i in self.out_indices:
            self.add_module(f'norm{i}', nn.LayerNorm(self.num_features[i]))
        self.out_channels = tuple(self.num_features[i] for i in self.out_indices)
        self.feat_dim = self.out_channels[-1]
        self._init_default_weights()
        self._freeze_stages()

    def _arch(self, arch):
        if isinstance(arch, dict):
            keys = {'embed_dims', 'depths', 'num_heads'}
            if set(arch) != keys:
                raise ValueError(f'an arch dict needs exactly the keys {sorted(keys)}, '
                                 f'got {sorted(arch)}')
            return arch
        if arch not in self.arch_settings:
            raise ValueError(f'invalid arch {arch!r} for SwinTransformer: allowed are '
                             f'{", ".join(self.arch_settings)} or a dict with embed_dims, '
                             'depths, num_heads')
        return self.arch_settings[arch]

    def _init_default_weights(self):
        """mmdet's: truncated normal (std 0.02) linears with zero bias, unit LayerNorms."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def init_weights(self):
        """Load ``init_cfg``, converting an official (``convert_weights=True``) or torchvision
        (``'torchvision'``) checkpoint first; converted loads are non-strict (``norm{i}`` of
        the outputs have no counterpart) and warn about the missing keys."""
        cfg = check_pretrained_cfg(self.init_cfg, 'SwinTransformer')
        if cfg is None:
            return
        if self.convert_weights is False:
            load_pretrained(self, cfg, 'SwinTransformer')
            return
        ckpt = load_file(cfg['checkpoint'], map_location='cpu')
        state_dict = ckpt.get('state_dict', ckpt.get('model', ckpt))
        if self.convert_weights == 'torchvision':
            state_dict = convert_torchvision_swin(state_dict)
        else:
            state_dict = self._resize_bias_tables(convert_official_swin(state_dict))
        missing, _ = self.load_state_dict(state_dict, strict=False)
        if missing:
            warnings.warn(f'keys missing from {cfg["checkpoint"]}: {missing}')

    def _resize_bias_tables(self, state_dict):
        """mmdet's: bicubic-resize relative position bias tables of another window size."""
        own = self.state_dict()
        for key, table in state_dict.items():
            if 'relative_position_bias_table' not in key or key not in own:
                continue
            (l1, h1), (l2, h2) = table.shape, own[key].shape
            if h1 != h2:
                raise ValueError(f'{key} has {h1} heads in the checkpoint, the model {h2}')
            if l1 != l2:
                s1, s2 = int(l1**0.5), int(l2**0.5)
                resized = F.interpolate(table.permute(1, 0).reshape(1, h1, s1, s1),
                                        size=(s2, s2), mode='bicubic')
                state_dict[key] = resized.view(h2, l2).permute(1, 0).contiguous()
        return state_dict

    def _frozen_modules(self):
        frozen = [self.patch_embed] if self.frozen_stages >= 0 else []
        for i in range(self.frozen_stages):
            frozen.append(self.stages[i])
            if i in self.out_indices:
                frozen.append(getattr(self, f'norm{i}'))
        return frozen

    def _checkpoint_steps(self):
        """One chain: the patch embedding, then per stage its blocks (the last one emits the
        stage's output for ``out_indices``) and its patch merging, up to the last stage
        ``out_indices`` takes; the units after it never run."""
        steps = [unit_step('patch_embed', self.patch_embed_unit, self.patch_embed)]
        for i, stage in enumerate(self.stages):
            for j, block in enumerate(stage.blocks):
                steps.append(chain_step(f'stages.{i}.blocks.{j}', block.cp_unit, block, block,
                                        emit=i in self.out_indices and j == len(stage.blocks) - 1))
            if i == max(self.out_indices):
                stop = len(steps)
            if stage.downsample is not None:
                steps.append(unit_step(f'stages.{i}.downsample', stage.downsample_unit,
                                       stage.downsample))
        return chain_and_rest(steps, stop)

    def forward(self, x):
        """NCHW image -> NCHW features, one per ``out_indices`` (later stages do not run)."""
        feats = [f for f in self._run_chain(self._checkpoint_steps()[0], x)[1] if f is not None]
        return tuple(getattr(self, f'norm{i}')(f).permute(0, 3, 1, 2).contiguous()
                     for i, f in zip(self.out_indices, feats))


def convert_torchvision_swin(state_dict):
    """A torchvision ``swin_t / swin_s / swin_b`` state dict in this module's keys.

    ``features.0`` (conv, LayerNorm) -> ``patch_embed.projection / norm``; ``features.{2i+1}.j``
    -> ``stages.i.blocks.j`` (``attn.qkv / proj / relative_position_bias_table`` ->
    ``attn.w_msa.*``, ``mlp.0 / mlp.3`` -> ``ffn.layers.0.0 / ffn.layers.1``);
    ``features.{2i+2}`` -> ``stages.i.downsample`` with its 4C inputs reordered to mmcv's
    unfold order; ``norm`` -> ``norm{last}``. ``head.*`` and ``relative_position_index`` are
    dropped. Stage outputs other than the last have no torchvision norm: ``norm{i}`` keep
    their initialisation. Swin V2 (``swin_v2_*``) is a different model and is refused.
    """
    if any('cpb_mlp' in k or 'logit_scale' in k for k in state_dict):
        raise ValueError('a Swin V2 state dict (cpb_mlp / logit_scale keys) cannot be converted '
                         'to SwinTransformer (V1)')
    stage_ids = [int(m.group(1)) for k in state_dict
                 if (m := re.match(r'features\.(\d+)\.', k))]
    if not stage_ids:
        raise ValueError('not a torchvision Swin state dict: no features.N.* keys')
    last = (max(stage_ids) - 1) // 2
    out = OrderedDict()
    for key, value in state_dict.items():
        if key.startswith('head.') or key.endswith('relative_position_index'):
            continue
        if key.startswith('norm.'):
            out[f'norm{last}.' + key[5:]] = value
            continue
        m = re.match(r'features\.(\d+)\.(.*)', key)
        if not m:
            raise ValueError(f'unexpected key {key!r} in a torchvision Swin state dict')
        idx, rest = int(m.group(1)), m.group(2)
        if idx == 0:
            rest = rest.replace('0.', 'projection.', 1) if rest.startswith('0.') \
                else rest.replace('2.', 'norm.', 1)
            out[f'patch_embed.{rest}'] = value
        elif idx % 2 == 1:
            rest = re.sub(r'^(\d+)\.attn\.', r'\1.attn.w_msa.', rest)
            rest = re.sub(r'^(\d+)\.mlp\.0\.', r'\1.ffn.layers.0.0.', rest)
            rest = re.sub(r'^(\d+)\.mlp\.3\.', r'\1.ffn.layers.1.', rest)
            out[f'stages.{(idx - 1) // 2}.blocks.{rest}'] = value
        else:
            value = unfold_order_weight(value) if rest.startswith('reduction.') \
                else unfold_order_vector(value)
            out[f'stages.{idx // 2 - 1}.downsample.{rest}'] = value
    return out

