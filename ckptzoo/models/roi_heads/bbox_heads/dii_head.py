"""mmdet 2.x ``DIIHead``: Sparse R-CNN's Dynamic Instance Interactive head (Sun et al. 2021).

Per stage: the proposals' object features attend to each other (``MultiheadAttention`` with
its residual, then LayerNorm: the attention features QueryInst's mask head takes), each then
interacts with its own RoI features through a ``DynamicConv`` whose 1x1 kernels it generates
(residual, LayerNorm), then an FFN (residual inside, LayerNorm); ``cls_fcs`` / ``reg_fcs``
(Linear without bias, LayerNorm, ReLU) lead to ``fc_cls`` (sigmoid classes with a focal loss,
else ``num_classes + 1``) and ``fc_reg`` (4 class-agnostic deltas, decoded by the RoI head).
Losses over the Hungarian-matched proposals: ``loss_cls`` over all of them, ``loss_bbox`` (L1
of the boxes normalised by the image size) and ``loss_iou`` (GIoU) over the positives, all
averaged over the positives of the batch; ``pos_acc``. State-dict keys as mmdet's
(``attention.attn.in_proj_weight``, ``instance_interactive_conv.dynamic_layer.weight``,
``ffn.layers.0.0.weight``, ``cls_fcs.0.weight``, ``fc_cls.weight``, ...).
"""
import math
import numbers

import torch
import torch.nn as nn

from ....core.utils import reduce_mean
from ....registry import MODELS
from ....runner.fp16 import auto_fp16, force_fp32
from ....utils.cfg_get import cfg_get
from ...losses import accuracy
from ...utils.transformer_layers import FFN, MultiheadAttention
from .bbox_head import BBoxHead

__all__ = ['DIIHead']


def _bias_init_with_prob(prior_prob):
    """mmcv's: the bias whose sigmoid is ``prior_prob``."""
    return -math.log((1 - prior_prob) / prior_prob)


