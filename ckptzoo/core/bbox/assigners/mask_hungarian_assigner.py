"""mmdet 2.x ``MaskHungarianAssigner`` (MaskFormer / Mask2Former): a one-to-one matching of
queries to ground-truth masks that minimises ``cls_cost + mask_cost + dice_cost``
(``scipy.optimize.linear_sum_assignment``). Unmatched queries are negatives (``gt_inds`` 0).

The costs are match costs built from ``TASK_UTILS`` (``ClassificationCost``,
``FocalLossCost`` / ``CrossEntropyLossCost``, ``DiceCost``); a cost of weight 0 is skipped, as
mmdet skips it. Ignored ground truths are not supported (mmdet's assert, as an error).
"""
import torch
from scipy.optimize import linear_sum_assignment

from ....registry import TASK_UTILS
from .assign_result import AssignResult

__all__ = ['MaskHungarianAssigner']


@TASK_UTILS.register_module()
class MaskHungarianAssigner:
    """Args (mmdet's): ``cls_cost`` (ClassificationCost, weight 1), ``mask_cost``
    (FocalLossCost, weight 1, ``binary_input=True``), ``dice_cost`` (DiceCost, weight 1)."""

    def __init__(self, cls_cost=dict(type='ClassificationCost', weight=1.0),
                 mask_cost=dict(type='FocalLossCost', weight=1.0, binary_input=True),
                 dice_cost=dict(type='DiceCost', weight=1.0)):
        self.cls_cost = TASK_UTILS.build(cls_cost)
        self.mask_cost = TASK_UTILS.build(mask_cost)
        self.dice_cost = TASK_UTILS.build(dice_cost)

    def assign(self, cls_pred, mask_pred, gt_labels, gt_mask, img_meta,
               gt_bboxes_ignore=None, eps=1e-7):
        """``cls_pred`` ``(num_query, C + 1)`` or None, ``mask_pred`` ``(num_query, ...)``
        logits, ``gt_labels`` ``(num_gt,)``, ``gt_mask`` ``(num_gt, ...)`` in the layout of
        ``mask_pred`` (full masks or sampled points). Returns an :class:`AssignResult`
        (``max_overlaps`` None, ``labels`` -1 for negatives)."""
        if gt_bboxes_ignore is not None:
            raise NotImplementedError('MaskHungarianAssigner does not support '
                                      'gt_bboxes_ignore (got a tensor; pass None)')
        num_gt, num_query = gt_labels.shape[0], mask_pred.shape[0]
        gt_inds = mask_pred.new_full((num_query, ), -1, dtype=torch.long)
        labels = mask_pred.new_full((num_query, ), -1, dtype=torch.long)
        if num_gt == 0 or num_query == 0:
            if num_gt == 0:
                gt_inds[:] = 0
            return AssignResult(num_gt, gt_inds, None, labels=labels)
        cost = 0
        if self.cls_cost.weight != 0 and cls_pred is not None:
            cost = cost + self.cls_cost(cls_pred, gt_labels)
        if self.mask_cost.weight != 0:
            cost = cost + self.mask_cost(mask_pred, gt_mask)
        if self.dice_cost.weight != 0:
            cost = cost + self.dice_cost(mask_pred, gt_mask)
        if not isinstance(cost, torch.Tensor):
            raise ValueError('MaskHungarianAssigner needs at least one cost of non-zero weight')
        rows, cols = linear_sum_assignment(cost.detach().cpu())
        rows = torch.from_numpy(rows).to(mask_pred.device)
        cols = torch.from_numpy(cols).to(mask_pred.device)
        gt_inds[:] = 0
        gt_inds[rows] = cols + 1
        labels[rows] = gt_labels[cols]
        return AssignResult(num_gt, gt_inds, None, labels=labels)
