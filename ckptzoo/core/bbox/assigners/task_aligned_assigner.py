"""mmdet 2.x ``TaskAlignedAssigner`` (TOOD, Feng et al. 2021): per ground truth, the ``topk``
priors of largest alignment metric ``score**alpha * IoU(pred_box, gt)**beta`` (its class's
predicted score and the predicted box's IoU, both detached) whose centre lies inside the box
are positives; a prior positive for several boxes goes to the one its box overlaps most. The
result also carries each prior's ``assign_metrics`` (the metric with its gt, 0 elsewhere)."""
import torch

from ....registry import TASK_UTILS
from ..iou_calculators.iou2d_calculator import bbox_overlaps
from .assign_result import AssignResult

__all__ = ['TaskAlignedAssigner']

INF = 100000000


@TASK_UTILS.register_module()
class TaskAlignedAssigner:
    """Args (mmdet's):
        topk (int): candidates per ground truth (over all levels).
        iou_calculator (dict): only ``dict(type='BboxOverlaps2D')``.
    """

    def __init__(self, topk, iou_calculator=dict(type='BboxOverlaps2D')):
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f'TaskAlignedAssigner topk must be a positive int, got {topk!r}')
        if not isinstance(iou_calculator, dict) or iou_calculator.get('type') != 'BboxOverlaps2D':
            raise NotImplementedError(f"TaskAlignedAssigner iou_calculator must be "
                                      f"dict(type='BboxOverlaps2D'), got {iou_calculator!r}")
        self.topk = topk

    def assign(self, pred_scores, decode_bboxes, anchors, gt_bboxes, gt_bboxes_ignore=None,
               gt_labels=None, alpha=1, beta=6):
        """``pred_scores [N, C]`` probabilities, ``decode_bboxes [N, 4]`` predicted boxes,
        ``anchors [N, 4]``, ``gt_bboxes [K, 4]``, ``gt_labels [K]`` (needed: the metric takes
        each gt's class score). ``gt_bboxes_ignore`` is accepted and unused, as in mmdet.
        Returns an :class:`AssignResult` with ``assign_metrics [N]``."""
        anchors = anchors[:, :4]
        num_gt, num_bboxes = gt_bboxes.size(0), anchors.size(0)
        gt_inds = anchors.new_zeros((num_bboxes, ), dtype=torch.long)
        assign_metrics = anchors.new_zeros((num_bboxes, ))
        if num_gt == 0 or num_bboxes == 0:
            labels = None if gt_labels is None else \
                anchors.new_full((num_bboxes, ), -1, dtype=torch.long)
            result = AssignResult(num_gt, gt_inds, anchors.new_zeros((num_bboxes, )),
                                  labels=labels)
            result.assign_metrics = assign_metrics
            return result
        if gt_labels is None:
            raise ValueError('TaskAlignedAssigner needs gt_labels: the alignment metric takes '
                             "each gt's class score")
        overlaps = bbox_overlaps(decode_bboxes, gt_bboxes).detach()
        bbox_scores = pred_scores[:, gt_labels].detach()
        alignment_metrics = bbox_scores**alpha * overlaps**beta

        candidates = alignment_metrics.topk(min(self.topk, num_bboxes), dim=0, largest=True)[1]
        gt_cols = torch.arange(num_gt, device=candidates.device)
        is_pos = alignment_metrics[candidates, gt_cols] > 0
        centres = (anchors[:, :2] + anchors[:, 2:]) / 2.0
        cx, cy = centres[candidates, 0], centres[candidates, 1]
        inside = torch.stack([cx - gt_bboxes[:, 0], cy - gt_bboxes[:, 1],
                              gt_bboxes[:, 2] - cx, gt_bboxes[:, 3] - cy], dim=1)
        is_pos = is_pos & (inside.min(dim=1)[0] > 0.01)

        masked = torch.full_like(overlaps, -INF)
        rows, cols = candidates[is_pos], gt_cols.expand_as(candidates)[is_pos]
        masked[rows, cols] = overlaps[rows, cols]
        max_overlaps, argmax = masked.max(dim=1)
        found = max_overlaps != -INF
        gt_inds[found] = argmax[found] + 1
        assign_metrics[found] = alignment_metrics[found, argmax[found]].to(assign_metrics.dtype)

        labels = gt_inds.new_full((num_bboxes, ), -1)
        pos = gt_inds > 0
        labels[pos] = gt_labels[gt_inds[pos] - 1]
        result = AssignResult(num_gt, gt_inds, max_overlaps, labels=labels)
        result.assign_metrics = assign_metrics
        return result
