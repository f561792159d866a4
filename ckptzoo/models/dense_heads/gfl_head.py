"""mmdet 2.x ``GFLHead`` (Generalized Focal Loss, Li et al. 2020): ATSS's towers and
assignment, but one joint class-quality score per class (trained with
:class:`QualityFocalLoss` against the IoU of the predicted box) and each box side predicted as
a distribution over ``reg_max + 1`` bins (its mean, :class:`Integral`, is the distance in
strides; :class:`DistributionFocalLoss` sharpens it).

State-dict keys equal mmdet's (``gfl_cls``, ``gfl_reg``, ``scales.{i}.scale``,
``integral.project``). Checkpoint units: ``level{i}``, one per pyramid level."""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.utils import reduce_mean
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses.iou_loss import aligned_overlaps
from ..utils import ConvModule, Scale
from .anchor_head import AnchorHead
from .atss_head import ATSSTargetsMixin, _float_pred
from .level_units import LevelUnitsMixin

__all__ = ['GFLHead', 'Integral']


class Integral(nn.Module):
    """The expectation of each side's softmax distribution over the bins ``0..reg_max``:
    ``[..., 4 * (reg_max + 1)]`` -> ``[N, 4]`` distances (in strides). ``project`` (the bin
    values) is a buffer, as in mmdet's checkpoints."""

    def __init__(self, reg_max=16):
        super().__init__()
        self.reg_max = reg_max
        self.register_buffer('project', torch.linspace(0, self.reg_max, self.reg_max + 1))

    def forward(self, x):
        x = F.softmax(x.reshape(-1, self.reg_max + 1), dim=1)
        return F.linear(x, self.project.type_as(x)).reshape(-1, 4)


