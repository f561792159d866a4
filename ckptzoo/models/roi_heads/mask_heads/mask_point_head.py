"""mmdet 2.x ``MaskPointHead`` (PointRend's point head): a shared MLP (1x1 ``Conv1d``
ConvModules ``fcs.{i}``, then ``fc_logits``) that classifies points from their fine-grained
FPN features and the coarse mask's logits there (concatenated again after every layer with
``coarse_pred_each_layer``).

It also chooses the points: the most uncertain of random candidates plus random ones in
training (:func:`~ckptzoo.models.utils.point_sample.get_uncertain_point_coords_with_randomness`),
the most uncertain cells of the upsampled mask at test; and it samples the point targets from
the ground-truth masks.
"""
import torch
import torch.nn as nn

from ....ops import point_sample, rel_roi_point_to_rel_img_point
from ....registry import MODELS
from ....utils.cfg_get import cfg_get
from ...utils import ConvModule, apply_init_cfg
from ...utils.point_sample import get_uncertain_point_coords_with_randomness, get_uncertainty

__all__ = ['MaskPointHead']


@MODELS.register_module()
class MaskPointHead(nn.Module):
    """Args as mmdet 2.x: ``num_classes`` (required), ``num_fcs``, ``in_channels`` (of the
    fine-grained features), ``fc_channels``, ``class_agnostic``, ``coarse_pred_each_layer``,
    ``conv_cfg`` (``dict(type='Conv1d')``), ``norm_cfg``, ``act_cfg``, ``loss_point``,
    ``init_cfg`` (default normal std 0.001 on ``fc_logits``)."""

    def __init__(self, num_classes, num_fcs=3, in_channels=256, fc_channels=256,
                 class_agnostic=False, coarse_pred_each_layer=True, conv_cfg=dict(type='Conv1d'),
                 norm_cfg=None, act_cfg=dict(type='ReLU'),
                 loss_point=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0),
                 init_cfg=dict(type='Normal', std=0.001, override=dict(name='fc_logits'))):
        super().__init__()
        self.num_fcs = num_fcs
        self.in_channels = in_channels
        self.fc_channels = fc_channels
        self.num_classes = num_classes
        self.class_agnostic = class_agnostic
        self.coarse_pred_each_layer = coarse_pred_each_layer
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.loss_point = MODELS.build(loss_point)
        fc_in = in_channels + num_classes
        self.fcs = nn.ModuleList()
        for _ in range(num_fcs):
            self.fcs.append(ConvModule(fc_in, fc_channels, kernel_size=1, stride=1, padding=0,
                                       conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg))
            fc_in = fc_channels + (num_classes if coarse_pred_each_layer else 0)
        self.fc_logits = nn.Conv1d(fc_in, 1 if class_agnostic else num_classes, kernel_size=1,
                                   stride=1, padding=0)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The layers were initialised at construction (``init_cfg``)."""

    def forward(self, fine_grained_feats, coarse_feats):
        """``(n, in_channels, p)`` and ``(n, num_classes, p)`` -> ``(n, classes, p)`` point
        logits."""
        x = torch.cat([fine_grained_feats, coarse_feats], dim=1)
        for fc in self.fcs:
            x = fc(x)
            if self.coarse_pred_each_layer:
                x = torch.cat((x, coarse_feats), dim=1)
        return self.fc_logits(x)

    def get_targets(self, rois, rel_roi_points, sampling_results, gt_masks, cfg):
        """``(n_pos, num_points)``: each positive's ground-truth mask read at its points."""
        targets = []
        for i, res in enumerate(sampling_results):
            inds = rois[:, 0] == i
            targets.append(self._get_target_single(rois[inds], rel_roi_points[inds],
                                                   res.pos_assigned_gt_inds, gt_masks[i], cfg))
        return torch.cat(targets) if targets else targets

    def _get_target_single(self, rois, rel_roi_points, pos_assigned_gt_inds, gt_masks, cfg):
        if rois.size(0) == 0:
            return rois.new_zeros((0, cfg_get(cfg, 'num_points')))
        masks = gt_masks.to_tensor(rois.dtype, rois.device).index_select(
            0, pos_assigned_gt_inds).unsqueeze(1)
        rel_img_points = rel_roi_point_to_rel_img_point(rois, rel_roi_points, masks)
        return point_sample(masks, rel_img_points).squeeze(1)

    def loss(self, point_pred, point_targets, labels):
        """``dict(loss_point=...)``: ``loss_point`` over each RoI's class channel."""
        if self.class_agnostic:
            labels = torch.zeros_like(labels)
        return dict(loss_point=self.loss_point(point_pred, point_targets, labels))

    def get_roi_rel_points_train(self, mask_pred, labels, cfg):
        """``(n, num_points, 2)`` training points (``cfg``: ``num_points``,
        ``oversample_ratio``, ``importance_sample_ratio``), drawn from torch's generator."""
        return get_uncertain_point_coords_with_randomness(
            mask_pred, labels, cfg_get(cfg, 'num_points'), cfg_get(cfg, 'oversample_ratio'),
            cfg_get(cfg, 'importance_sample_ratio'))

    def get_roi_rel_points_test(self, mask_pred, pred_label, cfg):
        """``(point_indices (n, p), point_coords (n, p, 2))``: the ``subdivision_num_points``
        most uncertain cells of ``mask_pred`` (at most all of them) and their centres."""
        uncertainty = get_uncertainty(mask_pred, pred_label)
        num_rois, _, mask_height, mask_width = uncertainty.shape
        h_step, w_step = 1.0 / mask_height, 1.0 / mask_width
        mask_size = int(mask_height * mask_width)
        num_points = min(mask_size, cfg_get(cfg, 'subdivision_num_points'))
        point_indices = uncertainty.view(num_rois, mask_size).topk(num_points, dim=1)[1]
        xs = w_step / 2.0 + (point_indices % mask_width).float() * w_step
        ys = h_step / 2.0 + (point_indices // mask_width).float() * h_step
        return point_indices, torch.stack([xs, ys], dim=2)
