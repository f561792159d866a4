"""mmdet 2.x ``TOODHead`` (Task-aligned One-stage Object Detection, Feng et al. 2021): the
T-head. A shared tower (``inter_convs``, the first ``num_dcn`` of them DCNv2) feeds two
:class:`TaskDecomposition` branches; the class score is the geometric mean of the class
logits' and a spatial probability map's sigmoids; boxes (``anchor_free``: exp distances from
the anchor centre, ``anchor_based``: deltas of the anchor, both in strides) are resampled at
learnt offsets. Training starts with ATSS assignment and a focal loss for ``initial_epoch``
epochs (the epoch comes from ``SetEpochInfoHook``), then switches to the task-aligned
assignment and the quality focal loss weighted by the normalised alignment metric.

State-dict keys equal mmdet's. Checkpoint units: ``level{i}``, one per pyramid level."""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import deform_conv2d

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.bbox import distance2bbox
from ...core.utils import reduce_mean, unmap
from ...registry import MODELS, TASK_UTILS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, Scale, bias_init_with_prob, normal_init, sigmoid_geometric_mean
from .atss_head import ATSSHead, _float_pred

__all__ = ['TOODHead', 'TaskDecomposition']


class TaskDecomposition(nn.Module):
    """The concatenated tower features weighted per layer by an attention computed from their
    global average, reduced to ``feat_channels`` by one 1x1 conv (applied as a per-image
    weight product), then norm and ReLU."""

    def __init__(self, feat_channels, stacked_convs, la_down_rate=8, conv_cfg=None,
                 norm_cfg=None):
        super().__init__()
        self.feat_channels = feat_channels
        self.stacked_convs = stacked_convs
        self.in_channels = feat_channels * stacked_convs
        self.norm_cfg = norm_cfg
        self.layer_attention = nn.Sequential(
            nn.Conv2d(self.in_channels, self.in_channels // la_down_rate, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(self.in_channels // la_down_rate, self.stacked_convs, 1, padding=0),
            nn.Sigmoid())
        self.reduction_conv = ConvModule(self.in_channels, self.feat_channels, 1, stride=1,
                                         padding=0, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                                         bias=norm_cfg is None)

    def init_weights(self):
        for m in self.layer_attention.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, std=0.001)
        normal_init(self.reduction_conv.conv, std=0.01)

    def forward(self, feat, avg_feat=None):
        b, _, h, w = feat.shape
        if avg_feat is None:
            avg_feat = F.adaptive_avg_pool2d(feat, (1, 1))
        weight = self.layer_attention(avg_feat)
        conv_weight = weight.reshape(b, 1, self.stacked_convs, 1) * \
            self.reduction_conv.conv.weight.reshape(1, self.feat_channels, self.stacked_convs,
                                                    self.feat_channels)
        conv_weight = conv_weight.reshape(b, self.feat_channels, self.in_channels)
        feat = torch.bmm(conv_weight, feat.reshape(b, self.in_channels, h * w))
        feat = feat.reshape(b, self.feat_channels, h, w)
        if self.norm_cfg is not None:
            feat = self.reduction_conv.norm(feat)
        return self.reduction_conv.activate(feat)


