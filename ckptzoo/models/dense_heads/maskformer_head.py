"""mmdet 2.x ``MaskFormerHead``: a pixel decoder makes per-pixel embeddings (``mask_features``)
and a memory; ``num_queries`` learned queries go through a DETR transformer decoder over that
memory; every decoder layer predicts classes (``cls_embed``, ``num_classes + 1`` with
no-object) and masks (``mask_embed`` MLP dotted with the per-pixel embeddings). Training
matches queries to the panoptic targets per layer (:class:`MaskHungarianAssigner`) and sums
cross-entropy, focal and dice losses of every layer (``d{i}.loss_*`` for all but the last).

Arguments, defaults, state-dict keys and the loss dict are mmdet's.

Checkpoint units: the pixel decoder's (``pixel_decoder.*``), then the transformer decoder's
``transformer_decoder.layers.{j}`` (one chain): the head runs each as decoder layer ``j``
together with its predictions (post norm, classes, masks), so the ``(bs, num_queries, h, w)``
mask logits of a layer are made inside its unit. Every mode exact (dropout replayed).

Evaluation memory: ``simple_test`` upsamples the last layer's masks to the batch input size in
chunks of queries, each chunk at most ``GPU_MEM_LIMIT`` (1 GiB) of float32 upsampled masks
(mmdet upsampled all queries at once; open-mmlab/mmdetection#9424). The detector passes the
low-resolution masks to the fusion head instead, which upsamples per chunk the same way.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.utils import reduce_mean
from ...registry import MODELS, TASK_UTILS
from ..checkpointing import CheckpointOwnerMixin
from ..plugins.pixel_decoder import caffe2_xavier_init, padding_mask_of
from ..roi_heads.mask_heads.fcn_mask_head import BYTES_PER_FLOAT, GPU_MEM_LIMIT
from ..utils import preprocess_panoptic_gt
from .base_dense_head import BaseDenseHead

__all__ = ['MaskFormerHead', 'upsample_masks', 'chunk_step']


def chunk_step(fits):
    """Queries per chunk when ``fits`` fit the limit: a multiple of 16 when at least 16 fit,
    so that the CPU's interpolation (vectorised over up to 16 channels) rounds each chunk as
    it rounds the whole tensor; at least 1."""
    return fits - fits % 16 if fits >= 16 else max(1, fits)


def upsample_masks(masks, size, limit=GPU_MEM_LIMIT):
    """``masks (..., n, h, w)`` bilinearly resized to ``size``, ``n`` in chunks whose output
    is at most ``limit`` bytes (float32 counted); equal to one ``F.interpolate``."""
    lead, (n, h, w) = masks.shape[:-3], masks.shape[-3:]
    flat = masks.reshape(-1, n, h, w)
    per_query = max(1, flat.shape[0] * int(size[0]) * int(size[1]) * BYTES_PER_FLOAT)
    step = chunk_step(int(limit // per_query))
    if step >= n:
        out = F.interpolate(flat, size=size, mode='bilinear', align_corners=False)
    else:
        out = flat.new_empty(flat.shape[:2] + tuple(size))
        for s in range(0, n, step):
            out[:, s:s + step] = F.interpolate(flat[:, s:s + step], size=size,
                                               mode='bilinear', align_corners=False)
    return out.reshape(lead + out.shape[1:])


@MODELS.register_module()
class MaskFormerHead(CheckpointOwnerMixin, BaseDenseHead):
    """Args (mmdet's): ``in_channels`` (list), ``feat_channels``, ``out_channels``,
    ``num_things_classes`` (80), ``num_stuff_classes`` (53), ``num_queries`` (100),
    ``pixel_decoder``, ``enforce_decoder_input_project``, ``transformer_decoder``,
    ``positional_encoding``, ``loss_cls`` / ``loss_mask`` / ``loss_dice``, ``train_cfg``
    (``assigner``, ``sampler``), ``test_cfg``, ``init_cfg``. ``with_cp`` /
    ``cp_use_reentrant``: ours, ``'full'`` on every decoder layer (the pixel decoder takes its
    own ``with_cp``)."""

    def __init__(self, in_channels, feat_channels, out_channels, num_things_classes=80,
                 num_stuff_classes=53, num_queries=100, pixel_decoder=None,
                 enforce_decoder_input_project=False, transformer_decoder=None,
                 positional_encoding=None,
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0,
                               class_weight=[1.0] * 133 + [0.1]),
                 loss_mask=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                                loss_weight=20.0),
                 loss_dice=dict(type='DiceLoss', use_sigmoid=True, activate=True,
                                naive_dice=True, loss_weight=1.0),
                 train_cfg=None, test_cfg=None, init_cfg=None, with_cp=False,
                 cp_use_reentrant=False, **kwargs):
        super().__init__()
        self._check_cfgs(pixel_decoder, transformer_decoder)
        self.init_cfg = init_cfg
        self.num_things_classes = num_things_classes
        self.num_stuff_classes = num_stuff_classes
        self.num_classes = num_things_classes + num_stuff_classes
        self.num_queries = num_queries
        self.pixel_decoder = MODELS.build(dict(pixel_decoder, in_channels=in_channels,
                                               feat_channels=feat_channels,
                                               out_channels=out_channels))
        self.transformer_decoder = MODELS.build(transformer_decoder)
        self.decoder_embed_dims = self.transformer_decoder.embed_dims
        if pixel_decoder.get('type') == 'PixelDecoder' and (
                self.decoder_embed_dims != in_channels[-1] or enforce_decoder_input_project):
            self.decoder_input_proj = nn.Conv2d(in_channels[-1], self.decoder_embed_dims, 1)
        else:
            self.decoder_input_proj = nn.Identity()
        self.decoder_pe = MODELS.build(positional_encoding)
        self.query_embed = nn.Embedding(self.num_queries, out_channels)
        self.cls_embed = nn.Linear(feat_channels, self.num_classes + 1)
        # mmdet's ReLUs are in place; out of place here, so that the selective mode (which
        # keeps the linears' outputs) runs inside the decoder layers' units
        self.mask_embed = nn.Sequential(
            nn.Linear(feat_channels, feat_channels), nn.ReLU(),
            nn.Linear(feat_channels, feat_channels), nn.ReLU(),
            nn.Linear(feat_channels, out_channels))
        self._init_train_test(train_cfg, test_cfg)
        self.class_weight = loss_cls.get('class_weight', None)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_mask = MODELS.build(loss_mask)
        self.loss_dice = MODELS.build(loss_dice)
        self._set_with_cp(with_cp)
        self.init_weights()

    def _set_with_cp(self, with_cp):
        if not isinstance(with_cp, bool):
            raise TypeError(f'{type(self).__name__} with_cp must be a bool, got {with_cp!r}')
        if with_cp:
            self.set_checkpoint_plan({'*': 'full'})

    @staticmethod
    def _check_cfgs(pixel_decoder, transformer_decoder):
        for name, cfg in (('pixel_decoder', pixel_decoder),
                          ('transformer_decoder', transformer_decoder)):
            if not isinstance(cfg, dict) or 'type' not in cfg:
                raise ValueError(f'{name} must be a config dict with a type, got {cfg!r}')

    def _init_train_test(self, train_cfg, test_cfg):
        self.test_cfg = test_cfg
        self.train_cfg = train_cfg
        if train_cfg:
            self.assigner = TASK_UTILS.build(train_cfg['assigner'])
            self.sampler = TASK_UTILS.build(train_cfg['sampler'])

    def init_weights(self):
        """mmdet's: Caffe2 Xavier input projection, the pixel decoder's own init, Xavier
        uniform transformer-decoder matrices."""
        if isinstance(self.decoder_input_proj, nn.Conv2d):
            caffe2_xavier_init(self.decoder_input_proj, bias=0)
        self.pixel_decoder.init_weights()
        for p in self.transformer_decoder.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    # ------------------------------------------------------------------------------ targets
    def preprocess_gt(self, gt_labels_list, gt_masks_list, gt_semantic_segs, img_metas):
        """Per image ``(labels, masks)`` of things and stuff (:func:`preprocess_panoptic_gt`)."""
        if gt_semantic_segs is None:
            gt_semantic_segs = [None] * len(gt_labels_list)
        out = [preprocess_panoptic_gt(labels, masks, seg, self.num_things_classes,
                                      self.num_stuff_classes, meta)
               for labels, masks, seg, meta in zip(gt_labels_list, gt_masks_list,
                                                   gt_semantic_segs, img_metas)]
        return [o[0] for o in out], [o[1] for o in out]

    def get_targets(self, cls_scores_list, mask_preds_list, gt_labels_list, gt_masks_list,
                    img_metas):
        """mmdet's: per image labels, label weights, mask targets, mask weights; the total
        positives and negatives."""
        out = [self._get_target_single(*args) for args in zip(
            cls_scores_list, mask_preds_list, gt_labels_list, gt_masks_list, img_metas)]
        labels, label_weights, mask_targets, mask_weights, pos, neg = map(list, zip(*out))
        return (labels, label_weights, mask_targets, mask_weights,
                sum(p.numel() for p in pos), sum(n.numel() for n in neg))

    def _targets_from(self, assign_result, mask_pred, gt_labels, gt_masks):
        sampling = self.sampler.sample(assign_result, mask_pred, gt_masks)
        pos_inds, neg_inds = sampling.pos_inds, sampling.neg_inds
        labels = gt_labels.new_full((self.num_queries, ), self.num_classes, dtype=torch.long)
        labels[pos_inds] = gt_labels[sampling.pos_assigned_gt_inds]
        label_weights = gt_labels.new_ones(self.num_queries)
        mask_targets = gt_masks[sampling.pos_assigned_gt_inds]
        mask_weights = mask_pred.new_zeros((self.num_queries, ))
        mask_weights[pos_inds] = 1.0
        return labels, label_weights, mask_targets, mask_weights, pos_inds, neg_inds

    def _get_target_single(self, cls_score, mask_pred, gt_labels, gt_masks, img_metas):
        """Match on the ground truths downsampled (nearest) to the prediction's size."""
        if gt_masks.shape[0] > 0:
            gt_down = F.interpolate(gt_masks.unsqueeze(1).float(), mask_pred.shape[-2:],
                                    mode='nearest').squeeze(1).long()
        else:
            gt_down = gt_masks
        assign_result = self.assigner.assign(cls_score, mask_pred, gt_labels, gt_down,
                                             img_metas)
        return self._targets_from(assign_result, mask_pred, gt_labels, gt_masks)

    # ------------------------------------------------------------------------------- losses
    def loss(self, all_cls_scores, all_mask_preds, gt_labels_list, gt_masks_list, img_metas):
        """``loss_cls``, ``loss_mask``, ``loss_dice`` of the last layer, ``d{i}.loss_*`` of
        the others (mmdet's keys)."""
        half = (torch.float16, torch.bfloat16)  # mmdet's force_fp32
        all_cls_scores = [s.float() if s.dtype in half else s for s in all_cls_scores]
        all_mask_preds = [m.float() if m.dtype in half else m for m in all_mask_preds]
        per_layer = [self.loss_single(cls, masks, gt_labels_list, gt_masks_list, img_metas)
                     for cls, masks in zip(all_cls_scores, all_mask_preds)]
        losses = dict(loss_cls=per_layer[-1][0], loss_mask=per_layer[-1][1],
                      loss_dice=per_layer[-1][2])
        for i, (loss_cls, loss_mask, loss_dice) in enumerate(per_layer[:-1]):
            losses[f'd{i}.loss_cls'] = loss_cls
            losses[f'd{i}.loss_mask'] = loss_mask
            losses[f'd{i}.loss_dice'] = loss_dice
        return losses

    def _cls_loss_and_masks(self, cls_scores, mask_preds, gt_labels_list, gt_masks_list,
                            img_metas):
        """The targets of one layer, its classification loss, the matched masks and the
        number of masks the mask losses average over."""
        num_imgs = cls_scores.size(0)
        (labels_list, label_weights_list, mask_targets_list, mask_weights_list,
         num_total_pos, _) = self.get_targets([cls_scores[i] for i in range(num_imgs)],
                                              [mask_preds[i] for i in range(num_imgs)],
                                              gt_labels_list, gt_masks_list, img_metas)
        labels = torch.stack(labels_list, dim=0).flatten(0, 1)
        label_weights = torch.stack(label_weights_list, dim=0).flatten(0, 1)
        mask_targets = torch.cat(mask_targets_list, dim=0)
        mask_weights = torch.stack(mask_weights_list, dim=0)
        cls_scores = cls_scores.flatten(0, 1)
        class_weight = cls_scores.new_tensor(self.class_weight)
        loss_cls = self.loss_cls(cls_scores, labels, label_weights,
                                 avg_factor=class_weight[labels].sum())
        num_total_masks = max(reduce_mean(cls_scores.new_tensor([num_total_pos])), 1)
        return loss_cls, mask_preds[mask_weights > 0], mask_targets, num_total_masks

    def loss_single(self, cls_scores, mask_preds, gt_labels_list, gt_masks_list, img_metas):
        """One layer's ``(loss_cls, loss_mask, loss_dice)``: focal and dice on the matched
        masks upsampled (bilinear) to the targets' size."""
        loss_cls, mask_preds, mask_targets, num_total_masks = self._cls_loss_and_masks(
            cls_scores, mask_preds, gt_labels_list, gt_masks_list, img_metas)
        if mask_targets.shape[0] == 0:
            return loss_cls, mask_preds.sum(), mask_preds.sum()
        mask_preds = F.interpolate(mask_preds.unsqueeze(1), mask_targets.shape[-2:],
                                   mode='bilinear', align_corners=False).squeeze(1)
        loss_dice = self.loss_dice(mask_preds, mask_targets, avg_factor=num_total_masks)
        h, w = mask_preds.shape[-2:]
        loss_mask = self.loss_mask(mask_preds.reshape(-1, 1), 1 - mask_targets.reshape(-1),
                                   avg_factor=num_total_masks * h * w)
        return loss_cls, loss_mask, loss_dice

    # ------------------------------------------------------------------------------ forward
    def _predict(self, out, mask_features):
        """Classes ``(bs, q, C + 1)`` and masks ``(bs, q, h, w)`` of decoder output ``out``
        ``(q, bs, c)`` (already normed)."""
        out = out.transpose(0, 1)
        mask_embed = self.mask_embed(out)
        return self.cls_embed(out), torch.einsum('bqc,bchw->bqhw', mask_embed, mask_features)

    def _layer_fn(self, j, names):
        """Step ``j`` of the decoder's chain: the layer on the query (the state's first
        tensor), then its predictions; the state ``(query, cls, masks)`` leaves the chain."""
        layer = self.transformer_decoder.layers[j]
        post_norm = getattr(self.transformer_decoder, 'post_norm', None)

        def run(state, *values):
            kw = dict(zip(names, values))
            mask_features = kw.pop('mask_features')
            query = layer(state[0] if isinstance(state, tuple) else state, **kw)
            out = post_norm(query) if post_norm is not None else query
            return (query, ) + self._predict(out, mask_features)
        return run

    def forward(self, feats, img_metas):
        """``(all_cls_scores (L, bs, q, C + 1), all_mask_preds (L, bs, q, h, w))``, one per
        decoder layer."""
        batch_size = len(img_metas)
        padding_mask = padding_mask_of(img_metas, feats[-1], feats[-1].shape[-2:])
        mask_features, memory = self.pixel_decoder(feats, img_metas)
        pos_embed = self.decoder_pe(padding_mask).flatten(2).permute(2, 0, 1)
        memory = self.decoder_input_proj(memory).flatten(2).permute(2, 0, 1)
        padding_mask = padding_mask.flatten(1)
        query_embed = self.query_embed.weight.unsqueeze(1).repeat(1, batch_size, 1)
        query = torch.zeros_like(query_embed)
        kwargs = dict(key=memory, value=memory, key_pos=pos_embed, query_pos=query_embed,
                      key_padding_mask=padding_mask, mask_features=mask_features)
        _, outs = self.transformer_decoder._run_layers(query, kwargs, emit=True,
                                                       layer_fn=self._layer_fn)
        return torch.stack([o[1] for o in outs]), torch.stack([o[2] for o in outs])

    def forward_train(self, feats, img_metas, gt_bboxes, gt_labels, gt_masks, gt_semantic_seg,
                      gt_bboxes_ignore=None):
        """The loss dict (mmdet's); ``gt_bboxes`` are unused, ``gt_bboxes_ignore`` must be
        None."""
        if gt_bboxes_ignore is not None:
            raise NotImplementedError(f'{type(self).__name__} does not support '
                                      'gt_bboxes_ignore (got one; pass None)')
        all_cls_scores, all_mask_preds = self(feats, img_metas)
        gt_labels, gt_masks = self.preprocess_gt(gt_labels, gt_masks, gt_semantic_seg,
                                                 img_metas)
        return self.loss(all_cls_scores, all_mask_preds, gt_labels, gt_masks, img_metas)

    def simple_test_low_res(self, feats, img_metas, **kwargs):
        """The last layer's ``(cls (bs, q, C + 1), masks (bs, q, h, w))`` before upsampling
        (what the detector hands to the fusion head, which upsamples per chunk)."""
        all_cls_scores, all_mask_preds = self(feats, img_metas)
        return all_cls_scores[-1], all_mask_preds[-1]

    def simple_test(self, feats, img_metas, **kwargs):
        """mmdet's: the last layer's classes and its masks upsampled to the batch input size
        (in chunks of at most ``GPU_MEM_LIMIT`` bytes, :func:`upsample_masks`)."""
        cls, masks = self.simple_test_low_res(feats, img_metas)
        return cls, upsample_masks(masks, tuple(img_metas[0]['batch_input_shape']))