@MODELS.register_module()
class GFLHead(LevelUnitsMixin, ATSSTargetsMixin, AnchorHead):
    """GFL head, mmdet 2.x arguments.

    Args:
        num_classes (int), in_channels (int), feat_channels (int): as :class:`AnchorHead`.
        stacked_convs (int): convs of each tower (default 4).
        conv_cfg, norm_cfg (dict | None): the tower convs (default GN, 32 groups).
        loss_dfl (dict): default ``DistributionFocalLoss(loss_weight=0.25)``.
        bbox_coder (dict): default ``DistancePointBBoxCoder``.
        reg_max (int): the last bin (default 16).
        init_cfg (dict): Normal(std=0.01) convs, ``gfl_cls`` bias at prior 0.01.
        with_cp (bool): ``'full'`` checkpointing of every level (ours; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
        **kwargs: :class:`AnchorHead` arguments (anchor_generator with one anchor per
            position, loss_cls (QualityFocalLoss), loss_bbox, train_cfg, test_cfg).
    """

    def __init__(self, num_classes, in_channels, stacked_convs=4, conv_cfg=None,
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                 loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25),
                 bbox_coder=dict(type='DistancePointBBoxCoder'), reg_max=16,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='gfl_cls', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        if isinstance(stacked_convs, bool) or not isinstance(stacked_convs, int) \
                or stacked_convs < 0:
            raise ValueError(f'{type(self).__name__} stacked_convs must be a non-negative '
                             f'int, got {stacked_convs!r}')
        if isinstance(reg_max, bool) or not isinstance(reg_max, int) or reg_max < 1:
            raise ValueError(f'{type(self).__name__} reg_max must be a positive int, '
                             f'got {reg_max!r}')
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.reg_max = reg_max
        #: numbers per prior in ``bbox_pred``: one distribution per side
        self.bbox_pred_dims = 4 * (reg_max + 1)
        super().__init__(num_classes, in_channels, bbox_coder=bbox_coder, init_cfg=init_cfg,
                         **kwargs)
        self.integral = Integral(self.reg_max)
        self.loss_dfl = MODELS.build(loss_dfl)
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        if self.num_anchors != 1:
            raise ValueError(f'{type(self).__name__} is anchor-free: the anchor generator must '
                             f'give one anchor per position (one ratio, one scale), got '
                             f'{self.num_anchors}')
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        self.gfl_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)
        self.gfl_reg = nn.Conv2d(self.feat_channels, 4 * (self.reg_max + 1), 3, padding=1)
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.prior_generator.strides])

    def _level_function(self, i):
        return partial(self.forward_single, scale=self.scales[i])

    def forward_single(self, x, scale):
        """``(cls_score [B, C, H, W], bbox_pred [B, 4 * (reg_max + 1), H, W])``."""
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        return self.gfl_cls(cls_feat), _float_pred(scale(self.gfl_reg(reg_feat)))

    def anchor_center(self, anchors):
        """Centres ``[..., 2]`` of ``anchors [..., 4]``."""
        return torch.stack([(anchors[..., 2] + anchors[..., 0]) / 2,
                            (anchors[..., 3] + anchors[..., 1]) / 2], dim=-1)

    # ------------------------------------------------------------------ loss
    def loss_single(self, anchors, cls_score, bbox_pred, labels, label_weights, bbox_targets,
                    stride, num_total_samples):
        """One level, in units of its stride: ``(loss_cls, loss_bbox, loss_dfl (both not yet
        normalised), sum of the box weights)``. A positive's box losses are weighted by its
        best class score; its class target is the IoU of its (detached) predicted box."""
        if stride[0] != stride[1]:
            raise ValueError(f'{type(self).__name__} needs square strides, got {stride}')
        anchors = anchors.reshape(-1, 4)
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4 * (self.reg_max + 1))
        bbox_targets = bbox_targets.reshape(-1, 4)
        labels = labels.reshape(-1)
        label_weights = label_weights.reshape(-1)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        score = label_weights.new_zeros(labels.shape)
        if len(pos_inds) > 0:
            pos_pred = bbox_pred[pos_inds]
            centres = self.anchor_center(anchors[pos_inds]) / stride[0]
            weight_targets = cls_score.detach().sigmoid().max(dim=1)[0][pos_inds]
            pos_decoded = self.bbox_coder.decode(centres, self.integral(pos_pred))
            pos_targets = bbox_targets[pos_inds] / stride[0]
            score[pos_inds] = aligned_overlaps(pos_decoded.detach(), pos_targets).to(
                score.dtype)
            target_corners = self.bbox_coder.encode(centres, pos_targets,
                                                    self.reg_max).reshape(-1)
            loss_bbox = self.loss_bbox(pos_decoded, pos_targets, weight=weight_targets,
                                       avg_factor=1.0)
            loss_dfl = self.loss_dfl(pos_pred.reshape(-1, self.reg_max + 1), target_corners,
                                     weight=weight_targets[:, None].expand(-1, 4).reshape(-1),
                                     avg_factor=4.0)
        else:
            loss_bbox = bbox_pred.sum() * 0
            loss_dfl = bbox_pred.sum() * 0
            weight_targets = bbox_pred.new_tensor(0)
        loss_cls = self.loss_cls(cls_score, (labels, score), weight=label_weights,
                                 avg_factor=num_total_samples)
        return loss_cls, loss_bbox, loss_dfl, weight_targets.sum()

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_dfl)``, each a list over levels: the class loss
        averaged over the positives of the (distributed) batch, the box losses over the sum
        of the positives' box weights."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg (assigner, ...), '
                             f'got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (anchor_list, labels_list, label_weights_list, bbox_targets_list, _, num_total_pos,
         _) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                               gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
                               label_channels=label_channels)
        num_total_samples = max(reduce_mean(torch.tensor(
            num_total_pos, dtype=torch.float, device=device)).item(), 1.0)
        outs = [self.loss_single(*args, num_total_samples=num_total_samples) for args in zip(
            anchor_list, cls_scores, bbox_preds, labels_list, label_weights_list,
            bbox_targets_list, self.prior_generator.strides)]
        losses_cls, losses_bbox, losses_dfl, avg_factor = zip(*outs)
        avg_factor = reduce_mean(sum(avg_factor)).clamp_(min=1).item()
        return dict(loss_cls=list(losses_cls),
                    loss_bbox=[loss / avg_factor for loss in losses_bbox],
                    loss_dfl=[loss / avg_factor for loss in losses_dfl])

    # ------------------------------------------------------------- inference
    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """mmdet's: per level each side's expected distance times the stride, decoded from
        the anchor centres; the ``nms_pre`` best (prior, class) scores above ``score_thr``."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg (nms_pre, score_thr, nms, '
                             'max_per_img) to predict boxes')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels = [], [], []
        for cls_score, bbox_pred, stride, priors in zip(
                cls_score_list, bbox_pred_list, self.prior_generator.strides, mlvl_priors):
            if stride[0] != stride[1]:
                raise ValueError(f'{type(self).__name__} needs square strides, got {stride}')
            bbox_pred = self.integral(bbox_pred.permute(1, 2, 0)) * stride[0]
            scores = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels).sigmoid()
            valid = scores > score_thr
            scores = scores[valid]
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores.sort(descending=True)
            if nms_pre is not None and nms_pre > 0:  # mmdet drops one box for nms_pre=-1
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            mlvl_bboxes.append(self.bbox_coder.decode(self.anchor_center(priors[keep]),
                                                      bbox_pred[keep],
                                                      max_shape=img_meta['img_shape']))
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes,
                                       img_meta['scale_factor'], cfg, rescale, with_nms)
