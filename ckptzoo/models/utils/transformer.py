"""Patch embedding shared by the transformer backbones (mmcv / mmdet ``PatchEmbed``: keys
``projection`` and ``norm``). Swin uses it non-overlapping (kernel = stride = patch size),
PVT overlapping (PVTv2: kernel 7 / stride 4 / padding 3, then 3 / 2 / 1).

Below it, mmdet 2.x's DETR transformers (``DetrTransformerEncoder / Decoder(Layer)``,
``Transformer``, ``DeformableDetrTransformer(Decoder)``), ``inverse_sigmoid`` and Sparse
R-CNN's ``DynamicConv``, built on the mmcv bricks of :mod:`.transformer_layers`."""
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


# ------------------------------------------------------------------------ DETR transformers
import math as _math  # noqa: E402
from functools import partial  # noqa: E402

import torch  # noqa: E402

from ...registry import MODELS  # noqa: E402
from ..checkpointing import CheckpointOwnerMixin  # noqa: E402
from .conv_module import build_activation_layer  # noqa: E402
from .norm import build_norm_layer  # noqa: E402
from .transformer_layers import (BaseTransformerLayer, InitCfgMixin,  # noqa: E402
                                 MultiScaleDeformableAttention, TransformerLayerSequence,
                                 build_transformer_layer_sequence)
from .weight_init import xavier_init  # noqa: E402

__all__ += ['inverse_sigmoid', 'DetrTransformerDecoderLayer', 'DetrTransformerEncoder',
            'DetrTransformerDecoder', 'Transformer', 'DeformableDetrTransformerDecoder',
            'DeformableDetrTransformer', 'DynamicConv']


def inverse_sigmoid(x, eps=1e-5):
    """``log(x / (1 - x))`` with ``x`` clamped to [0, 1] and both terms to at least ``eps``."""
    x = x.clamp(min=0, max=1)
    return torch.log(x.clamp(min=eps) / (1 - x).clamp(min=eps))


@MODELS.register_module()
class DetrTransformerDecoderLayer(BaseTransformerLayer):
    """A DETR decoder layer: six operations (self_attn, cross_attn, ffn and three norms).

    ``feedforward_channels``, ``ffn_dropout``, ``ffn_num_fcs`` set the FFN. ``act_cfg``
    sets the FFN's activation; mmdet passes it to mmcv, which drops it (the FFN is always
    ReLU there): the default ReLU is the same, another activation is used here, not dropped.
    """

    def __init__(self, attn_cfgs, feedforward_channels, ffn_dropout=0.0, operation_order=None,
                 act_cfg=dict(type='ReLU', inplace=True), norm_cfg=dict(type='LN'),
                 ffn_num_fcs=2, **kwargs):
        if not isinstance(operation_order, (list, tuple)) or len(operation_order) != 6 or \
                set(operation_order) != {'self_attn', 'norm', 'cross_attn', 'ffn'}:
            raise ValueError(f'DetrTransformerDecoderLayer operation_order must have 6 '
                             f"operations of 'self_attn', 'norm', 'cross_attn', 'ffn' (each "
                             f'at least once), got {operation_order!r}')
        if 'ffn_cfgs' not in kwargs:
            kwargs['ffn_cfgs'] = dict(type='FFN', feedforward_channels=1024, num_fcs=2,
                                      ffn_drop=0., act_cfg=dict(act_cfg))
        super().__init__(attn_cfgs=attn_cfgs, feedforward_channels=feedforward_channels,
                         ffn_dropout=ffn_dropout, operation_order=operation_order,
                         norm_cfg=norm_cfg, ffn_num_fcs=ffn_num_fcs, **kwargs)