@MODELS.register_module()
class DIIHead(BBoxHead):
    """Args (mmdet 2.x's):
        num_classes (int): foreground classes (default 80).
        num_ffn_fcs (int): Linear layers of the FFN (default 2).
        num_heads (int): attention heads (default 8).
        num_cls_fcs, num_reg_fcs (int): hidden layers of the classification (1) and
            regression (3) branches.
        feedforward_channels (int): the FFN's hidden width (default 2048).
        in_channels (int): channels of the object and RoI features (default 256).
        dropout (float): dropout of the attention weights, after the dynamic conv and in the
            FFN (default 0).
        ffn_act_cfg (dict): the FFN's activation (ReLU).
        dynamic_conv_cfg (dict): the ``DynamicConv`` (its ``input_feat_shape`` is the RoI size).
        loss_iou (dict): the IoU loss of the decoded boxes (``GIoULoss``, weight 2).
        init_cfg: must be None (as mmdet): every weight matrix is Xavier-uniform, ``fc_cls``'s
            bias the focal prior 0.01 (sigmoid) or 0, ``fc_reg``'s 0, at construction.
        kwargs: :class:`BBoxHead`'s (``loss_cls``, ``loss_bbox``, ``bbox_coder``,
            ``roi_feat_size`` ...); the regression is always class-agnostic and decoded.
    """

    def __init__(self, num_classes=80, num_ffn_fcs=2, num_heads=8, num_cls_fcs=1,
                 num_reg_fcs=3, feedforward_channels=2048, in_channels=256, dropout=0.0,
                 ffn_act_cfg=dict(type='ReLU', inplace=True),
                 dynamic_conv_cfg=dict(type='DynamicConv', in_channels=256, feat_channels=64,
                                       out_channels=256, input_feat_shape=7,
                                       act_cfg=dict(type='ReLU', inplace=True),
                                       norm_cfg=dict(type='LN')),
                 loss_iou=dict(type='GIoULoss', loss_weight=2.0), init_cfg=None, **kwargs):
        if init_cfg is not None:
            raise ValueError(f'DIIHead takes no init_cfg (its weights have a fixed '
                             f'initialisation, as mmdet), got {init_cfg!r}')
        for name in ('reg_class_agnostic', 'reg_decoded_bbox'):
            if kwargs.pop(name, True) is not True:
                raise ValueError(f'DIIHead only supports {name}=True')
        for name, value in (('num_cls_fcs', num_cls_fcs), ('num_reg_fcs', num_reg_fcs)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
                raise ValueError(f'DIIHead {name} must be a non-negative int, got {value!r}')
        self._dii_args = dict(num_ffn_fcs=num_ffn_fcs, num_heads=num_heads,
                              num_cls_fcs=num_cls_fcs, num_reg_fcs=num_reg_fcs,
                              feedforward_channels=feedforward_channels, dropout=dropout,
                              ffn_act_cfg=ffn_act_cfg, dynamic_conv_cfg=dynamic_conv_cfg)
        super().__init__(num_classes=num_classes, in_channels=in_channels,
                         reg_class_agnostic=True, reg_decoded_bbox=True, **kwargs)
        self.loss_iou = MODELS.build(loss_iou)

    @property
    def use_sigmoid(self):
        return bool(getattr(self.loss_cls, 'use_sigmoid', False))

    def _init_layers(self):
        """The DII layers instead of :class:`BBoxHead`'s (called by its constructor)."""
        a = self._dii_args
        c = self.in_channels
        if c % a['num_heads']:
            raise ValueError(f'DIIHead in_channels ({c}) must be divisible by num_heads '
                             f'({a["num_heads"]})')
        # fc_cls / fc_reg first: mmdet's BBoxHead made them first (its state-dict order)
        self.fc_cls = nn.Linear(c, self.num_classes if self.use_sigmoid
                                else self.num_classes + 1)
        self.fc_reg = nn.Linear(c, 4)
        self.attention = MultiheadAttention(c, a['num_heads'], a['dropout'])
        self.attention_norm = nn.LayerNorm(c)
        self.instance_interactive_conv = MODELS.build(a['dynamic_conv_cfg'])
        self.instance_interactive_conv_dropout = nn.Dropout(a['dropout'])
        self.instance_interactive_conv_norm = nn.LayerNorm(c)
        self.ffn = FFN(c, a['feedforward_channels'], a['num_ffn_fcs'],
                       act_cfg=a['ffn_act_cfg'], ffn_drop=a['dropout'])
        self.ffn_norm = nn.LayerNorm(c)
        self.cls_fcs = nn.ModuleList()
        for _ in range(a['num_cls_fcs']):
            self.cls_fcs.extend([nn.Linear(c, c, bias=False), nn.LayerNorm(c),
                                 nn.ReLU(inplace=True)])
        self.reg_fcs = nn.ModuleList()
        for _ in range(a['num_reg_fcs']):
            self.reg_fcs.extend([nn.Linear(c, c, bias=False), nn.LayerNorm(c),
                                 nn.ReLU(inplace=True)])
        self._init_dii_weights()

    def _default_init_cfg(self):
        return None

    def _init_dii_weights(self):
        """mmdet's ``init_weights``, at construction: Xavier-uniform weight matrices, zero
        ``fc_reg`` bias, ``fc_cls`` bias the prior 0.01 (sigmoid) or 0 (LayerNorms and the
        other biases keep their defaults)."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        nn.init.constant_(self.fc_reg.bias, 0.)
        nn.init.constant_(self.fc_cls.bias,
                          _bias_init_with_prob(0.01) if self.use_sigmoid else 0.)

    @auto_fp16()
    def forward(self, roi_feat, proposal_feat):
        """``roi_feat [B * N, C, s, s]`` and ``proposal_feat [B, N, C]`` ->
        ``(cls_score [B, N, classes], bbox_delta [B, N, 4], obj_feat [B, N, C],
        attn_feats [B, N, C])``."""
        n, num_proposals = proposal_feat.shape[:2]
        proposal_feat = self.attention_norm(self.attention(proposal_feat.permute(1, 0, 2)))
        attn_feats = proposal_feat.permute(1, 0, 2)
        proposal_feat = attn_feats.reshape(-1, self.in_channels)
        proposal_feat_iic = self.instance_interactive_conv(proposal_feat, roi_feat)
        proposal_feat = proposal_feat + self.instance_interactive_conv_dropout(proposal_feat_iic)
        obj_feat = self.instance_interactive_conv_norm(proposal_feat)
        obj_feat = self.ffn_norm(self.ffn(obj_feat))
        cls_feat, reg_feat = obj_feat, obj_feat
        for layer in self.cls_fcs:
            cls_feat = layer(cls_feat)
        for layer in self.reg_fcs:
            reg_feat = layer(reg_feat)
        cls_score = self.fc_cls(cls_feat).view(n, num_proposals, -1)
        bbox_delta = self.fc_reg(reg_feat).view(n, num_proposals, 4)
        return cls_score, bbox_delta, obj_feat.view(n, num_proposals, self.in_channels), \
            attn_feats

    @force_fp32(apply_to=('cls_score', 'bbox_pred'))
    def loss(self, cls_score, bbox_pred, labels, label_weights, bbox_targets, bbox_weights,
             imgs_whwh=None, reduction_override=None, **kwargs):
        """``loss_cls``, ``pos_acc``, ``loss_bbox``, ``loss_iou`` of the batch's proposals
        (``[B * N, ...]``), averaged over the positives of the whole (distributed) batch;
        ``bbox_pred`` are decoded ``x1, y1, x2, y2`` boxes, ``imgs_whwh [B, N, 4]``."""
        losses = dict()
        pos_inds = (labels >= 0) & (labels < self.num_classes)
        avg_factor = reduce_mean(pos_inds.sum().float())
        if cls_score is not None and cls_score.numel() > 0:
            losses['loss_cls'] = self.loss_cls(cls_score, labels, label_weights,
                                               avg_factor=avg_factor,
                                               reduction_override=reduction_override)
            losses['pos_acc'] = accuracy(cls_score[pos_inds], labels[pos_inds])
        if bbox_pred is not None:
            if pos_inds.any():
                if imgs_whwh is None:
                    raise ValueError('DIIHead.loss needs imgs_whwh to normalise the boxes')
                pos_bbox_pred = bbox_pred.reshape(bbox_pred.size(0), 4)[pos_inds]
                whwh = imgs_whwh.reshape(bbox_pred.size(0), 4)[pos_inds]
                losses['loss_bbox'] = self.loss_bbox(pos_bbox_pred / whwh,
                                                     bbox_targets[pos_inds] / whwh,
                                                     bbox_weights[pos_inds],
                                                     avg_factor=avg_factor)
                losses['loss_iou'] = self.loss_iou(pos_bbox_pred, bbox_targets[pos_inds],
                                                   bbox_weights[pos_inds],
                                                   avg_factor=avg_factor)
            else:
                losses['loss_bbox'] = bbox_pred.sum() * 0
                losses['loss_iou'] = bbox_pred.sum() * 0
        return losses

    def _get_target_single(self, pos_inds, neg_inds, pos_bboxes, neg_bboxes, pos_gt_bboxes,
                           pos_gt_labels, cfg):
        """As :meth:`BBoxHead._get_target_single`, but every proposal keeps its place
        (``pos_inds`` / ``neg_inds``) instead of positives first: the proposals are not
        sampled, and the stages keep their order."""
        num_samples = pos_bboxes.size(0) + neg_bboxes.size(0)
        labels = pos_bboxes.new_full((num_samples, ), self.num_classes, dtype=torch.long)
        label_weights = pos_bboxes.new_zeros(num_samples)
        bbox_targets = pos_bboxes.new_zeros(num_samples, 4)
        bbox_weights = pos_bboxes.new_zeros(num_samples, 4)
        if pos_bboxes.size(0) > 0:
            labels[pos_inds] = pos_gt_labels
            pos_weight = cfg_get(cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
            bbox_targets[pos_inds, :] = pos_gt_bboxes
            bbox_weights[pos_inds, :] = 1
        if neg_bboxes.size(0) > 0:
            label_weights[neg_inds] = 1.0
        return labels, label_weights, bbox_targets, bbox_weights

    def get_targets(self, sampling_results, gt_bboxes, gt_labels, rcnn_train_cfg, concat=True):
        """``(labels, label_weights, bbox_targets, bbox_weights)`` per proposal, in the
        proposals' order, concatenated over images unless ``concat=False``; the box targets
        are the matched ground-truth boxes themselves (decoded regression)."""
        per_image = [self._get_target_single(res.pos_inds, res.neg_inds, res.pos_bboxes,
                                             res.neg_bboxes, res.pos_gt_bboxes,
                                             res.pos_gt_labels, rcnn_train_cfg)
                     for res in sampling_results]
        targets = tuple(list(t) for t in zip(*per_image)) if per_image else ([], [], [], [])
        if concat:
            targets = tuple(torch.cat(t, 0) for t in targets)
        return targets
