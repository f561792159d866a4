"""mmdet 2.x's ``DETRHead``: a transformer over the last feature map decodes ``num_query``
learned queries into class scores (``fc_cls``) and normalised (cx, cy, w, h) boxes
(``reg_ffn`` -> ``fc_reg`` -> sigmoid); each decoder layer's output is matched one to one to the
ground truths (``HungarianAssigner``) and gives its own losses (``d0.loss_cls`` ... for the
auxiliary layers, ``loss_cls`` / ``loss_bbox`` / ``loss_iou`` for the last).

Keys (``input_proj``, ``fc_cls``, ``reg_ffn``, ``fc_reg``, ``query_embedding``,
``transformer.*``, ``positional_encoding.*``) and the loss / result semantics are mmdet's; old
(version 1) DETR checkpoints are converted on load as mmdet does.

Padding: the mask of an image is 1 outside its ``img_shape`` within the batch's
``batch_input_shape`` (set by the detector), shrunk to the feature map by nearest
interpolation; the transformer ignores those positions.

Checkpoint units: every encoder and decoder layer (``bbox_head.transformer.encoder.layers.{i}``,
``...decoder.layers.{i}``), planned like any other; ``with_cp=True`` (ckptzoo's) sets them all
to ``'full'``.

More ground truths than queries in an image: the one-to-one matching leaves the surplus ground
truths unmatched (no loss for them), as mmdet does silently; the assigner warns naming the
image and the counts (see :mod:`ckptzoo.core.bbox.assigners.hungarian_assigner`).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.bbox.transforms import bbox_cxcywh_to_xyxy, bbox_xyxy_to_cxcywh
from ...core.utils import reduce_mean
from ...registry import MODELS, TASK_UTILS
from ...core.utils import multi_apply
from ...runner.fp16 import force_fp32
from ..checkpointing import CheckpointOwnerMixin
from ..utils import build_activation_layer
from ..utils.transformer_layers import FFN
from .base_dense_head import BaseDenseHead

__all__ = ['DETRHead']

_V1_KEYS = {'.self_attn.': '.attentions.0.', '.ffn.': '.ffns.0.',
            '.multihead_attn.': '.attentions.1.', '.decoder.norm.': '.decoder.post_norm.'}


def _same_weight(loss_cfg, cost_cfg, what):
    if loss_cfg.get('loss_weight', 1.0) != cost_cfg.get('weight', 1.0):
        raise ValueError(f"DETRHead: the {what} loss_weight ({loss_cfg.get('loss_weight', 1.0)}) "
                         f"and the assigner's cost weight ({cost_cfg.get('weight', 1.0)}) must "
                         f'be the same')


@MODELS.register_module()
class DETRHead(CheckpointOwnerMixin, BaseDenseHead):
    """Args (mmdet's): ``num_classes``, ``in_channels``, ``num_query`` (100), ``num_reg_fcs``
    (2), ``transformer``, ``sync_cls_avg_factor``, ``positional_encoding`` (``num_feats``
    must be half the transformer's ``embed_dims``), ``loss_cls`` (softmax cross entropy with
    ``class_weight`` / ``bg_cls_weight`` floats: the background class weighs
    ``bg_cls_weight``), ``loss_bbox``, ``loss_iou``, ``train_cfg`` (its assigner's cost
    weights must equal the loss weights, as mmdet asserts), ``test_cfg`` (``max_per_img``).
    ``with_cp`` (ckptzoo's): every transformer layer checkpointed (``'full'``).
    """

    _version = 2
    #: read (and removed) here before ``loss_cls`` is built: the config check allows it
    nested_config_keys = {'loss_cls': ('bg_cls_weight', )}

    def __init__(self, num_classes, in_channels, num_query=100, num_reg_fcs=2, transformer=None,
                 sync_cls_avg_factor=False,
                 positional_encoding=dict(type='SinePositionalEncoding', num_feats=128,
                                          normalize=True),
                 loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                               loss_weight=1.0, class_weight=1.0),
                 loss_bbox=dict(type='L1Loss', loss_weight=5.0),
                 loss_iou=dict(type='GIoULoss', loss_weight=2.0),
                 train_cfg=dict(assigner=dict(
                     type='HungarianAssigner', cls_cost=dict(type='ClassificationCost', weight=1.),
                     reg_cost=dict(type='BBoxL1Cost', weight=5.0),
                     iou_cost=dict(type='IoUCost', iou_mode='giou', weight=2.0))),
                 test_cfg=dict(max_per_img=100), init_cfg=None, with_cp=False, **kwargs):
        super().__init__()
        if transformer is None:
            raise ValueError(f'{type(self).__name__} needs a transformer config')
        loss_cls = dict(loss_cls)
        self.init_cfg = init_cfg
        self.bg_cls_weight = 0
        self.sync_cls_avg_factor = sync_cls_avg_factor
        class_weight = loss_cls.get('class_weight', None)
        if class_weight is not None and type(self) is DETRHead:
            bg_cls_weight = loss_cls.get('bg_cls_weight', class_weight)
            for name, value in (('class_weight', class_weight), ('bg_cls_weight', bg_cls_weight)):
                if not isinstance(value, float):
                    raise TypeError(f'DETRHead loss_cls {name} must be a float, got {value!r}')
            loss_cls['class_weight'] = [class_weight] * num_classes + [bg_cls_weight]
            loss_cls.pop('bg_cls_weight', None)
            self.bg_cls_weight = bg_cls_weight
        if train_cfg:
            if 'assigner' not in train_cfg:
                raise KeyError(f'{type(self).__name__} train_cfg needs an assigner, got keys '
                               f'{sorted(train_cfg)}')
            assigner = train_cfg['assigner']
            for loss_cfg, cost, what in ((loss_cls, 'cls_cost', 'classification'),
                                         (loss_bbox, 'reg_cost', 'regression L1'),
                                         (loss_iou, 'iou_cost', 'regression IoU')):
                _same_weight(loss_cfg, assigner.get(cost, {}), what)
            self.assigner = TASK_UTILS.build(assigner)
        self.num_query = num_query
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.num_reg_fcs = num_reg_fcs
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.fp16_enabled = False
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.loss_iou = MODELS.build(loss_iou)
        self.cls_out_channels = num_classes if self.loss_cls.use_sigmoid else num_classes + 1
        self.act_cfg = transformer.get('act_cfg', dict(type='ReLU', inplace=True))
        self.activate = build_activation_layer(self.act_cfg)
        self.positional_encoding = MODELS.build(positional_encoding)
        self.transformer = MODELS.build(transformer)
        self.embed_dims = self.transformer.embed_dims
        num_feats = positional_encoding.get('num_feats')
        if num_feats is None or num_feats * 2 != self.embed_dims:
            raise ValueError(f'{type(self).__name__}: positional_encoding num_feats ({num_feats})'
                             f' must be half the transformer embed_dims ({self.embed_dims})')
        self._init_layers()
        if with_cp:
            self.transformer.set_checkpoint_plan({'*': 'full'})

    def _init_layers(self):
        self.input_proj = nn.Conv2d(self.in_channels, self.embed_dims, kernel_size=1)
        self.fc_cls = nn.Linear(self.embed_dims, self.cls_out_channels)
        self.reg_ffn = FFN(self.embed_dims, self.embed_dims, self.num_reg_fcs, self.act_cfg,
                           ffn_drop=0.0, add_identity=False)
        self.fc_reg = nn.Linear(self.embed_dims, 4)
        self.query_embedding = nn.Embedding(self.num_query, self.embed_dims)

    def init_weights(self):
        """The transformer's Xavier init (mmdet's; the other layers keep PyTorch's), then a
        ``Pretrained`` init_cfg if any."""
        self.transformer.init_weights()
        super().init_weights()

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """Version 1 DETR checkpoints (``self_attn``, ``ffn``, ``multihead_attn``,
        ``decoder.norm``) in this version's keys, as mmdet converts them."""
        version = local_metadata.get('version', None)
        if (version is None or version < 2) and type(self) is DETRHead:
            for key in [k for k in state_dict if k.startswith(prefix)]:
                for old, new in _V1_KEYS.items():
                    if old in key:
                        state_dict[key.replace(old, new)] = state_dict.pop(key)
                        break
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)

    # ------------------------------------------------------------------------ forward
    @staticmethod
    def _image_masks(x, img_metas):
        """1 outside each image's ``img_shape`` within ``batch_input_shape`` (float, as x)."""
        if 'batch_input_shape' not in img_metas[0]:
            raise KeyError('DETR heads need img_metas[i]["batch_input_shape"] (the padded '
                           'batch size the detector sets); call the detector, not the head, '
                           'or set it')
        h, w = img_metas[0]['batch_input_shape']
        masks = x.new_ones((x.size(0), h, w))
        for i, meta in enumerate(img_metas):
            img_h, img_w = meta['img_shape'][:2]
            masks[i, :img_h, :img_w] = 0
        return masks

    def forward(self, feats, img_metas):
        """Per level (DETR uses one) ``(all_cls_scores [layers, bs, num_query, C],
        all_bbox_preds [layers, bs, num_query, 4])``, as lists over levels."""
        return multi_apply(self.forward_single, feats, [img_metas] * len(feats))

    def forward_single(self, x, img_metas):
        masks = self._image_masks(x, img_metas)
        x = self.input_proj(x)
        masks = F.interpolate(masks.unsqueeze(1), size=x.shape[-2:]).to(torch.bool).squeeze(1)
        pos_embed = self.positional_encoding(masks)
        outs_dec, _ = self.transformer(x, masks, self.query_embedding.weight, pos_embed)
        all_cls_scores = self.fc_cls(outs_dec)
        all_bbox_preds = self.fc_reg(self.activate(self.reg_ffn(outs_dec))).sigmoid()
        return all_cls_scores, all_bbox_preds

    def forward_train(self, x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
                      proposal_cfg=None, **kwargs):
        if proposal_cfg is not None:
            raise ValueError(f'{type(self).__name__} makes no proposals: proposal_cfg must be '
                             f'None')
        outs = self(x, img_metas)
        args = (gt_bboxes, img_metas) if gt_labels is None else (gt_bboxes, gt_labels, img_metas)
        return self.loss(*outs, *args, gt_bboxes_ignore=gt_bboxes_ignore)

    # ------------------------------------------------------------------------ losses
    @staticmethod
    def _check_no_ignore(gt_bboxes_ignore, name):
        if gt_bboxes_ignore is not None:
            raise NotImplementedError(f'{name} does not support gt_bboxes_ignore (as mmdet)')

    def _decoder_losses(self, all_cls_scores, all_bbox_preds, gt_bboxes_list, gt_labels_list,
                        img_metas):
        """mmdet's loss dict of one stack of decoder outputs: the last layer's
        ``loss_cls / loss_bbox / loss_iou`` and ``d{i}.loss_*`` for the others."""
        n = len(all_cls_scores)
        losses_cls, losses_bbox, losses_iou = multi_apply(
            self.loss_single, all_cls_scores, all_bbox_preds, [gt_bboxes_list] * n,
            [gt_labels_list] * n, [img_metas] * n)
        loss_dict = dict(loss_cls=losses_cls[-1], loss_bbox=losses_bbox[-1],
                         loss_iou=losses_iou[-1])
        for i, (c, b, iou) in enumerate(zip(losses_cls[:-1], losses_bbox[:-1], losses_iou[:-1])):
            loss_dict[f'd{i}.loss_cls'] = c
            loss_dict[f'd{i}.loss_bbox'] = b
            loss_dict[f'd{i}.loss_iou'] = iou
        return loss_dict

    @force_fp32(apply_to=('all_cls_scores_list', 'all_bbox_preds_list'))
    def loss(self, all_cls_scores_list, all_bbox_preds_list, gt_bboxes_list, gt_labels_list,
             img_metas, gt_bboxes_ignore=None):
        """Losses of the last level's decoder outputs (every layer)."""
        self._check_no_ignore(gt_bboxes_ignore, type(self).__name__)
        return self._decoder_losses(all_cls_scores_list[-1], all_bbox_preds_list[-1],
                                    gt_bboxes_list, gt_labels_list, img_metas)

    def loss_single(self, cls_scores, bbox_preds, gt_bboxes_list, gt_labels_list, img_metas,
                    gt_bboxes_ignore_list=None):
        """One decoder layer's ``(loss_cls, loss_bbox, loss_iou)`` over the batch: the cls
        loss averaged over matched + ``bg_cls_weight`` x unmatched queries (summed over
        processes with ``sync_cls_avg_factor``), the box losses over the matched queries (of
        all processes, at least 1)."""
        num_imgs = cls_scores.size(0)
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg) = self.get_targets([cls_scores[i] for i in range(num_imgs)],
                                           [bbox_preds[i] for i in range(num_imgs)],
                                           gt_bboxes_list, gt_labels_list, img_metas,
                                           gt_bboxes_ignore_list)
        labels = torch.cat(labels_list, 0)
        label_weights = torch.cat(label_weights_list, 0)
        bbox_targets = torch.cat(bbox_targets_list, 0)
        bbox_weights = torch.cat(bbox_weights_list, 0)
        cls_scores = cls_scores.reshape(-1, self.cls_out_channels)
        cls_avg_factor = num_total_pos * 1.0 + num_total_neg * self.bg_cls_weight
        if self.sync_cls_avg_factor:
            cls_avg_factor = reduce_mean(cls_scores.new_tensor([cls_avg_factor]))
        cls_avg_factor = max(cls_avg_factor, 1)
        loss_cls = self.loss_cls(cls_scores, labels, label_weights, avg_factor=cls_avg_factor)
        num_total_pos = torch.clamp(reduce_mean(loss_cls.new_tensor([num_total_pos])),
                                    min=1).item()
        factors = torch.cat([
            bbox_pred.new_tensor([m['img_shape'][1], m['img_shape'][0], m['img_shape'][1],
                                  m['img_shape'][0]]).unsqueeze(0).repeat(bbox_pred.size(0), 1)
            for m, bbox_pred in zip(img_metas, bbox_preds)], 0)
        bbox_preds = bbox_preds.reshape(-1, 4)
        bboxes = bbox_cxcywh_to_xyxy(bbox_preds) * factors
        bboxes_gt = bbox_cxcywh_to_xyxy(bbox_targets) * factors
        loss_iou = self.loss_iou(bboxes, bboxes_gt, bbox_weights, avg_factor=num_total_pos)
        loss_bbox = self.loss_bbox(bbox_preds, bbox_targets, bbox_weights,
                                   avg_factor=num_total_pos)
        return loss_cls, loss_bbox, loss_iou

    def get_targets(self, cls_scores_list, bbox_preds_list, gt_bboxes_list, gt_labels_list,
                    img_metas, gt_bboxes_ignore_list=None):
        """Per image labels (background ``num_classes``), label weights (all 1), normalised
        (cx, cy, w, h) box targets and weights (1 on matched queries); totals of matched and
        unmatched queries."""
        self._check_no_ignore(gt_bboxes_ignore_list, type(self).__name__)
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, pos_inds_list,
         neg_inds_list) = multi_apply(self._get_target_single, cls_scores_list, bbox_preds_list,
                                      gt_bboxes_list, gt_labels_list, img_metas)
        num_total_pos = sum(inds.numel() for inds in pos_inds_list)
        num_total_neg = sum(inds.numel() for inds in neg_inds_list)
        return (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list,
                num_total_pos, num_total_neg)

    def _get_target_single(self, cls_score, bbox_pred, gt_bboxes, gt_labels, img_meta,
                           gt_bboxes_ignore=None):
        num_bboxes = bbox_pred.size(0)
        assign_result = self.assigner.assign(bbox_pred, cls_score, gt_bboxes, gt_labels,
                                             img_meta, gt_bboxes_ignore)
        gt_inds = assign_result.gt_inds
        pos_inds = torch.nonzero(gt_inds > 0, as_tuple=False).squeeze(-1).unique()
        neg_inds = torch.nonzero(gt_inds == 0, as_tuple=False).squeeze(-1).unique()
        pos_assigned = gt_inds[pos_inds] - 1
        labels = gt_bboxes.new_full((num_bboxes, ), self.num_classes, dtype=torch.long)
        labels[pos_inds] = gt_labels[pos_assigned]
        label_weights = gt_bboxes.new_ones(num_bboxes)
        bbox_targets = torch.zeros_like(bbox_pred)
        bbox_weights = torch.zeros_like(bbox_pred)
        bbox_weights[pos_inds] = 1.0
        img_h, img_w = img_meta['img_shape'][:2]
        factor = bbox_pred.new_tensor([img_w, img_h, img_w, img_h]).unsqueeze(0)
        pos_gt = gt_bboxes.view(-1, 4)[pos_assigned]
        bbox_targets[pos_inds] = bbox_xyxy_to_cxcywh(pos_gt / factor).to(bbox_targets.dtype)
        return labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds

    # ------------------------------------------------------------------------ inference
    @force_fp32(apply_to=('all_cls_scores_list', 'all_bbox_preds_list'))
    def get_bboxes(self, all_cls_scores_list, all_bbox_preds_list, img_metas, rescale=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` from the last level's last decoder
        layer."""
        return self._images_bboxes(all_cls_scores_list[-1][-1], all_bbox_preds_list[-1][-1],
                                   img_metas, rescale)

    def _images_bboxes(self, cls_scores, bbox_preds, img_metas, rescale):
        return [self._get_bboxes_single(cls_scores[i], bbox_preds[i], meta['img_shape'],
                                        meta['scale_factor'], rescale)
                for i, meta in enumerate(img_metas)]

    def _get_bboxes_single(self, cls_score, bbox_pred, img_shape, scale_factor, rescale=False):
        """The top ``max_per_img`` (query, class) scores (sigmoid), or queries by their best
        foreground class (softmax); no NMS (the matching made the queries distinct).
        ``max_per_img`` above the number of candidates keeps them all (mmdet's ``topk``
        fails there, e.g. the default 100 with ``num_query`` 50 under softmax)."""
        cfg = self.test_cfg or {}
        max_per_img = cfg.get('max_per_img', self.num_query)
        candidates = cls_score.numel() if self.loss_cls.use_sigmoid else cls_score.size(0)
        max_per_img = min(max_per_img, candidates)
        if self.loss_cls.use_sigmoid:
            scores, indexes = cls_score.sigmoid().view(-1).topk(max_per_img)
            det_labels = indexes % self.num_classes
            bbox_pred = bbox_pred[indexes // self.num_classes]
        else:
            scores, det_labels = F.softmax(cls_score, dim=-1)[..., :-1].max(-1)
            scores, bbox_index = scores.topk(max_per_img)
            bbox_pred = bbox_pred[bbox_index]
            det_labels = det_labels[bbox_index]
        det_bboxes = bbox_cxcywh_to_xyxy(bbox_pred)
        det_bboxes[:, 0::2] = (det_bboxes[:, 0::2] * img_shape[1]).clamp(min=0, max=img_shape[1])
        det_bboxes[:, 1::2] = (det_bboxes[:, 1::2] * img_shape[0]).clamp(min=0, max=img_shape[0])
        if rescale:
            det_bboxes = det_bboxes / det_bboxes.new_tensor(scale_factor)
        return torch.cat((det_bboxes, scores.unsqueeze(1)), -1), det_labels

    def simple_test(self, feats, img_metas, rescale=False):
        return self.get_bboxes(*self(feats, img_metas), img_metas, rescale=rescale)

    simple_test_bboxes = simple_test

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError(f'{type(self).__name__} does not support test-time '
                                  f'augmentation (mmdet\'s message; its detector asserts it)')

