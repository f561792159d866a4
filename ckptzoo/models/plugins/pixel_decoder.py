"""mmdet 2.x's MaskFormer pixel decoders (``models/plugins/pixel_decoder.py``):

- ``PixelDecoder``: an FPN-like top-down path over the backbone features (``last_feat_conv``
  on the coarsest, then ``lateral_convs[i]`` + nearest upsampling + ``output_convs[i]``), a
  3x3 ``mask_feature`` conv at the finest level; the memory for the transformer decoder is the
  coarsest input as it is.
- ``TransformerEncoderPixelDecoder``: the coarsest feature goes through ``encoder_in_proj``,
  a DETR transformer encoder (with the image's padding mask and a sine positional encoding)
  and ``encoder_out_proj`` before the top-down path; its memory is the encoder's output.

Arguments, defaults and state-dict keys are mmdet's. Registered in ``MODELS`` (mmcv's
``PLUGIN_LAYERS`` names; the heads build them from there).

Checkpoint units (relative to the decoder): ``encoder.layers.{j}`` (each encoder layer, the
transformer variant: the encoder's own units, one chain), ``last_feat`` (``last_feat_conv`` /
``encoder_out_proj``), ``level{i}`` for each top-down stage ``i`` (run from the coarsest),
``mask_feature``. Every mode is exact, dropout included (the RNG is replayed).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from ..checkpointing import CheckpointOwnerMixin, CheckpointUnit, unit_step
from ..utils import ConvModule, kaiming_init

__all__ = ['PixelDecoder', 'TransformerEncoderPixelDecoder', 'caffe2_xavier_init',
           'padding_mask_of']


def caffe2_xavier_init(module, bias=0):
    """mmcv's ``caffe2_xavier_init``: Kaiming uniform, ``a=1``, fan-in, leaky ReLU."""
    kaiming_init(module, a=1, mode='fan_in', nonlinearity='leaky_relu', bias=bias,
                 distribution='uniform')


def padding_mask_of(img_metas, like, size):
    """``(bs, h, w)`` bool, True on padding: each image's ``img_shape`` inside the batch's
    ``batch_input_shape``, resized (nearest) to ``size`` (mmdet's MaskFormer masks)."""
    batch_h, batch_w = img_metas[0]['batch_input_shape']
    mask = like.new_ones((len(img_metas), batch_h, batch_w), dtype=torch.float32)
    for i, meta in enumerate(img_metas):
        img_h, img_w = meta['img_shape'][:2]
        mask[i, :img_h, :img_w] = 0
    return F.interpolate(mask.unsqueeze(1), size=size, mode='nearest').to(torch.bool).squeeze(1)


class _TopDownUnitsMixin(CheckpointOwnerMixin):
    """The units of the top-down path (``last_feat``, ``level{i}``, ``mask_feature``)."""

    def _init_units(self, with_cp, cp_use_reentrant):
        if not isinstance(with_cp, bool):
            raise TypeError(f'{type(self).__name__} with_cp must be a bool, got {with_cp!r}')
        make = lambda: CheckpointUnit.from_flag(with_cp, cp_use_reentrant)  # noqa: E731
        self.last_feat_unit = make()
        self.level_units = [make() for _ in range(len(self.lateral_convs))]
        self.mask_feature_unit = make()

    def _checkpoint_steps(self):
        last = self._last_feat_module()
        return [[unit_step('last_feat', self.last_feat_unit, last)]] + [
            [unit_step(f'level{i}', self.level_units[i], self._level_fn(i),
                       [self.lateral_convs[i], self.output_convs[i]])]
            for i in range(len(self.level_units) - 1, -1, -1)] + [
            [unit_step('mask_feature', self.mask_feature_unit, self.mask_feature)]]

    def _level(self, i, top, feat):
        cur = self.lateral_convs[i](feat)
        return self.output_convs[i](cur + F.interpolate(top, size=cur.shape[-2:], mode='nearest'))

    def _top_down(self, y, feats):
        for i in range(len(self.level_units) - 1, -1, -1):
            y = self.level_units[i](self._level_fn(i), y, feats[i],
                                    module=[self.lateral_convs[i], self.output_convs[i]])
        return self.mask_feature_unit(self.mask_feature, y)

    def _level_fn(self, i):
        return lambda top, feat: self._level(i, top, feat)


