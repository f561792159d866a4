"""mmdet 2.x ``MaskIoUHead`` (Mask Scoring R-CNN, Huang et al. 2019): predicts, per class, the
IoU of the mask head's binarised mask with the ground truth, so that a mask is scored by
``box score x predicted mask IoU`` rather than by its box alone.

Input: the mask head's RoI features and its (positive-class) mask logits, max-pooled to the
features' size and concatenated as one more channel. Keys ``convs.{i}``, ``fcs.{i}``,
``fc_mask_iou`` as mmdet.
"""
import numpy as np
import torch
import torch.nn as nn
from torch.nn.modules.utils import _pair

from ....registry import MODELS
from ....runner.fp16 import force_fp32
from ....utils.cfg_get import cfg_get
from ...utils import apply_init_cfg

__all__ = ['MaskIoUHead']

_DEFAULT_INIT = [dict(type='Kaiming', override=dict(name='convs')),
                 dict(type='Caffe2Xavier', override=dict(name='fcs')),
                 dict(type='Normal', std=0.01, override=dict(name='fc_mask_iou'))]


@MODELS.register_module()
class MaskIoUHead(nn.Module):
    """Args as mmdet 2.x: ``num_convs`` 3x3 convs (the last one of stride 2), ``num_fcs``
    fcs, ``roi_feat_size`` of the mask features, ``in_channels``, ``conv_out_channels``,
    ``fc_out_channels``, ``num_classes``, ``loss_iou`` (``MSELoss``, weight 0.5) and
    ``init_cfg`` (mmdet's default: Kaiming convs, Caffe2Xavier fcs, Normal(0.01) output)."""

    def __init__(self, num_convs=4, num_fcs=2, roi_feat_size=14, in_channels=256,
                 conv_out_channels=256, fc_out_channels=1024, num_classes=80,
                 loss_iou=dict(type='MSELoss', loss_weight=0.5), init_cfg=_DEFAULT_INIT):
        super().__init__()
        for name, value in (('num_convs', num_convs), ('num_fcs', num_fcs),
                            ('num_classes', num_classes)):
            if not isinstance(value, int) or value < (1 if name != 'num_fcs' else 0):
                raise ValueError(f'MaskIoUHead {name} must be a positive int, got {value!r}')
        self.in_channels = in_channels
        self.conv_out_channels = conv_out_channels
        self.fc_out_channels = fc_out_channels
        self.num_classes = num_classes
        self.fp16_enabled = False
        # the first conv also takes the pooled mask prediction; the last one halves the size
        self.convs = nn.ModuleList(
            nn.Conv2d(in_channels + 1 if i == 0 else conv_out_channels, conv_out_channels, 3,
                      stride=2 if i == num_convs - 1 else 1, padding=1)
            for i in range(num_convs))
        roi_feat_size = _pair(roi_feat_size)
        pooled_area = (roi_feat_size[0] // 2) * (roi_feat_size[1] // 2)
        self.fcs = nn.ModuleList(
            nn.Linear(conv_out_channels * pooled_area if i == 0 else fc_out_channels,
                      fc_out_channels) for i in range(num_fcs))
        self.fc_mask_iou = nn.Linear(fc_out_channels if num_fcs else
                                     conv_out_channels * pooled_area, num_classes)
        self.relu = nn.ReLU()
        self.max_pool = nn.MaxPool2d(2, 2)
        self.loss_iou = MODELS.build(loss_iou)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Initialised at construction from ``init_cfg``; nothing to load."""

    def forward(self, mask_feat, mask_pred):
        """``mask_feat [n, C, s, s]``, ``mask_pred [n, 2s, 2s]`` logits -> ``[n, classes]``."""
        mask_pred_pooled = self.max_pool(mask_pred.sigmoid().unsqueeze(1))
        x = torch.cat((mask_feat, mask_pred_pooled), 1)
        for conv in self.convs:
            x = self.relu(conv(x))
        x = x.flatten(1)
        for fc in self.fcs:
            x = self.relu(fc(x))
        return self.fc_mask_iou(x)

    @force_fp32(apply_to=('mask_iou_pred', ))
    def loss(self, mask_iou_pred, mask_iou_targets):
        """``dict(loss_mask_iou=...)`` over the RoIs whose target IoU is positive (zero, still
        in the graph, when there is none)."""
        pos_inds = mask_iou_targets > 0
        if pos_inds.sum() > 0:
            loss = self.loss_iou(mask_iou_pred[pos_inds], mask_iou_targets[pos_inds])
        else:
            loss = mask_iou_pred.sum() * 0
        return dict(loss_mask_iou=loss)

    @force_fp32(apply_to=('mask_pred', ))
    def get_targets(self, sampling_results, gt_masks, mask_pred, mask_targets, rcnn_train_cfg):
        """The IoU target of each positive RoI: the predicted mask (``mask_pred > train_cfg
        mask_thr_binary``) against the whole ground-truth instance, whose area is the area
        inside the RoI divided by the share of the instance that lies inside the RoI."""
        area_ratios = torch.cat([self._get_area_ratio(res.pos_bboxes, res.pos_assigned_gt_inds,
                                                      masks)
                                 for res, masks in zip(sampling_results, gt_masks)])
        if mask_targets.size(0) != area_ratios.size(0):
            raise ValueError(f'MaskIoUHead.get_targets: {mask_targets.size(0)} mask targets '
                             f'for {area_ratios.size(0)} positive RoIs')
        thr = cfg_get(rcnn_train_cfg, 'mask_thr_binary')
        if thr is None:
            raise ValueError('MaskIoUHead needs train_cfg.rcnn.mask_thr_binary to binarise the '
                             f'predicted masks, got {rcnn_train_cfg!r}')
        mask_pred = (mask_pred > thr).float()
        mask_pred_areas = mask_pred.sum((-1, -2))
        overlap_areas = (mask_pred * mask_targets).sum((-1, -2))
        gt_full_areas = mask_targets.sum((-1, -2)) / (area_ratios + 1e-7)
        return overlap_areas / (mask_pred_areas + gt_full_areas - overlap_areas)

    def _get_area_ratio(self, pos_proposals, pos_assigned_gt_inds, gt_masks):
        """Per positive RoI, the area of its instance inside the (integer) RoI over the
        instance's whole area (on the CPU, as mmdet)."""
        if pos_proposals.size(0) == 0:
            return pos_proposals.new_zeros((0, ))
        proposals = pos_proposals.cpu().numpy()
        gt_inds = pos_assigned_gt_inds.cpu().numpy()
        instance_areas = gt_masks.areas
        ratios = [gt_masks[gt_inds[i]].crop(proposals[i, :].astype(np.int32)).areas[0] /
                  (instance_areas[gt_inds[i]] + 1e-7) for i in range(len(proposals))]
        return torch.from_numpy(np.stack(ratios)).float().to(pos_proposals.device)

    @force_fp32(apply_to=('mask_iou_pred', ))
    def get_mask_scores(self, mask_iou_pred, det_bboxes, det_labels):
        """Per class, the detections' mask scores: box score x predicted IoU of its class."""
        inds = range(det_labels.size(0))
        mask_scores = (mask_iou_pred[inds, det_labels] * det_bboxes[inds, -1]).cpu().numpy()
        det_labels = det_labels.cpu().numpy()
        return [mask_scores[det_labels == i] for i in range(self.num_classes)]