@MODELS.register_module()
class TOODHead(ATSSHead):
    """TOOD head, mmdet 2.x arguments.

    Args:
        num_classes (int), in_channels (int): as :class:`ATSSHead`.
        num_dcn (int): the first ``num_dcn`` tower convs are DCNv2 (4 deform groups).
        anchor_type (str): ``'anchor_free'`` or ``'anchor_based'``.
        initial_loss_cls (dict): the class loss of the first ``initial_epoch`` epochs
            (default: focal loss on probabilities).
        **kwargs: :class:`ATSSHead` arguments (stacked_convs, feat_channels, norm_cfg,
            anchor_generator, bbox_coder, loss_cls, loss_bbox, train_cfg, test_cfg, with_cp,
            ...). ``train_cfg`` needs ``initial_epoch``, ``initial_assigner``, ``assigner``,
            ``alpha`` and ``beta``.

    The weights are initialised as mmdet's ``TOODHead.init_weights`` does, whatever
    ``init_cfg`` says (mmdet ignored it too); a ``Pretrained`` init_cfg loads in
    ``init_weights``. ``loss_centerness`` and ``pred_kernel_size`` are accepted and unused,
    as in mmdet.
    """

    TRAIN_CFG_KEYS = ATSSHead.TRAIN_CFG_KEYS + ('initial_epoch', 'initial_assigner', 'alpha',
                                                'beta')
    ANCHOR_TYPES = ('anchor_free', 'anchor_based')

    def __init__(self, num_classes, in_channels, num_dcn=0, anchor_type='anchor_free',
                 initial_loss_cls=dict(type='FocalLoss', use_sigmoid=True, activated=True,
                                       gamma=2.0, alpha=0.25, loss_weight=1.0),
                 **kwargs):
        if anchor_type not in self.ANCHOR_TYPES:
            raise ValueError(f'TOODHead anchor_type must be one of {self.ANCHOR_TYPES}, '
                             f'got {anchor_type!r}')
        if isinstance(num_dcn, bool) or not isinstance(num_dcn, int) or num_dcn < 0:
            raise ValueError(f'TOODHead num_dcn must be a non-negative int, got {num_dcn!r}')
        self.num_dcn = num_dcn
        self.anchor_type = anchor_type
        self.epoch = 0  # set by SetEpochInfoHook through TOOD.set_epoch
        init_cfg = kwargs.pop('init_cfg', None)
        super().__init__(num_classes, in_channels, init_cfg=None, **kwargs)
        self.init_cfg = init_cfg
        self._init_tood_weights()
        if self.train_cfg:
            for key in ('initial_epoch', 'initial_assigner', 'alpha', 'beta'):
                if cfg_get(self.train_cfg, key) is None:
                    raise ValueError(f'TOODHead train_cfg needs {key!r} (initial_epoch, '
                                     f'initial_assigner, assigner, alpha, beta)')
            self.initial_epoch = cfg_get(self.train_cfg, 'initial_epoch')
            self.initial_assigner = TASK_UTILS.build(cfg_get(self.train_cfg,
                                                             'initial_assigner'))
            self.initial_loss_cls = MODELS.build(initial_loss_cls)
            self.alignment_assigner = self.assigner
            self.assigner = self.initial_assigner
            self.alpha = cfg_get(self.train_cfg, 'alpha')
            self.beta = cfg_get(self.train_cfg, 'beta')

    def _init_layers(self):
        if self.stacked_convs < 1:
            raise ValueError(f'TOODHead stacked_convs must be a positive int, got '
                             f'{self.stacked_convs!r}')
        self.relu = nn.ReLU(inplace=True)
        self.inter_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            conv_cfg = dict(type='DCNv2', deform_groups=4) if i < self.num_dcn \
                else self.conv_cfg
            chn = self.in_channels if i == 0 else self.feat_channels
            self.inter_convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                               conv_cfg=conv_cfg, norm_cfg=self.norm_cfg))
        self.cls_decomp = TaskDecomposition(self.feat_channels, self.stacked_convs,
                                            self.stacked_convs * 8, self.conv_cfg,
                                            self.norm_cfg)
        self.reg_decomp = TaskDecomposition(self.feat_channels, self.stacked_convs,
                                            self.stacked_convs * 8, self.conv_cfg,
                                            self.norm_cfg)
        self.tood_cls = nn.Conv2d(self.feat_channels,
                                  self.num_base_priors * self.cls_out_channels, 3, padding=1)
        self.tood_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 3, padding=1)
        tower = self.feat_channels * self.stacked_convs
        self.cls_prob_module = nn.Sequential(
            nn.Conv2d(tower, self.feat_channels // 4, 1), nn.ReLU(inplace=True),
            nn.Conv2d(self.feat_channels // 4, 1, 3, padding=1))
        self.reg_offset_module = nn.Sequential(
            nn.Conv2d(tower, self.feat_channels // 4, 1), nn.ReLU(inplace=True),
            nn.Conv2d(self.feat_channels // 4, 4 * 2, 3, padding=1))
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.prior_generator.strides])

    def _init_tood_weights(self):
        """mmdet's ``TOODHead.init_weights``."""
        bias_cls = bias_init_with_prob(0.01)
        for m in self.inter_convs:
            normal_init(m.conv, std=0.01)
        for m in self.cls_prob_module:
            if isinstance(m, nn.Conv2d):
                normal_init(m, std=0.01)
        for m in self.reg_offset_module:
            if isinstance(m, nn.Conv2d):
                normal_init(m, std=0.001)
        normal_init(self.cls_prob_module[-1], std=0.01, bias=bias_cls)
        self.cls_decomp.init_weights()
        self.reg_decomp.init_weights()
        normal_init(self.tood_cls, std=0.01, bias=bias_cls)
        normal_init(self.tood_reg, std=0.01)

    def set_epoch(self, epoch):
        self.epoch = epoch

    # --------------------------------------------------------------- forward
    def _level_function(self, i):
        return partial(self.forward_single, scale=self.scales[i], level=i)

    def forward_single(self, x, scale, level):
        """One level: ``(cls_score [B, A*C, H, W] probabilities, bbox_pred [B, 4, H, W]
        x1y1x2y2 in units of the level's stride)`` (mmdet's ``forward`` loop body)."""
        b, _, h, w = x.shape
        stride = self.prior_generator.strides[level]
        anchor = self.prior_generator.single_level_grid_priors((h, w), level, device=x.device)
        anchor = torch.cat([anchor for _ in range(b)])
        inter_feats = []
        for conv in self.inter_convs:
            x = conv(x)
            inter_feats.append(x)
        feat = torch.cat(inter_feats, 1)
        avg_feat = F.adaptive_avg_pool2d(feat, (1, 1))
        cls_feat = self.cls_decomp(feat, avg_feat)
        reg_feat = self.reg_decomp(feat, avg_feat)
        cls_score = sigmoid_geometric_mean(self.tood_cls(cls_feat), self.cls_prob_module(feat))
        if self.anchor_type == 'anchor_free':
            reg_dist = _float_pred(scale(self.tood_reg(reg_feat).exp()))
            reg_dist = reg_dist.permute(0, 2, 3, 1).reshape(-1, 4)
            reg_bbox = distance2bbox(self.anchor_center(anchor) / stride[0], reg_dist)
            reg_bbox = reg_bbox.reshape(b, h, w, 4).permute(0, 3, 1, 2)
        else:
            reg_dist = _float_pred(scale(self.tood_reg(reg_feat)))
            reg_dist = reg_dist.permute(0, 2, 3, 1).reshape(-1, 4)
            reg_bbox = self.bbox_coder.decode(anchor, reg_dist).reshape(b, h, w, 4).permute(
                0, 3, 1, 2) / stride[0]
        reg_offset = self.reg_offset_module(feat)
        bbox_pred = self.deform_sampling(reg_bbox.contiguous(), reg_offset.contiguous())
        # a resampled box whose corners crossed falls back to the unsampled one
        invalid = (bbox_pred[:, [0]] > bbox_pred[:, [2]]) | \
            (bbox_pred[:, [1]] > bbox_pred[:, [3]])
        bbox_pred = torch.where(invalid.expand_as(bbox_pred), reg_bbox, bbox_pred)
        return cls_score, bbox_pred

    def deform_sampling(self, feat, offset):
        """Each channel of ``feat`` bilinearly sampled at its own learnt offset (a depthwise
        1x1 deformable conv with unit weights)."""
        c = feat.size(1)
        weight = feat.new_ones(c, 1, 1, 1)
        return deform_conv2d(feat, offset.to(feat.dtype), weight)

    def anchor_center(self, anchors):
        return torch.stack([(anchors[:, 2] + anchors[:, 0]) / 2,
                            (anchors[:, 3] + anchors[:, 1]) / 2], dim=-1)

    # ------------------------------------------------------------------ loss
    def loss_single(self, anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets,
                    alignment_metrics, stride):
        """One level: ``(loss_cls, loss_bbox (both not yet normalised), sum of the alignment
        targets, sum of the box weights)``."""
        if stride[0] != stride[1]:
            raise ValueError(f'{type(self).__name__} needs square strides, got {stride}')
        initial = self.epoch < self.initial_epoch
        anchors = anchors.reshape(-1, 4)
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels).contiguous()
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
        bbox_targets = bbox_targets.reshape(-1, 4)
        labels = labels.reshape(-1)
        alignment_metrics = alignment_metrics.reshape(-1)
        label_weights = label_weights.reshape(-1)
        targets = labels if initial else (labels, alignment_metrics)
        loss_func = self.initial_loss_cls if initial else self.loss_cls
        loss_cls = loss_func(cls_score, targets, label_weights, avg_factor=1.0)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        if len(pos_inds) > 0:
            pos_targets = bbox_targets[pos_inds]
            pos_weight = self.centerness_target(anchors[pos_inds], pos_targets) if initial \
                else alignment_metrics[pos_inds]
            loss_bbox = self.loss_bbox(bbox_pred[pos_inds], pos_targets / stride[0],
                                       weight=pos_weight, avg_factor=1.0)
        else:
            loss_bbox = bbox_pred.sum() * 0
            pos_weight = bbox_targets.new_tensor(0.)
        return loss_cls, loss_bbox, alignment_metrics.sum(), pos_weight.sum()

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox)``, each a list over levels: the class loss averaged
        over the sum of the alignment targets (of the distributed batch), the box loss over
        the sum of the box weights."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg, got '
                             f'{self.train_cfg!r}')
        num_imgs = len(img_metas)
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        flat_scores = torch.cat([s.permute(0, 2, 3, 1).reshape(num_imgs, -1,
                                                               self.cls_out_channels)
                                 for s in cls_scores], 1)
        flat_bboxes = torch.cat([b.permute(0, 2, 3, 1).reshape(num_imgs, -1, 4) * stride[0]
                                 for b, stride in zip(bbox_preds,
                                                      self.prior_generator.strides)], 1)
        (anchor_list, labels_list, label_weights_list, bbox_targets_list,
         alignment_metrics_list) = self.get_targets(
            flat_scores, flat_bboxes, anchor_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
            label_channels=label_channels)
        outs = [self.loss_single(*args) for args in zip(
            anchor_list, cls_scores, bbox_preds, labels_list, label_weights_list,
            bbox_targets_list, alignment_metrics_list, self.prior_generator.strides)]
        losses_cls, losses_bbox, cls_avg_factors, bbox_avg_factors = zip(*outs)
        cls_avg_factor = reduce_mean(sum(cls_avg_factors)).clamp_(min=1).item()
        bbox_avg_factor = reduce_mean(sum(bbox_avg_factors)).clamp_(min=1).item()
        return dict(loss_cls=[loss / cls_avg_factor for loss in losses_cls],
                    loss_bbox=[loss / bbox_avg_factor for loss in losses_bbox])

    # ---------------------------------------------------------------- targets
    def get_targets(self, cls_scores, bbox_preds, anchor_list, valid_flag_list, gt_bboxes_list,
                    img_metas, gt_bboxes_ignore_list=None, gt_labels_list=None,
                    label_channels=1, unmap_outputs=True):
        """Per level ``(anchors, labels, label_weights, bbox_targets, norm_alignment_metrics)``:
        before ``initial_epoch`` ATSS's targets (the metric is the box weight, 1 for
        positives), then the task-aligned ones from the flattened predictions
        ``cls_scores [B, N, C]`` and ``bbox_preds [B, N, 4]`` (image pixels)."""
        num_imgs = len(img_metas)
        if not (len(anchor_list) == len(valid_flag_list) == len(gt_bboxes_list) == num_imgs):
            raise ValueError(f'anchors, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(anchor_list)}, {len(valid_flag_list)}, '
                             f'{len(gt_bboxes_list)}')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = []
        for i in range(num_imgs):
            args = (torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]))
            rest = (gt_bboxes_list[i], gt_bboxes_ignore_list[i], gt_labels_list[i],
                    img_metas[i])
            if self.epoch < self.initial_epoch:
                out = super()._get_target_single(*args, num_level_anchors, *rest,
                                                 label_channels=label_channels,
                                                 unmap_outputs=unmap_outputs)
                results.append(out[:4] + (out[4][..., 0], ))
            else:
                results.append(self._get_target_single(
                    cls_scores[i], bbox_preds[i], *args, *rest, label_channels=label_channels,
                    unmap_outputs=unmap_outputs))
        return tuple(images_to_levels(t, num_level_anchors) for t in zip(*results))

    def _get_target_single(self, cls_scores, bbox_preds, flat_anchors, valid_flags, gt_bboxes,
                           gt_bboxes_ignore, gt_labels, img_meta, label_channels=1,
                           unmap_outputs=True):
        """One image, task-aligned: ``(anchors, labels, label_weights, bbox_targets,
        norm_alignment_metrics)``; each gt's positives get their alignment metric scaled so
        that its best equals the best IoU among them."""
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     allowed_border)
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}, allowed_border '
                             f'{allowed_border}); use allowed_border=-1 or smaller anchors')
        anchors = flat_anchors[inside]
        gt_bboxes = gt_bboxes.to(anchors.dtype)
        assign_result = self.alignment_assigner.assign(
            cls_scores[inside, :], bbox_preds[inside, :], anchors, gt_bboxes, gt_bboxes_ignore,
            gt_labels, self.alpha, self.beta)
        assign_ious = assign_result.max_overlaps
        assign_metrics = assign_result.assign_metrics
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)

        num_valid = anchors.shape[0]
        bbox_targets = torch.zeros_like(anchors)
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros(num_valid, dtype=torch.float)
        norm_metrics = anchors.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            bbox_targets[pos_inds, :] = sampling_result.pos_gt_bboxes.to(bbox_targets.dtype)
            if gt_labels is None:
                labels[pos_inds] = 0
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        for gt_ind in torch.unique(sampling_result.pos_assigned_gt_inds):
            inds = pos_inds[sampling_result.pos_assigned_gt_inds == gt_ind]
            metrics = assign_metrics[inds]
            norm_metrics[inds] = (metrics / (metrics.max() + 10e-8)
                                  * assign_ious[inds].max()).to(norm_metrics.dtype)
        if unmap_outputs:
            total = flat_anchors.size(0)
            anchors = unmap(anchors, total, inside)
            labels = unmap(labels, total, inside, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside)
            bbox_targets = unmap(bbox_targets, total, inside)
            norm_metrics = unmap(norm_metrics, total, inside)
        return anchors, labels, label_weights, bbox_targets, norm_metrics

    # ------------------------------------------------------------- inference
    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """mmdet's: the scores are already probabilities and the boxes already decoded (in
        strides): per level the ``nms_pre`` best (prior, class) scores above ``score_thr``,
        boxes times the stride (not clipped to the image, as in mmdet)."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg (nms_pre, score_thr, nms, '
                             'max_per_img) to predict boxes')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels = [], [], []
        for cls_score, bbox_pred, stride in zip(cls_score_list, bbox_pred_list,
                                                self.prior_generator.strides):
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4) * stride[0]
            scores = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            valid = scores > score_thr
            scores = scores[valid]
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores.sort(descending=True)
            if nms_pre is not None and nms_pre > 0:  # mmdet drops one box for nms_pre=-1
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            mlvl_bboxes.append(bbox_pred[keep])
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes,
                                       img_meta['scale_factor'], cfg, rescale, with_nms)
