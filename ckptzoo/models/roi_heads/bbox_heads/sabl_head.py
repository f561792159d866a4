"""mmdet 2.x ``SABLHead``: Side-Aware Boundary Localization for the RoI head
(https://arxiv.org/abs/1912.04260).

The classification branch is fcs on the flattened RoI feature. The regression branch refines
the RoI feature with ``reg_pre_num`` 3x3 convs, pools it along y (for the x sides) and along x
(for the y sides) with a learned attention, refines each 1-D feature with ``reg_post_num``
1-D convs, upsamples it to ``num_buckets`` positions and predicts per position a bucket score
and an offset; :meth:`SABLHead.side_aware_split` folds the positions into the two sides
(inwards from each side), the order of :class:`~ckptzoo.core.bbox.coder.BucketingBBoxCoder`.
``bbox_pred`` is the pair ``(bucket_cls_preds, bucket_offset_preds)``, each
``[K, 4 * ceil(num_buckets / 2)]``. At test the box score is multiplied by the bucket
localisation confidence (``score_factors`` of ``multiclass_nms``).

State-dict keys are mmdet's (``cls_fcs``, ``upsample_x``, ``reg_pre_convs.0.conv``,
``reg_post_conv_xs``, ``reg_conv_att_x``, ``fc_cls``, ``fc_reg_cls``, ``fc_reg_offset``, ...).
The head runs inside its RoI head's ``bbox`` checkpoint unit.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ....core.post_processing import multiclass_nms
from ....registry import MODELS, TASK_UTILS
from ....runner.fp16 import force_fp32
from ....utils.cfg_get import cfg_get
from ...losses import accuracy
from ...utils import ConvModule, apply_init_cfg
from ...utils.pretrained import load_pretrained

__all__ = ['SABLHead']


@MODELS.register_module()
class SABLHead(nn.Module):
    """Args (mmdet 2.x's): ``num_classes``, ``cls_in_channels``, ``reg_in_channels``,
    ``roi_feat_size``, ``reg_feat_up_ratio`` (``roi_feat_size * reg_feat_up_ratio`` must be
    the coder's ``num_buckets``), ``reg_pre_kernel``, ``reg_post_kernel``, ``reg_pre_num``,
    ``reg_post_num``, ``cls_out_channels``, ``reg_offset_out_channels``,
    ``reg_cls_out_channels``, ``num_cls_fcs``, ``num_reg_fcs``, ``reg_class_agnostic`` (must
    be True), ``norm_cfg``, ``bbox_coder``, ``loss_cls``, ``loss_bbox_cls`` (bucket
    classification), ``loss_bbox_reg`` (bucket offsets), ``init_cfg`` (default mmdet's:
    Xavier-uniform on the Linears, Normal on the attention convs and predictors, Kaiming on
    the upsampling)."""

    def __init__(self, num_classes, cls_in_channels=256, reg_in_channels=256, roi_feat_size=7,
                 reg_feat_up_ratio=2, reg_pre_kernel=3, reg_post_kernel=3, reg_pre_num=2,
                 reg_post_num=1, cls_out_channels=1024, reg_offset_out_channels=256,
                 reg_cls_out_channels=256, num_cls_fcs=1, num_reg_fcs=0,
                 reg_class_agnostic=True, norm_cfg=None,
                 bbox_coder=dict(type='BucketingBBoxCoder', num_buckets=14, scale_factor=1.7),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                 loss_bbox_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_bbox_reg=dict(type='SmoothL1Loss', beta=0.1, loss_weight=1.0),
                 init_cfg=None):
        super().__init__()
        self.cls_in_channels = cls_in_channels
        self.reg_in_channels = reg_in_channels
        self.roi_feat_size = roi_feat_size
        self.reg_feat_up_ratio = int(reg_feat_up_ratio)
        self.num_buckets = bbox_coder['num_buckets']
        if self.reg_feat_up_ratio // 2 < 1:
            raise ValueError(f'reg_feat_up_ratio must be at least 2, got {reg_feat_up_ratio}')
        self.up_reg_feat_size = roi_feat_size * self.reg_feat_up_ratio
        if self.up_reg_feat_size != self.num_buckets:
            raise ValueError(f'roi_feat_size * reg_feat_up_ratio ({self.up_reg_feat_size}) '
                             f'must equal bbox_coder.num_buckets ({self.num_buckets})')
        if not reg_class_agnostic:
            raise ValueError('SABLHead regresses class-agnostically (reg_class_agnostic=True)')
        self.reg_pre_kernel = reg_pre_kernel
        self.reg_post_kernel = reg_post_kernel
        self.reg_pre_num = reg_pre_num
        self.reg_post_num = reg_post_num
        self.num_classes = num_classes
        self.cls_out_channels = cls_out_channels
        self.reg_offset_out_channels = reg_offset_out_channels
        self.reg_cls_out_channels = reg_cls_out_channels
        self.num_cls_fcs = num_cls_fcs
        self.num_reg_fcs = num_reg_fcs
        self.reg_class_agnostic = reg_class_agnostic
        self.norm_cfg = norm_cfg
        self.fp16_enabled = False
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox_cls = MODELS.build(loss_bbox_cls)
        self.loss_bbox_reg = MODELS.build(loss_bbox_reg)
        self._init_layers()
        self.init_cfg = self._default_init_cfg() if init_cfg is None else init_cfg
        apply_init_cfg(self, self.init_cfg)

    def _init_layers(self):
        """Modules in mmdet's order (the state dict's)."""
        c = self.reg_in_channels
        self.cls_fcs = self._add_fc_branch(self.num_cls_fcs, self.cls_in_channels,
                                           self.roi_feat_size, self.cls_out_channels)
        self.side_num = int(math.ceil(self.num_buckets / 2))
        if self.reg_feat_up_ratio > 1:
            self.upsample_x = nn.ConvTranspose1d(c, c, self.reg_feat_up_ratio,
                                                 stride=self.reg_feat_up_ratio)
            self.upsample_y = nn.ConvTranspose1d(c, c, self.reg_feat_up_ratio,
                                                 stride=self.reg_feat_up_ratio)
        k, post = self.reg_pre_kernel, self.reg_post_kernel
        conv = dict(norm_cfg=self.norm_cfg, act_cfg=dict(type='ReLU'))
        self.reg_pre_convs = nn.ModuleList(
            ConvModule(c, c, kernel_size=k, padding=k // 2, **conv)
            for _ in range(self.reg_pre_num))
        self.reg_post_conv_xs = nn.ModuleList(
            ConvModule(c, c, kernel_size=(1, post), padding=(0, post // 2), **conv)
            for _ in range(self.reg_post_num))
        self.reg_post_conv_ys = nn.ModuleList(
            ConvModule(c, c, kernel_size=(post, 1), padding=(post // 2, 0), **conv)
            for _ in range(self.reg_post_num))
        self.reg_conv_att_x = nn.Conv2d(c, 1, 1)
        self.reg_conv_att_y = nn.Conv2d(c, 1, 1)
        self.fc_cls = nn.Linear(self.cls_out_channels, self.num_classes + 1)
        self.relu = nn.ReLU(inplace=True)
        self.reg_cls_fcs = self._add_fc_branch(self.num_reg_fcs, c, 1,
                                               self.reg_cls_out_channels)
        self.reg_offset_fcs = self._add_fc_branch(self.num_reg_fcs, c, 1,
                                                  self.reg_offset_out_channels)
        self.fc_reg_cls = nn.Linear(self.reg_cls_out_channels, 1)
        self.fc_reg_offset = nn.Linear(self.reg_offset_out_channels, 1)

    def _default_init_cfg(self):
        init = [dict(type='Xavier', layer='Linear', distribution='uniform', override=[
            dict(type='Normal', name='reg_conv_att_x', std=0.01),
            dict(type='Normal', name='reg_conv_att_y', std=0.01),
            dict(type='Normal', name='fc_reg_cls', std=0.01),
            dict(type='Normal', name='fc_cls', std=0.01),
            dict(type='Normal', name='fc_reg_offset', std=0.001)])]
        if self.reg_feat_up_ratio > 1:
            init.append(dict(type='Kaiming', distribution='normal',
                             override=[dict(name='upsample_x'), dict(name='upsample_y')]))
        return init

    @staticmethod
    def _add_fc_branch(num_branch_fcs, in_channels, roi_feat_size, fc_out_channels):
        in_channels = in_channels * roi_feat_size * roi_feat_size
        return nn.ModuleList(nn.Linear(in_channels if i == 0 else fc_out_channels,
                                       fc_out_channels) for i in range(num_branch_fcs))

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    # The custom-classifier protocol of the RoI heads (mmdet's SABL declares the flags).
    @property
    def custom_cls_channels(self):
        return getattr(self.loss_cls, 'custom_cls_channels', False)

    @property
    def custom_activation(self):
        return getattr(self.loss_cls, 'custom_activation', False)

    @property
    def custom_accuracy(self):
        return getattr(self.loss_cls, 'custom_accuracy', False)

    @property
    def cls_channels(self):
        return self.num_classes + 1

    def scores_of(self, cls_score):
        """Per-RoI class probabilities (softmax, as mmdet's SABL; None for None)."""
        return None if cls_score is None else F.softmax(cls_score, dim=-1)

    # ------------------------------------------------------------------------------- forward
    def cls_forward(self, cls_x):
        cls_x = cls_x.view(cls_x.size(0), -1)
        for fc in self.cls_fcs:
            cls_x = self.relu(fc(cls_x))
        return self.fc_cls(cls_x)

    def attention_pool(self, reg_x):
        """``(fx [K, C, w], fy [K, C, h])``: the feature averaged over y (resp. x) with
        sigmoid attention weights normalised along that axis."""
        att_x = self.reg_conv_att_x(reg_x).sigmoid()
        att_y = self.reg_conv_att_y(reg_x).sigmoid()
        att_x = att_x / att_x.sum(dim=2).unsqueeze(2)
        att_y = att_y / att_y.sum(dim=3).unsqueeze(3)
        return (reg_x * att_x).sum(dim=2), (reg_x * att_y).sum(dim=3)

    def side_aware_feature_extractor(self, reg_x):
        """``(fx, fy)``, each ``[K, num_buckets, C]``: pre convs, attention pooling, 1-D post
        convs, upsampling."""
        for conv in self.reg_pre_convs:
            reg_x = conv(reg_x)
        reg_fx, reg_fy = self.attention_pool(reg_x)
        if self.reg_post_num > 0:
            reg_fx, reg_fy = reg_fx.unsqueeze(2), reg_fy.unsqueeze(3)
            for conv_x, conv_y in zip(self.reg_post_conv_xs, self.reg_post_conv_ys):
                reg_fx, reg_fy = conv_x(reg_fx), conv_y(reg_fy)
            reg_fx, reg_fy = reg_fx.squeeze(2), reg_fy.squeeze(3)
        if self.reg_feat_up_ratio > 1:
            reg_fx = self.relu(self.upsample_x(reg_fx))
            reg_fy = self.relu(self.upsample_y(reg_fy))
        return reg_fx.transpose(1, 2).contiguous(), reg_fy.transpose(1, 2).contiguous()

    def reg_pred(self, x, offset_fcs, cls_fcs):
        """``(offset_pred, cls_pred)``, each ``[K, num_buckets]``, from ``x [K, L, C]``."""
        x_offset = x.view(-1, self.reg_in_channels)
        x_cls = x.view(-1, self.reg_in_channels)
        for fc in offset_fcs:
            x_offset = self.relu(fc(x_offset))
        for fc in cls_fcs:
            x_cls = self.relu(fc(x_cls))
        return (self.fc_reg_offset(x_offset).view(x.size(0), -1),
                self.fc_reg_cls(x_cls).view(x.size(0), -1))

    def side_aware_split(self, feat):
        """``[K, num_buckets]`` -> ``[K, 2 * side_num]``: the first half (the low side, from
        the edge inwards), then the second half reversed (the high side, from the edge)."""
        l_end = int(math.ceil(self.up_reg_feat_size / 2))
        r_start = int(math.floor(self.up_reg_feat_size / 2))
        return torch.cat([feat[:, :l_end].contiguous(),
                          feat[:, r_start:].flip(dims=(1, )).contiguous()], dim=-1)

    def bbox_pred_split(self, bbox_pred, num_proposals_per_img):
        """The batch's ``(cls, offset)`` pair as one pair per image."""
        cls_preds, offset_preds = bbox_pred
        return tuple(zip(cls_preds.split(num_proposals_per_img, 0),
                         offset_preds.split(num_proposals_per_img, 0)))

    def reg_forward(self, reg_x):
        reg_fx, reg_fy = self.side_aware_feature_extractor(reg_x)
        offset_x, cls_x = self.reg_pred(reg_fx, self.reg_offset_fcs, self.reg_cls_fcs)
        offset_y, cls_y = self.reg_pred(reg_fy, self.reg_offset_fcs, self.reg_cls_fcs)
        split = self.side_aware_split
        edge_offset_preds = torch.cat([split(offset_x), split(offset_y)], dim=-1)
        edge_cls_preds = torch.cat([split(cls_x), split(cls_y)], dim=-1)
        return edge_cls_preds, edge_offset_preds

    def forward(self, x):
        """``x [K, C, s, s]`` -> ``(cls_score [K, num_classes + 1], (bucket_cls_preds,
        bucket_offset_preds))``."""
        bbox_pred = self.reg_forward(x)
        return self.cls_forward(x), bbox_pred

    # ------------------------------------------------------------------------------- targets
    def get_targets(self, sampling_results, gt_bboxes, gt_labels, rcnn_train_cfg,
                    concat=True):
        """``(labels, label_weights, (bucket_cls_targets, bucket_offset_targets),
        (bucket_cls_weights, bucket_offset_weights))`` of every image's sampled RoIs
        (positives first). ``gt_bboxes``, ``gt_labels`` are unused, as in mmdet."""
        (labels, label_weights, cls_t, cls_w, off_t, off_w) = self.bucket_target(
            [r.pos_bboxes for r in sampling_results], [r.neg_bboxes for r in sampling_results],
            [r.pos_gt_bboxes for r in sampling_results],
            [r.pos_gt_labels for r in sampling_results], rcnn_train_cfg, concat=concat)
        return labels, label_weights, (cls_t, off_t), (cls_w, off_w)

    def bucket_target(self, pos_proposals_list, neg_proposals_list, pos_gt_bboxes_list,
                      pos_gt_labels_list, rcnn_train_cfg, concat=True):
        per_image = [self._bucket_target_single(*args, cfg=rcnn_train_cfg) for args in zip(
            pos_proposals_list, neg_proposals_list, pos_gt_bboxes_list, pos_gt_labels_list)]
        targets = tuple(list(t) for t in zip(*per_image)) if per_image else ([], ) * 6
        return tuple(torch.cat(t, 0) for t in targets) if concat else targets

    def _bucket_target_single(self, pos_proposals, neg_proposals, pos_gt_bboxes,
                              pos_gt_labels, cfg):
        """One image: labels (background for negatives), label weights 1 (no ``pos_weight``,
        as mmdet's SABL), and the coder's bucket targets and weights on the positives."""
        num_pos, num_neg = pos_proposals.size(0), neg_proposals.size(0)
        num_samples = num_pos + num_neg
        labels = pos_gt_bboxes.new_full((num_samples, ), self.num_classes, dtype=torch.long)
        label_weights = pos_proposals.new_zeros(num_samples)
        width = 4 * self.side_num
        cls_t, cls_w, off_t, off_w = (pos_proposals.new_zeros(num_samples, width)
                                      for _ in range(4))
        if num_pos > 0:
            labels[:num_pos] = pos_gt_labels
            label_weights[:num_pos] = 1.0
            pos_off_t, pos_off_w, pos_cls_t, pos_cls_w = self.bbox_coder.encode(
                pos_proposals, pos_gt_bboxes)
            cls_t[:num_pos], cls_w[:num_pos] = pos_cls_t, pos_cls_w
            off_t[:num_pos], off_w[:num_pos] = pos_off_t, pos_off_w
        if num_neg > 0:
            label_weights[-num_neg:] = 1.0
        return labels, label_weights, cls_t, cls_w, off_t, off_w

    # ---------------------------------------------------------------------------------- loss
    def loss(self, cls_score, bbox_pred, rois, labels, label_weights, bbox_targets,
             bbox_weights, reduction_override=None):
        """``loss_cls`` and ``acc`` as :class:`BBoxHead`; ``loss_bbox_cls`` over every
        (RoI, side) averaged over them, ``loss_bbox_reg`` averaged over the RoIs."""
        losses = dict()
        if cls_score is not None:
            avg_factor = max(torch.sum(label_weights > 0).float().item(), 1.)
            losses['loss_cls'] = self.loss_cls(cls_score, labels, label_weights,
                                               avg_factor=avg_factor,
                                               reduction_override=reduction_override)
            losses['acc'] = accuracy(cls_score, labels)
        if bbox_pred is not None:
            cls_preds, offset_preds = bbox_pred
            cls_targets, offset_targets = bbox_targets
            cls_weights, offset_weights = bbox_weights
            cls_targets = cls_targets.view(-1, self.side_num)
            losses['loss_bbox_cls'] = self.loss_bbox_cls(
                cls_preds.view(-1, self.side_num), cls_targets,
                cls_weights.view(-1, self.side_num), avg_factor=cls_targets.size(0),
                reduction_override=reduction_override)
            losses['loss_bbox_reg'] = self.loss_bbox_reg(
                offset_preds, offset_targets, offset_weights,
                avg_factor=offset_targets.size(0), reduction_override=reduction_override)
        return losses

    # ----------------------------------------------------------------------------- inference
    @force_fp32(apply_to=('cls_score', 'bbox_pred'))
    def get_bboxes(self, rois, cls_score, bbox_pred, img_shape, scale_factor, rescale=False,
                   cfg=None):
        """One image's detections: softmax scores (a list of them is averaged), boxes decoded
        from the buckets, divided by ``scale_factor`` when ``rescale``, then
        :func:`multiclass_nms` with the localisation confidences as ``score_factors``; with
        ``cfg=None`` the boxes ``[K, 4]`` and scores before NMS."""
        if isinstance(cls_score, list):
            cls_score = sum(cls_score) / float(len(cls_score))
        scores = self.scores_of(cls_score)
        if bbox_pred is not None:
            bboxes, confidences = self.bbox_coder.decode(rois[:, 1:], bbox_pred, img_shape)
        else:
            bboxes, confidences = rois[:, 1:].clone(), None
            if img_shape is not None:
                bboxes[:, [0, 2]] = bboxes[:, [0, 2]].clamp(min=0, max=img_shape[1] - 1)
                bboxes[:, [1, 3]] = bboxes[:, [1, 3]].clamp(min=0, max=img_shape[0] - 1)
        if rescale and bboxes.size(0) > 0:
            bboxes = bboxes / bboxes.new_tensor(scale_factor)
        if cfg is None:
            return bboxes, scores
        return multiclass_nms(bboxes, scores, cfg_get(cfg, 'score_thr'), cfg_get(cfg, 'nms'),
                              cfg_get(cfg, 'max_per_img'), score_factors=confidences)

    # ------------------------------------------------------------------------------ cascade
    @force_fp32(apply_to=('bbox_preds', ))
    def refine_bboxes(self, rois, labels, bbox_preds, pos_is_gts, img_metas):
        """The next stage's proposals per image (``bbox_preds`` the batch's pair), less the
        ground truths the sampler added (``pos_is_gts``)."""
        if rois[:, 0].long().unique(sorted=True).numel() != len(img_metas):
            raise ValueError(f'rois must name each of the {len(img_metas)} images')
        cls_preds, offset_preds = bbox_preds
        bboxes_list = []
        for i, img_meta in enumerate(img_metas):
            inds = torch.nonzero(rois[:, 0] == i, as_tuple=False).squeeze(dim=1)
            bboxes = self.regress_by_class(rois[inds, 1:], labels[inds],
                                           [cls_preds[inds], offset_preds[inds]], img_meta)
            keep = pos_is_gts[i].new_ones(inds.numel())
            keep[:len(pos_is_gts[i])] = 1 - pos_is_gts[i]
            bboxes_list.append(bboxes[keep.bool()])
        return bboxes_list

    @force_fp32(apply_to=('bbox_pred', ))
    def regress_by_class(self, rois, label, bbox_pred, img_meta):
        """``rois`` (``[n, 4]``, or ``[n, 5]`` whose index is kept) decoded from the bucket
        pair ``bbox_pred`` (class-agnostic: ``label`` unused) and clipped to the image."""
        if rois.dim() != 2 or rois.size(1) not in (4, 5):
            raise ValueError(f'regress_by_class takes rois of [n, 4] or [n, 5], got '
                             f'{tuple(rois.shape)}')
        if rois.size(1) == 4:
            return self.bbox_coder.decode(rois, bbox_pred, img_meta['img_shape'])[0]
        bboxes, _ = self.bbox_coder.decode(rois[:, 1:], bbox_pred, img_meta['img_shape'])
        return torch.cat((rois[:, [0]], bboxes), dim=1)
