"""mmdet 2.x's ``HungarianAssigner`` (DETR): a one-to-one matching of queries to ground truths
that minimises the summed cost (classification + L1 of normalised boxes + IoU), solved by
``scipy.optimize.linear_sum_assignment``.

More ground truths than queries: ``linear_sum_assignment`` on a rectangular matrix matches
``min(num_queries, num_gts)`` pairs, the cheapest complete matching of the queries; the
surplus ground truths get no query and so no loss. That is a well-defined optimum, not an
error, and a crowded image should not stop a training run, but it silently drops objects
(mmdet says nothing): here a warning names the image and the counts and says to raise
``num_query``.
"""
import warnings

import torch
from scipy.optimize import linear_sum_assignment

from ....registry import TASK_UTILS
from ..match_costs import build_match_cost
from ..transforms import bbox_cxcywh_to_xyxy
from .assign_result import AssignResult

__all__ = ['HungarianAssigner']


@TASK_UTILS.register_module()
class HungarianAssigner:
    """Args (mmdet's): ``cls_cost``, ``reg_cost``, ``iou_cost`` match cost configs
    (defaults ClassificationCost, BBoxL1Cost, IoUCost giou, each weight 1)."""

    def __init__(self, cls_cost=dict(type='ClassificationCost', weight=1.),
                 reg_cost=dict(type='BBoxL1Cost', weight=1.0),
                 iou_cost=dict(type='IoUCost', iou_mode='giou', weight=1.0)):
        self.cls_cost = build_match_cost(cls_cost)
        self.reg_cost = build_match_cost(reg_cost)
        self.iou_cost = build_match_cost(iou_cost)

    def assign(self, bbox_pred, cls_pred, gt_bboxes, gt_labels, img_meta, gt_bboxes_ignore=None,
               eps=1e-7):
        """``bbox_pred`` [num_query, 4] normalised (cx, cy, w, h), ``cls_pred`` [num_query,
        num_classes(+1)] logits, ``gt_bboxes`` [num_gts, 4] x1y1x2y2 in pixels of
        ``img_meta['img_shape']``. Every query is negative (0) or matched (its gt's 1-based
        index); labels -1 for negatives."""
        if gt_bboxes_ignore is not None:
            raise NotImplementedError('HungarianAssigner does not support gt_bboxes_ignore '
                                      '(as mmdet)')
        num_gts, num_bboxes = gt_bboxes.size(0), bbox_pred.size(0)
        assigned_gt_inds = bbox_pred.new_full((num_bboxes, ), -1, dtype=torch.long)
        assigned_labels = bbox_pred.new_full((num_bboxes, ), -1, dtype=torch.long)
        if num_gts == 0 or num_bboxes == 0:
            if num_gts == 0:
                assigned_gt_inds[:] = 0
            return AssignResult(num_gts, assigned_gt_inds, None, labels=assigned_labels)
        if num_gts > num_bboxes:
            name = img_meta.get('ori_filename', img_meta.get('filename', '<unnamed image>'))
            warnings.warn(f'HungarianAssigner: image {name} has {num_gts} ground truths but '
                          f'only {num_bboxes} queries: {num_gts - num_bboxes} ground truths get '
                          f'no query and no loss; raise num_query above the largest number of '
                          f'objects per image')
        img_h, img_w = img_meta['img_shape'][:2]
        factor = gt_bboxes.new_tensor([img_w, img_h, img_w, img_h]).unsqueeze(0)
        cost = self.cls_cost(cls_pred, gt_labels) + \
            self.reg_cost(bbox_pred, gt_bboxes / factor) + \
            self.iou_cost(bbox_cxcywh_to_xyxy(bbox_pred) * factor, gt_bboxes)
        rows, cols = linear_sum_assignment(cost.detach().cpu())
        rows = torch.from_numpy(rows).to(bbox_pred.device)
        cols = torch.from_numpy(cols).to(bbox_pred.device)
        assigned_gt_inds[:] = 0
        assigned_gt_inds[rows] = cols + 1
        assigned_labels[rows] = gt_labels[cols]
        return AssignResult(num_gts, assigned_gt_inds, None, labels=assigned_labels)
