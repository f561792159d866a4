"""mmdet 2.x ``MSDeformAttnPixelDecoder`` (Mask2Former): the ``num_levels`` coarsest backbone
features (projected by ``input_convs``, coarsest first) go through a deformable-attention
transformer encoder together (sine positional encoding plus a learned ``level_encoding``);
the finer inputs join by ``lateral_convs`` + bilinear upsampling + ``output_convs``; a 1x1
``mask_feature`` conv makes the per-pixel embedding from the finest output.

Arguments, defaults and state-dict keys are mmdet's (the attribute ``postional_encoding`` keeps
mmdet's spelling; it holds no parameters). Checkpoint units (relative to the decoder):
``input{i}`` (each input projection), ``encoder.layers.{j}`` (each encoder layer: the
encoder's own units, one chain),
``level{i}`` (each top-down stage), ``mask_feature``; every mode exact, dropout included.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.anchor import MlvlPointGenerator
from ...registry import MODELS
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import ConvModule, normal_init, xavier_init
from .pixel_decoder import caffe2_xavier_init

__all__ = ['MSDeformAttnPixelDecoder']

_DEFAULT_ENCODER = dict(
    type='DetrTransformerEncoder', num_layers=6,
    transformerlayers=dict(
        type='BaseTransformerLayer',
        attn_cfgs=dict(type='MultiScaleDeformableAttention', embed_dims=256, num_heads=8,
                       num_levels=3, num_points=4, im2col_step=64, dropout=0.0,
                       batch_first=False, norm_cfg=None, init_cfg=None),
        feedforward_channels=1024, ffn_dropout=0.0,
        operation_order=('self_attn', 'norm', 'ffn', 'norm')),
    init_cfg=None)


@MODELS.register_module()
class MSDeformAttnPixelDecoder(CheckpointOwnerMixin, nn.Module):
    """Args (mmdet's): ``in_channels`` ([256, 512, 1024, 2048]), ``strides`` ([4, 8, 16, 32]),
    ``feat_channels`` (256), ``out_channels`` (256), ``num_outs`` (3: the multi-scale
    features returned, coarsest first), ``norm_cfg`` (GN 32), ``act_cfg`` (ReLU), ``encoder``
    (its attention's ``num_levels`` is the number of encoder levels), ``positional_encoding``,
    ``init_cfg``. ``with_cp`` / ``cp_use_reentrant``: ours, ``'full'`` on every unit."""

    def __init__(self, in_channels=[256, 512, 1024, 2048], strides=[4, 8, 16, 32],
                 feat_channels=256, out_channels=256, num_outs=3,
                 norm_cfg=dict(type='GN', num_groups=32), act_cfg=dict(type='ReLU'),
                 encoder=_DEFAULT_ENCODER,
                 positional_encoding=dict(type='SinePositionalEncoding', num_feats=128,
                                          normalize=True),
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if len(strides) != len(in_channels):
            raise ValueError(f'strides ({list(strides)}) must have one entry per input level '
                             f'(in_channels {list(in_channels)})')
        self.init_cfg = init_cfg
        self.strides = strides
        self.num_input_levels = len(in_channels)
        attn_cfgs = encoder['transformerlayers']['attn_cfgs']
        if isinstance(attn_cfgs, (list, tuple)):
            attn_cfgs = attn_cfgs[0]
        self.num_encoder_levels = attn_cfgs['num_levels']
        if not 1 <= self.num_encoder_levels <= self.num_input_levels:
            raise ValueError(f'num_levels in attn_cfgs must be in [1, {self.num_input_levels}] '
                             f'(the input levels), got {self.num_encoder_levels}')
        self.input_convs = nn.ModuleList(
            ConvModule(in_channels[i], feat_channels, 1, norm_cfg=norm_cfg, act_cfg=None,
                       bias=True)
            for i in range(self.num_input_levels - 1,
                           self.num_input_levels - self.num_encoder_levels - 1, -1))
        self.encoder = MODELS.build(encoder)
        self.postional_encoding = MODELS.build(positional_encoding)
        self.level_encoding = nn.Embedding(self.num_encoder_levels, feat_channels)
        self.lateral_convs = nn.ModuleList()
        self.output_convs = nn.ModuleList()
        self.use_bias = norm_cfg is None
        for i in range(self.num_input_levels - self.num_encoder_levels - 1, -1, -1):
            self.lateral_convs.append(ConvModule(in_channels[i], feat_channels, 1,
                                                 bias=self.use_bias, norm_cfg=norm_cfg,
                                                 act_cfg=None))
            self.output_convs.append(ConvModule(feat_channels, feat_channels, 3, stride=1,
                                                padding=1, bias=self.use_bias,
                                                norm_cfg=norm_cfg, act_cfg=act_cfg))
        self.mask_feature = nn.Conv2d(feat_channels, out_channels, 1, stride=1, padding=0)
        self.num_outs = num_outs
        self.point_generator = MlvlPointGenerator(strides)
        if not isinstance(with_cp, bool):
            raise TypeError(f'{type(self).__name__} with_cp must be a bool, got {with_cp!r}')
        make = lambda: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)  # noqa: E731
        self.input_units = [make() for _ in self.input_convs]
        if with_cp:  # the encoder's layers are units of the encoder
            self.encoder.set_checkpoint_plan({'*': 'full'})
        self.level_units = [make() for _ in self.lateral_convs]
        self.mask_feature_unit = make()

    def _checkpoint_steps(self):
        return ([[unit_step(f'input{i}', u, self.input_convs[i])]
                 for i, u in enumerate(self.input_units)]
                + [[unit_step(f'level{i}', self.level_units[i], self._level_fn(i),
                              self._convs(i))]
                   for i in range(len(self.level_units) - 1, -1, -1)]
                + [[unit_step('mask_feature', self.mask_feature_unit, self.mask_feature)]])

    def init_weights(self):
        """mmdet's: Xavier uniform input projections, Caffe2 Xavier convs, N(0, 1) level
        encoding, Xavier normal encoder matrices, then the deformable attentions' own init."""
        for conv in self.input_convs:
            xavier_init(conv.conv, gain=1, bias=0, distribution='uniform')
        for i in range(self.num_input_levels - self.num_encoder_levels):
            caffe2_xavier_init(self.lateral_convs[i].conv, bias=0)
            caffe2_xavier_init(self.output_convs[i].conv, bias=0)
        caffe2_xavier_init(self.mask_feature, bias=0)
        normal_init(self.level_encoding, mean=0, std=1)
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)
        for layer in self.encoder.layers:
            for attn in getattr(layer, 'attentions', []):
                if type(attn).__name__ == 'MultiScaleDeformableAttention':
                    attn.init_weights()

    def _convs(self, i):
        """The lateral and output conv of input level ``i``. They are built coarsest first
        (``lateral_convs[0]`` takes the level just below the encoder's); mmdet indexed them by
        the level, which mixes them up when more than one level is left to the top-down path
        (fixed; the same for every shipped config, where one is)."""
        k = len(self.lateral_convs) - 1 - i
        return [self.lateral_convs[k], self.output_convs[k]]

    def _level(self, i, top, feat):
        lateral, output = self._convs(i)
        cur = lateral(feat)
        up = F.interpolate(top, size=cur.shape[-2:], mode='bilinear', align_corners=False)
        return output(cur + up)

    def forward(self, feats):
        """``(mask_feature (bs, out_channels, h0, w0), multi-scale features)``: ``num_outs``
        maps of ``feat_channels``, coarsest first."""
        if len(feats) != self.num_input_levels:
            raise ValueError(f'{type(self).__name__} expects {self.num_input_levels} levels '
                             f'(in_channels), got {len(feats)}')
        bs = feats[0].shape[0]
        inputs, masks, pos_list, shapes, refs = [], [], [], [], []
        for i in range(self.num_encoder_levels):
            level = self.num_input_levels - i - 1
            feat = feats[level]
            h, w = feat.shape[-2:]
            projected = self.input_units[i](self.input_convs[i], feat)
            mask = feat.new_zeros((bs, ) + feat.shape[-2:], dtype=torch.bool)
            pos = self.postional_encoding(mask) + self.level_encoding.weight[i].view(1, -1, 1, 1)
            ref = self.point_generator.single_level_grid_priors(feat.shape[-2:], level,
                                                                device=feat.device)
            ref = ref / (feat.new_tensor([[w, h]]) * self.strides[level])
            inputs.append(projected.flatten(2).permute(2, 0, 1))
            masks.append(mask.flatten(1))
            pos_list.append(pos.flatten(2).permute(2, 0, 1))
            shapes.append(feat.shape[-2:])
            refs.append(ref)
        masks = torch.cat(masks, dim=1)
        x = torch.cat(inputs, dim=0)
        pos = torch.cat(pos_list, dim=0)
        shapes = torch.as_tensor(shapes, dtype=torch.long, device=x.device)
        starts = torch.cat((shapes.new_zeros((1, )), shapes.prod(1).cumsum(0)[:-1]))
        refs = torch.cat(refs, dim=0)[None, :, None].repeat(bs, 1, self.num_encoder_levels, 1)
        ratios = refs.new_ones((bs, self.num_encoder_levels, 2))
        x = self.encoder(query=x, key=None, value=None, query_pos=pos, key_pos=None,
                         attn_masks=None, key_padding_mask=None, query_key_padding_mask=masks,
                         spatial_shapes=shapes, reference_points=refs,
                         level_start_index=starts, valid_radios=ratios)
        memory = x.permute(1, 2, 0)
        outs = torch.split(memory, [int(s[0] * s[1]) for s in shapes], dim=-1)
        outs = [o.reshape(bs, -1, int(shapes[i][0]), int(shapes[i][1]))
                for i, o in enumerate(outs)]
        for i in range(len(self.level_units) - 1, -1, -1):
            outs.append(self.level_units[i](self._level_fn(i), outs[-1], feats[i],
                                            module=self._convs(i)))
        return self.mask_feature_unit(self.mask_feature, outs[-1]), outs[:self.num_outs]

    def _level_fn(self, i):
        return lambda top, feat: self._level(i, top, feat)
