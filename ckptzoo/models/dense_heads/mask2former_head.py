"""mmdet 2.x ``Mask2FormerHead``: masked attention. A multi-scale deformable pixel decoder
gives per-pixel embeddings and ``num_transformer_feat_level`` memories (coarsest first);
decoder layer ``i`` cross-attends to memory ``i % num_levels`` only where the previous
prediction's mask (resized to that memory, sigmoid >= 0.5) is on. A prediction (classes and
masks) comes from the queries before the first layer and after every layer; the losses are
computed on ``num_points`` sampled points (uncertain points with randomness for the loss,
uniform random points for the matching), as mmdet.

Arguments, defaults, state-dict keys and the loss dict are mmdet's; the points are drawn with
``torch.rand`` in mmdet's order, so a seeded run draws mmdet's points.

Checkpoint units: the pixel decoder's (``pixel_decoder.*``), ``query_head`` (the prediction
from the learned queries) and the transformer decoder's ``transformer_decoder.layers.{i}``
(one chain), which the head runs as decoder layer ``i`` together with its prediction (post
norm, classes, masks and the next attention mask). Every mode exact (dropout replayed).
Evaluation memory as :class:`MaskFormerHead`.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops import point_sample
from ...registry import MODELS
from ..checkpointing import CheckpointUnit, unit_step
from ..plugins.pixel_decoder import caffe2_xavier_init
from ..utils.point_sample import get_uncertain_point_coords_with_randomness
from .maskformer_head import MaskFormerHead

__all__ = ['Mask2FormerHead']


def _num_heads(transformer_decoder):
    attn = transformer_decoder['transformerlayers']['attn_cfgs']
    return (attn[0] if isinstance(attn, (list, tuple)) else attn)['num_heads']


@MODELS.register_module()
class Mask2FormerHead(MaskFormerHead):
    """Args (mmdet's): those of :class:`MaskFormerHead` plus ``num_transformer_feat_level``
    (3; must equal the pixel decoder encoder's ``num_levels``); ``train_cfg`` also takes
    ``num_points`` (12544), ``oversample_ratio`` (3.0), ``importance_sample_ratio`` (0.75)."""

    def __init__(self, in_channels, feat_channels, out_channels, num_things_classes=80,
                 num_stuff_classes=53, num_queries=100, num_transformer_feat_level=3,
                 pixel_decoder=None, enforce_decoder_input_project=False,
                 transformer_decoder=None, positional_encoding=None, loss_cls=None,
                 loss_mask=None, loss_dice=None, train_cfg=None, test_cfg=None, init_cfg=None,
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        nn.Module.__init__(self)
        self._check_cfgs(pixel_decoder, transformer_decoder)
        for name, cfg in (('loss_cls', loss_cls), ('loss_mask', loss_mask),
                          ('loss_dice', loss_dice)):
            if not isinstance(cfg, dict):
                raise ValueError(f'Mask2FormerHead needs a {name} config, got {cfg!r}')
        self.init_cfg = init_cfg
        self.num_things_classes = num_things_classes
        self.num_stuff_classes = num_stuff_classes
        self.num_classes = num_things_classes + num_stuff_classes
        self.num_queries = num_queries
        self.num_transformer_feat_level = num_transformer_feat_level
        self.num_heads = _num_heads(transformer_decoder)
        self.num_transformer_decoder_layers = transformer_decoder['num_layers']
        enc_attn = pixel_decoder['encoder']['transformerlayers']['attn_cfgs']
        enc_levels = (enc_attn[0] if isinstance(enc_attn, (list, tuple)) else
                      enc_attn)['num_levels']
        if enc_levels != num_transformer_feat_level:
            raise ValueError(f'num_transformer_feat_level ({num_transformer_feat_level}) must '
                             f'equal the pixel decoder encoder num_levels ({enc_levels})')
        self.pixel_decoder = MODELS.build(dict(pixel_decoder, in_channels=in_channels,
                                               feat_channels=feat_channels,
                                               out_channels=out_channels))
        self.transformer_decoder = MODELS.build(transformer_decoder)
        self.decoder_embed_dims = self.transformer_decoder.embed_dims
        self.decoder_input_projs = nn.ModuleList()
        for _ in range(num_transformer_feat_level):
            if self.decoder_embed_dims != feat_channels or enforce_decoder_input_project:
                self.decoder_input_projs.append(
                    nn.Conv2d(feat_channels, self.decoder_embed_dims, kernel_size=1))
            else:
                self.decoder_input_projs.append(nn.Identity())
        self.decoder_positional_encoding = MODELS.build(positional_encoding)
        self.query_embed = nn.Embedding(self.num_queries, feat_channels)
        self.query_feat = nn.Embedding(self.num_queries, feat_channels)
        self.level_embed = nn.Embedding(self.num_transformer_feat_level, feat_channels)
        self.cls_embed = nn.Linear(feat_channels, self.num_classes + 1)
        # mmdet's ReLUs are in place; out of place here, so that the selective mode (which
        # keeps the linears' outputs) runs inside the decoder layers' units
        self.mask_embed = nn.Sequential(
            nn.Linear(feat_channels, feat_channels), nn.ReLU(),
            nn.Linear(feat_channels, feat_channels), nn.ReLU(),
            nn.Linear(feat_channels, out_channels))
        self._init_train_test(train_cfg, test_cfg)
        if train_cfg:
            self.num_points = train_cfg.get('num_points', 12544)
            self.oversample_ratio = train_cfg.get('oversample_ratio', 3.0)
            self.importance_sample_ratio = train_cfg.get('importance_sample_ratio', 0.75)
        self.class_weight = loss_cls.get('class_weight', None)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_mask = MODELS.build(loss_mask)
        self.loss_dice = MODELS.build(loss_dice)
        self.query_head_unit = CheckpointUnit(None, cp_use_reentrant)
        self._set_with_cp(with_cp)
        self.init_weights()

    def _head_modules(self):
        return [self.transformer_decoder.post_norm, self.cls_embed, self.mask_embed]

    def _checkpoint_steps(self):
        return [[unit_step('query_head', self.query_head_unit, self.forward_head,
                           self._head_modules())]]

    def init_weights(self):
        """mmdet's: Caffe2 Xavier input projections, the pixel decoder's init, Xavier normal
        transformer-decoder matrices."""
        for m in self.decoder_input_projs:
            if isinstance(m, nn.Conv2d):
                caffe2_xavier_init(m, bias=0)
        self.pixel_decoder.init_weights()
        for p in self.transformer_decoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)

    # ------------------------------------------------------------------------------ targets
    def _get_target_single(self, cls_score, mask_pred, gt_labels, gt_masks, img_metas):
        """Match on ``num_points`` uniform random points (one set for all queries)."""
        num_queries, num_gts = cls_score.shape[0], gt_labels.shape[0]
        point_coords = torch.rand((1, self.num_points, 2), device=cls_score.device)
        mask_points_pred = point_sample(mask_pred.unsqueeze(1),
                                        point_coords.repeat(num_queries, 1, 1)).squeeze(1)
        gt_points_masks = point_sample(gt_masks.unsqueeze(1).to(mask_pred.dtype),
                                       point_coords.repeat(num_gts, 1, 1)).squeeze(1)
        assign_result = self.assigner.assign(cls_score, mask_points_pred, gt_labels,
                                             gt_points_masks, img_metas)
        return self._targets_from(assign_result, mask_pred, gt_labels, gt_masks)

    def loss_single(self, cls_scores, mask_preds, gt_labels_list, gt_masks_list, img_metas):
        """One prediction's ``(loss_cls, loss_mask, loss_dice)``: the mask losses on
        ``num_points`` points per matched mask, chosen by uncertainty with randomness."""
        loss_cls, mask_preds, mask_targets, num_total_masks = self._cls_loss_and_masks(
            cls_scores, mask_preds, gt_labels_list, gt_masks_list, img_metas)
        if mask_targets.shape[0] == 0:
            return loss_cls, mask_preds.sum(), mask_preds.sum()
        with torch.no_grad():
            points = get_uncertain_point_coords_with_randomness(
                mask_preds.unsqueeze(1), None, self.num_points, self.oversample_ratio,
                self.importance_sample_ratio)
            point_targets = point_sample(mask_targets.unsqueeze(1).to(mask_preds.dtype),
                                         points).squeeze(1)
        point_preds = point_sample(mask_preds.unsqueeze(1), points).squeeze(1)
        loss_dice = self.loss_dice(point_preds, point_targets, avg_factor=num_total_masks)
        loss_mask = self.loss_mask(point_preds.reshape(-1), point_targets.reshape(-1),
                                   avg_factor=num_total_masks * self.num_points)
        return loss_cls, loss_mask, loss_dice

    # ------------------------------------------------------------------------------ forward
    def forward_head(self, decoder_out, mask_feature, attn_mask_target_size):
        """mmdet's: classes ``(bs, q, C + 1)``, masks ``(bs, q, h, w)`` and the next layer's
        attention mask ``(bs * num_heads, q, h_t * w_t)`` (True: not attended)."""
        cls_pred, mask_pred = self._predict(self.transformer_decoder.post_norm(decoder_out),
                                            mask_feature)
        attn_mask = F.interpolate(mask_pred, tuple(attn_mask_target_size), mode='bilinear',
                                  align_corners=False)
        attn_mask = attn_mask.flatten(2).unsqueeze(1).repeat(
            (1, self.num_heads, 1, 1)).flatten(0, 1)
        return cls_pred, mask_pred, (attn_mask.sigmoid() < 0.5).detach()

    def _layer_fn(self, sizes):
        """The decoder chain's steps: step ``i`` attends to level ``i % num_levels`` under
        the attention mask of the state ``(query, cls, masks, attn_mask)`` and predicts the
        next state."""
        def make(i, names):
            layer = self.transformer_decoder.layers[i]
            level = i % self.num_transformer_feat_level
            size = sizes[(i + 1) % self.num_transformer_feat_level]

            def run(state, *values):
                kw = dict(zip(names, values))
                query, attn_mask = state[0], state[3]
                # a query whose mask is empty everywhere attends everywhere (mmdet's)
                full = attn_mask.sum(-1) == attn_mask.shape[-1]
                attn_mask = attn_mask.masked_fill(full.unsqueeze(-1), False)
                query = layer(query=query, key=kw[f'input{level}'], value=kw[f'input{level}'],
                              query_pos=kw['query_embed'], key_pos=kw[f'pos{level}'],
                              attn_masks=[attn_mask, None], query_key_padding_mask=None,
                              key_padding_mask=None)
                return (query, ) + self.forward_head(query, kw['mask_features'], size)
            return run
        return make

    def forward(self, feats, img_metas):
        """``(cls_pred_list, mask_pred_list)``: ``num_layers + 1`` predictions, classes
        ``(bs, q, C + 1)`` and masks ``(bs, q, h, w)``."""
        batch_size = len(img_metas)
        mask_features, memorys = self.pixel_decoder(feats)
        inputs, pos_encodings = [], []
        for i in range(self.num_transformer_feat_level):
            x = self.decoder_input_projs[i](memorys[i]).flatten(2).permute(2, 0, 1)
            inputs.append(x + self.level_embed.weight[i].view(1, 1, -1))
            mask = x.new_zeros((batch_size, ) + memorys[i].shape[-2:], dtype=torch.bool)
            pos_encodings.append(
                self.decoder_positional_encoding(mask).flatten(2).permute(2, 0, 1))
        query_feat = self.query_feat.weight.unsqueeze(1).repeat((1, batch_size, 1))
        query_embed = self.query_embed.weight.unsqueeze(1).repeat((1, batch_size, 1))
        sizes = [m.shape[-2:] for m in memorys]
        cls_pred, mask_pred, attn_mask = self.query_head_unit(
            self.forward_head, query_feat, mask_features, sizes[0],
            module=self._head_modules())
        kwargs = dict(query_embed=query_embed, mask_features=mask_features)
        for i in range(self.num_transformer_feat_level):
            kwargs[f'input{i}'] = inputs[i]
            kwargs[f'pos{i}'] = pos_encodings[i]
        _, outs = self.transformer_decoder._run_layers(
            (query_feat, cls_pred, mask_pred, attn_mask), kwargs, emit=True,
            layer_fn=self._layer_fn(sizes))
        return [cls_pred] + [o[1] for o in outs], [mask_pred] + [o[2] for o in outs]

    def simple_test_low_res(self, feats, img_metas, **kwargs):
        cls_list, mask_list = self(feats, img_metas)
        return cls_list[-1], mask_list[-1]