@MODELS.register_module()
class PixelDecoder(_TopDownUnitsMixin, nn.Module):
    """Args (mmdet's): ``in_channels`` (list, one per input level), ``feat_channels``,
    ``out_channels``, ``norm_cfg`` (GN 32), ``act_cfg`` (ReLU), ``init_cfg``.
    ``with_cp`` / ``cp_use_reentrant``: ours, ``'full'`` checkpointing of every unit."""

    def __init__(self, in_channels, feat_channels, out_channels,
                 norm_cfg=dict(type='GN', num_groups=32), act_cfg=dict(type='ReLU'),
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not isinstance(in_channels, (list, tuple)) or len(in_channels) < 1:
            raise ValueError(f'in_channels must be a list of ints (one per level), got '
                             f'{in_channels!r}')
        self.in_channels = in_channels
        self.num_inputs = len(in_channels)
        self.init_cfg = init_cfg
        self.use_bias = norm_cfg is None
        self.lateral_convs = nn.ModuleList()
        self.output_convs = nn.ModuleList()
        for i in range(self.num_inputs - 1):
            self.lateral_convs.append(ConvModule(in_channels[i], feat_channels, 1,
                                                 bias=self.use_bias, norm_cfg=norm_cfg,
                                                 act_cfg=None))
            self.output_convs.append(ConvModule(feat_channels, feat_channels, 3, stride=1,
                                                padding=1, bias=self.use_bias,
                                                norm_cfg=norm_cfg, act_cfg=act_cfg))
        self.last_feat_conv = ConvModule(in_channels[-1], feat_channels, 3, padding=1, stride=1,
                                         bias=self.use_bias, norm_cfg=norm_cfg, act_cfg=act_cfg)
        self.mask_feature = nn.Conv2d(feat_channels, out_channels, 3, stride=1, padding=1)
        self._init_units(with_cp, cp_use_reentrant)

    def _last_feat_module(self):
        return self.last_feat_conv

    def init_weights(self):
        """mmdet's: Caffe2 Xavier on the convs (mmdet skips the last lateral / output conv:
        its loop stops at ``num_inputs - 2``; kept)."""
        for i in range(self.num_inputs - 2):
            caffe2_xavier_init(self.lateral_convs[i].conv, bias=0)
            caffe2_xavier_init(self.output_convs[i].conv, bias=0)
        caffe2_xavier_init(self.mask_feature, bias=0)
        caffe2_xavier_init(self.last_feat_conv.conv, bias=0)

    def forward(self, feats, img_metas):
        """``(mask_feature (bs, out_channels, h0, w0), memory = feats[-1])``."""
        if len(feats) != self.num_inputs:
            raise ValueError(f'{type(self).__name__} expects {self.num_inputs} levels '
                             f'(in_channels), got {len(feats)}')
        y = self.last_feat_unit(self.last_feat_conv, feats[-1])
        return self._top_down(y, feats), feats[-1]


@MODELS.register_module()
class TransformerEncoderPixelDecoder(PixelDecoder):
    """Args: those of :class:`PixelDecoder`, plus ``encoder`` (a transformer layer sequence
    config, e.g. ``DetrTransformerEncoder``; its ``embed_dims`` must equal ``feat_channels``)
    and ``positional_encoding`` (``SinePositionalEncoding``, 128 feats, normalized)."""

    def __init__(self, in_channels, feat_channels, out_channels,
                 norm_cfg=dict(type='GN', num_groups=32), act_cfg=dict(type='ReLU'),
                 encoder=None,
                 positional_encoding=dict(type='SinePositionalEncoding', num_feats=128,
                                          normalize=True),
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__(in_channels, feat_channels, out_channels, norm_cfg, act_cfg,
                         init_cfg=init_cfg, with_cp=with_cp, cp_use_reentrant=cp_use_reentrant)
        if encoder is None:
            raise ValueError('TransformerEncoderPixelDecoder needs an encoder config')
        self.last_feat_conv = None
        self.encoder = MODELS.build(encoder)
        self.encoder_embed_dims = self.encoder.embed_dims
        if self.encoder_embed_dims != feat_channels:
            raise ValueError(f'embed_dims ({self.encoder_embed_dims}) of the transformer '
                             f'encoder must equal feat_channels ({feat_channels})')
        self.positional_encoding = MODELS.build(positional_encoding)
        self.encoder_in_proj = nn.Conv2d(in_channels[-1], feat_channels, kernel_size=1)
        self.encoder_out_proj = ConvModule(feat_channels, feat_channels, 3, stride=1, padding=1,
                                           bias=self.use_bias, norm_cfg=norm_cfg,
                                           act_cfg=act_cfg)
        if with_cp:  # the encoder's layers are units of the encoder
            self.encoder.set_checkpoint_plan({'*': 'full'})

    def _last_feat_module(self):
        return self.encoder_out_proj

    def init_weights(self):
        """mmdet's: Caffe2 Xavier on the convs, Xavier uniform on the encoder's matrices."""
        for i in range(self.num_inputs - 2):
            caffe2_xavier_init(self.lateral_convs[i].conv, bias=0)
            caffe2_xavier_init(self.output_convs[i].conv, bias=0)
        caffe2_xavier_init(self.mask_feature, bias=0)
        caffe2_xavier_init(self.encoder_in_proj, bias=0)
        caffe2_xavier_init(self.encoder_out_proj.conv, bias=0)
        for p in self.encoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, feats, img_metas):
        """``(mask_feature, memory (bs, feat_channels, h, w))``: the memory is the encoder's
        output on the coarsest level."""
        if len(feats) != self.num_inputs:
            raise ValueError(f'{type(self).__name__} expects {self.num_inputs} levels '
                             f'(in_channels), got {len(feats)}')
        last = feats[-1]
        bs, _, h, w = last.shape
        padding_mask = padding_mask_of(img_metas, last, last.shape[-2:])
        pos_embed = self.positional_encoding(padding_mask).flatten(2).permute(2, 0, 1)
        x = self.encoder_in_proj(last).flatten(2).permute(2, 0, 1)
        memory = self.encoder(query=x, key=None, value=None, query_pos=pos_embed,
                              query_key_padding_mask=padding_mask.flatten(1))
        memory = memory.permute(1, 2, 0).view(bs, self.encoder_embed_dims, h, w)
        y = self.last_feat_unit(self.encoder_out_proj, memory)
        return self._top_down(y, feats), memory