@MODELS.register_module()
class DetrTransformerEncoder(TransformerLayerSequence):
    """The layers, then ``post_norm`` (built from ``post_norm_cfg`` only for pre-norm layers,
    which need it)."""

    def __init__(self, *args, post_norm_cfg=dict(type='LN'), **kwargs):
        super().__init__(*args, **kwargs)
        if post_norm_cfg is not None:
            self.post_norm = build_norm_layer(post_norm_cfg, self.embed_dims)[1] \
                if self.pre_norm else None
        elif self.pre_norm:
            raise ValueError(f'{type(self).__name__}: pre-norm layers need post_norm_cfg')
        else:
            self.post_norm = None

    def forward(self, *args, **kwargs):
        x = super().forward(*args, **kwargs)
        return self.post_norm(x) if self.post_norm is not None else x


@MODELS.register_module()
class DetrTransformerDecoder(TransformerLayerSequence):
    """The layers, then ``post_norm``: ``[num_layers, num_query, bs, c]`` (every layer's output
    normed) with ``return_intermediate``, else ``[1, num_query, bs, c]`` (mmdet drops the
    leading 1 when there is no post norm; kept here)."""

    def __init__(self, *args, post_norm_cfg=dict(type='LN'), return_intermediate=False,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.return_intermediate = return_intermediate
        self.post_norm = build_norm_layer(post_norm_cfg, self.embed_dims)[1] \
            if post_norm_cfg is not None else None

    def forward(self, query, key=None, value=None, query_pos=None, key_pos=None,
                attn_masks=None, query_key_padding_mask=None, key_padding_mask=None, **kwargs):
        kwargs.update(key=key, value=value, query_pos=query_pos, key_pos=key_pos,
                      attn_masks=attn_masks, query_key_padding_mask=query_key_padding_mask,
                      key_padding_mask=key_padding_mask)
        last, outs = self._run_layers(query, kwargs, emit=self.return_intermediate)
        norm = self.post_norm if self.post_norm is not None else (lambda t: t)
        if self.return_intermediate:
            return torch.stack([norm(o) for o in outs])
        return norm(last)[None]


@MODELS.register_module()
class Transformer(CheckpointOwnerMixin, InitCfgMixin, nn.Module):
    """DETR's transformer: encoder over the flattened feature map (padding masked), decoder
    from zero targets with the query embedding as positional encoding.

    ``forward(x [bs, c, h, w], mask [bs, h, w], query_embed [num_query, c], pos_embed)`` ->
    ``(out_dec [layers, bs, num_query, c], memory [bs, c, h, w])``.

    Checkpoint units: the encoder's and the decoder's layers (``encoder.layers.{i}``,
    ``decoder.layers.{i}``).
    """

    def __init__(self, encoder=None, decoder=None, init_cfg=None):
        super().__init__()
        self.init_cfg = init_cfg
        self.encoder = build_transformer_layer_sequence(encoder)
        self.decoder = build_transformer_layer_sequence(decoder)
        self.embed_dims = self.encoder.embed_dims

    def init_weights(self):
        """Xavier-uniform every module with a weight of 2 or more dims, bias 0 (mmdet)."""
        for m in self.modules():
            if hasattr(m, 'weight') and isinstance(m.weight, torch.Tensor) and \
                    m.weight.dim() > 1:
                xavier_init(m, distribution='uniform')

    def forward(self, x, mask, query_embed, pos_embed):
        bs, c, h, w = x.shape
        x = x.view(bs, c, -1).permute(2, 0, 1)
        pos_embed = pos_embed.view(bs, c, -1).permute(2, 0, 1)
        query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.view(bs, -1)
        memory = self.encoder(query=x, key=None, value=None, query_pos=pos_embed,
                              query_key_padding_mask=mask)
        out_dec = self.decoder(query=torch.zeros_like(query_embed), key=memory, value=memory,
                               key_pos=pos_embed, query_pos=query_embed, key_padding_mask=mask)
        return out_dec.transpose(1, 2), memory.permute(1, 2, 0).reshape(bs, c, h, w)


def _deformable_step(layer, names, reg_branch, state, *values):
    """One Deformable DETR decoder layer (a checkpoint unit): reference points scaled by the
    valid ratios for the layer, then (box refinement) the layer's ``reg_branch`` moves them;
    the new points are detached, as mmdet."""
    output, reference_points = state
    kwargs = dict(zip(names, values))
    valid_ratios = kwargs.pop('valid_ratios')
    scale = torch.cat([valid_ratios, valid_ratios], -1) \
        if reference_points.shape[-1] == 4 else valid_ratios
    output = layer(output, reference_points=reference_points[:, :, None] * scale[:, None],
                   **kwargs)
    if reg_branch is not None:
        tmp = reg_branch(output.permute(1, 0, 2))
        if reference_points.shape[-1] == 4:
            new = tmp + inverse_sigmoid(reference_points)
        else:
            new = torch.cat([tmp[..., :2] + inverse_sigmoid(reference_points), tmp[..., 2:]], -1)
        reference_points = new.sigmoid().detach()
    return output, reference_points


@MODELS.register_module()
class DeformableDetrTransformerDecoder(TransformerLayerSequence):
    """Deformable DETR's decoder: each layer a unit whose state is ``(query, reference
    points)``; with ``reg_branches`` (box refinement) layer ``i``'s branch refines the points
    inside its unit. Returns ``(outputs, reference points)``, stacked over layers with
    ``return_intermediate``."""

    def __init__(self, *args, return_intermediate=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.return_intermediate = return_intermediate

    def forward(self, query, *args, reference_points=None, valid_ratios=None,
                reg_branches=None, **kwargs):
        if args:
            kwargs.update(zip(('key', 'value', 'query_pos', 'key_pos', 'attn_masks',
                               'query_key_padding_mask', 'key_padding_mask'), args))
        if reference_points is None or reference_points.shape[-1] not in (2, 4):
            got = None if reference_points is None else tuple(reference_points.shape)
            raise ValueError(f'{type(self).__name__} needs reference_points of last dim 2 or '
                             f'4, got {got}')
        kwargs['valid_ratios'] = valid_ratios

        def layer_fn(i, names):
            branch = reg_branches[i] if reg_branches is not None else None
            return partial(_deformable_step, self.layers[i], names, branch)

        (output, reference_points), outs = self._run_layers(
            (query, reference_points), kwargs, emit=self.return_intermediate, layer_fn=layer_fn)
        if self.return_intermediate:
            return torch.stack([o[0] for o in outs]), torch.stack([o[1] for o in outs])
        return output, reference_points


@MODELS.register_module()
class DeformableDetrTransformer(Transformer):
    """Deformable DETR's transformer: multi-level features with level embeddings
    (``level_embeds``), a deformable encoder, then queries from ``query_embed`` (reference
    points from ``reference_points``) or, ``as_two_stage``, from the encoder's top
    ``two_stage_num_proposals`` proposals (``enc_output(_norm)``, ``pos_trans(_norm)``).

    Grids, reference points and valid ratios are float32 whatever the features' dtype, as
    mmdet computes them (so fp16 training keeps them exact)."""

    def __init__(self, as_two_stage=False, num_feature_levels=4, two_stage_num_proposals=300,
                 **kwargs):
        super().__init__(**kwargs)
        self.as_two_stage = as_two_stage
        self.num_feature_levels = num_feature_levels
        self.two_stage_num_proposals = two_stage_num_proposals
        self.embed_dims = self.encoder.embed_dims
        self.init_layers()

    def init_layers(self):
        self.level_embeds = nn.Parameter(torch.Tensor(self.num_feature_levels, self.embed_dims))
        if self.as_two_stage:
            self.enc_output = nn.Linear(self.embed_dims, self.embed_dims)
            self.enc_output_norm = nn.LayerNorm(self.embed_dims)
            self.pos_trans = nn.Linear(self.embed_dims * 2, self.embed_dims * 2)
            self.pos_trans_norm = nn.LayerNorm(self.embed_dims * 2)
        else:
            self.reference_points = nn.Linear(self.embed_dims, 2)

    def init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for m in self.modules():
            if isinstance(m, MultiScaleDeformableAttention):
                m.init_weights()
        if not self.as_two_stage:
            xavier_init(self.reference_points, distribution='uniform', bias=0.)
        nn.init.normal_(self.level_embeds)

    def gen_encoder_output_proposals(self, memory, memory_padding_mask, spatial_shapes):
        """Per encoder position a proposal (its cell centre, size 0.05 * 2**level) in inverse
        sigmoid form (inf where padded or too near the border), and the memory there
        (zeroed alike) through ``enc_output`` / ``enc_output_norm``."""
        n = memory.shape[0]
        proposals, start = [], 0
        for lvl, (h, w) in enumerate(spatial_shapes.tolist()):
            mask = memory_padding_mask[:, start:start + h * w].view(n, h, w)
            valid_h = torch.sum(~mask[:, :, 0], 1)
            valid_w = torch.sum(~mask[:, 0, :], 1)
            grid_y, grid_x = torch.meshgrid(
                torch.linspace(0, h - 1, h, dtype=torch.float32, device=memory.device),
                torch.linspace(0, w - 1, w, dtype=torch.float32, device=memory.device),
                indexing='ij')
            grid = torch.cat([grid_x.unsqueeze(-1), grid_y.unsqueeze(-1)], -1)
            scale = torch.cat([valid_w.unsqueeze(-1), valid_h.unsqueeze(-1)], 1).view(n, 1, 1, 2)
            grid = (grid.unsqueeze(0).expand(n, -1, -1, -1) + 0.5) / scale
            wh = torch.ones_like(grid) * 0.05 * (2.0**lvl)
            proposals.append(torch.cat((grid, wh), -1).view(n, -1, 4))
            start += h * w
        proposals = torch.cat(proposals, 1)
        valid = ((proposals > 0.01) & (proposals < 0.99)).all(-1, keepdim=True)
        proposals = torch.log(proposals / (1 - proposals))
        proposals = proposals.masked_fill(memory_padding_mask.unsqueeze(-1), float('inf'))
        proposals = proposals.masked_fill(~valid, float('inf'))
        out = memory.masked_fill(memory_padding_mask.unsqueeze(-1), 0.0)
        out = out.masked_fill(~valid, 0.0)
        return self.enc_output_norm(self.enc_output(out)), proposals

    @staticmethod
    def get_reference_points(spatial_shapes, valid_ratios, device):
        """Every encoder position's centre, normalised by its level's valid size, then scaled
        by every level's valid ratio: (bs, num_keys, num_levels, 2)."""
        points = []
        for lvl, (h, w) in enumerate(spatial_shapes.tolist()):
            ref_y, ref_x = torch.meshgrid(
                torch.linspace(0.5, h - 0.5, h, dtype=torch.float32, device=device),
                torch.linspace(0.5, w - 0.5, w, dtype=torch.float32, device=device),
                indexing='ij')
            ref_y = ref_y.reshape(-1)[None] / (valid_ratios[:, None, lvl, 1] * h)
            ref_x = ref_x.reshape(-1)[None] / (valid_ratios[:, None, lvl, 0] * w)
            points.append(torch.stack((ref_x, ref_y), -1))
        return torch.cat(points, 1)[:, :, None] * valid_ratios[:, None]

    def get_valid_ratio(self, mask):
        """(w, h) fraction of each image's unpadded part of a level: (bs, 2)."""
        _, h, w = mask.shape
        valid_h = torch.sum(~mask[:, :, 0], 1)
        valid_w = torch.sum(~mask[:, 0, :], 1)
        return torch.stack([valid_w.float() / w, valid_h.float() / h], -1)

    def get_proposal_pos_embed(self, proposals, num_pos_feats=None, temperature=10000):
        """Sine embedding of the 4 proposal coordinates, ``num_pos_feats`` each: by default
        ``embed_dims // 2``, which ``pos_trans`` takes (mmdet fixes 128, right only for
        ``embed_dims=256``; any other width fails there)."""
        num_pos_feats = self.embed_dims // 2 if num_pos_feats is None else num_pos_feats
        dim_t = torch.arange(num_pos_feats, dtype=torch.float32, device=proposals.device)
        dim_t = temperature**(2 * (dim_t // 2) / num_pos_feats)
        pos = proposals.sigmoid()[:, :, :, None] * (2 * _math.pi) / dim_t
        return torch.stack((pos[:, :, :, 0::2].sin(), pos[:, :, :, 1::2].cos()),
                           dim=4).flatten(2)

    def forward(self, mlvl_feats, mlvl_masks, query_embed, mlvl_pos_embeds, reg_branches=None,
                cls_branches=None, **kwargs):
        """-> ``(inter_states, init_reference, inter_references, enc_outputs_class,
        enc_outputs_coord_unact)``, the last two None unless ``as_two_stage``."""
        if not self.as_two_stage and query_embed is None:
            raise ValueError('DeformableDetrTransformer needs query_embed unless as_two_stage')
        feats, masks, pos_embeds, shapes = [], [], [], []
        for lvl, (feat, mask, pos) in enumerate(zip(mlvl_feats, mlvl_masks, mlvl_pos_embeds)):
            shapes.append(feat.shape[2:])
            feats.append(feat.flatten(2).transpose(1, 2))
            masks.append(mask.flatten(1))
            pos_embeds.append(pos.flatten(2).transpose(1, 2) +
                              self.level_embeds[lvl].view(1, 1, -1))
        feat_flatten = torch.cat(feats, 1)
        mask_flatten = torch.cat(masks, 1)
        pos_flatten = torch.cat(pos_embeds, 1)
        spatial_shapes = torch.as_tensor([tuple(s) for s in shapes], dtype=torch.long,
                                         device=feat_flatten.device)
        level_start_index = torch.cat((spatial_shapes.new_zeros((1, )),
                                       spatial_shapes.prod(1).cumsum(0)[:-1]))
        valid_ratios = torch.stack([self.get_valid_ratio(m) for m in mlvl_masks], 1)
        reference_points = self.get_reference_points(spatial_shapes, valid_ratios,
                                                     device=feat_flatten.device)
        memory = self.encoder(query=feat_flatten.permute(1, 0, 2), key=None, value=None,
                              query_pos=pos_flatten.permute(1, 0, 2),
                              query_key_padding_mask=mask_flatten,
                              spatial_shapes=spatial_shapes, reference_points=reference_points,
                              level_start_index=level_start_index, valid_ratios=valid_ratios,
                              **kwargs)
        memory = memory.permute(1, 0, 2)
        bs, _, c = memory.shape
        enc_outputs_class = enc_outputs_coord_unact = None
        if self.as_two_stage:
            output_memory, output_proposals = self.gen_encoder_output_proposals(
                memory, mask_flatten, spatial_shapes)
            num_dec = self.decoder.num_layers
            enc_outputs_class = cls_branches[num_dec](output_memory)
            enc_outputs_coord_unact = reg_branches[num_dec](output_memory) + output_proposals
            if output_memory.size(1) < self.two_stage_num_proposals:  # mmdet: topk's 'k out of range'
                raise ValueError(f'two_stage_num_proposals={self.two_stage_num_proposals} is more '
                                 f'than the {output_memory.size(1)} encoder positions of this '
                                 f'batch (spatial shapes {spatial_shapes.tolist()}): the input '
                                 f'is too small')
            topk = torch.topk(enc_outputs_class[..., 0], self.two_stage_num_proposals, dim=1)[1]
            topk_coords_unact = torch.gather(enc_outputs_coord_unact, 1,
                                             topk.unsqueeze(-1).repeat(1, 1, 4)).detach()
            reference_points = topk_coords_unact.sigmoid()
            pos_trans_out = self.pos_trans_norm(
                self.pos_trans(self.get_proposal_pos_embed(topk_coords_unact)))
            query_pos, query = torch.split(pos_trans_out, c, dim=2)
        else:
            query_pos, query = torch.split(query_embed, c, dim=1)
            query_pos = query_pos.unsqueeze(0).expand(bs, -1, -1)
            query = query.unsqueeze(0).expand(bs, -1, -1)
            reference_points = self.reference_points(query_pos).sigmoid()
        init_reference_out = reference_points
        inter_states, inter_references = self.decoder(
            query=query.permute(1, 0, 2), key=None, value=memory.permute(1, 0, 2),
            query_pos=query_pos.permute(1, 0, 2), key_padding_mask=mask_flatten,
            reference_points=reference_points, spatial_shapes=spatial_shapes,
            level_start_index=level_start_index, valid_ratios=valid_ratios,
            reg_branches=reg_branches, **kwargs)
        return (inter_states, init_reference_out, inter_references, enc_outputs_class,
                enc_outputs_coord_unact)


@MODELS.register_module()
class DynamicConv(InitCfgMixin, nn.Module):
    """Sparse R-CNN's dynamic convolution: per proposal, ``dynamic_layer`` makes the weights
    of two 1x1 convolutions (``in_channels -> feat_channels -> out_channels``, each followed
    by its norm and the activation) applied to the proposal's ``input_feat_shape``^2 RoI
    feature; ``with_proj`` flattens it through ``fc_layer`` / ``fc_norm``.

    ``forward(param_feature (n, in_channels), input_feature (n, in_channels, h, w))`` ->
    ``(n, out_channels)``, or ``(n, h * w, out_channels)`` without the projection.
    """

    def __init__(self, in_channels=256, feat_channels=64, out_channels=None, input_feat_shape=7,
                 with_proj=True, act_cfg=dict(type='ReLU', inplace=True),
                 norm_cfg=dict(type='LN'), init_cfg=None):
        super().__init__()
        self.init_cfg = init_cfg
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.out_channels_raw = out_channels
        self.input_feat_shape = input_feat_shape
        self.with_proj = with_proj
        self.act_cfg = act_cfg
        self.norm_cfg = norm_cfg
        self.out_channels = out_channels if out_channels else in_channels
        self.num_params_in = self.in_channels * self.feat_channels
        self.num_params_out = self.out_channels * self.feat_channels
        self.dynamic_layer = nn.Linear(self.in_channels,
                                       self.num_params_in + self.num_params_out)
        self.norm_in = build_norm_layer(norm_cfg, self.feat_channels)[1]
        self.norm_out = build_norm_layer(norm_cfg, self.out_channels)[1]
        self.activation = build_activation_layer(act_cfg)
        if self.with_proj:
            self.fc_layer = nn.Linear(self.out_channels * input_feat_shape**2,
                                      self.out_channels)
            self.fc_norm = build_norm_layer(norm_cfg, self.out_channels)[1]

    def forward(self, param_feature, input_feature):
        if self.with_proj and input_feature.shape[-2:].numel() != self.input_feat_shape**2:
            raise ValueError(f'DynamicConv: input_feature is {tuple(input_feature.shape[-2:])}'
                             f', input_feat_shape={self.input_feat_shape} expects '
                             f'{self.input_feat_shape}x{self.input_feat_shape}')
        features = input_feature.flatten(2).transpose(1, 2)
        params = self.dynamic_layer(param_feature)
        param_in = params[:, :self.num_params_in].view(-1, self.in_channels, self.feat_channels)
        param_out = params[:, -self.num_params_out:].view(-1, self.feat_channels,
                                                          self.out_channels)
        features = self.activation(self.norm_in(torch.bmm(features, param_in)))
        features = self.activation(self.norm_out(torch.bmm(features, param_out)))
        if self.with_proj:
            features = self.activation(self.fc_norm(self.fc_layer(features.flatten(1))))
        return features
