"""mmdet 2.x ``UniformAssigner`` (YOLOF): every ground truth takes the ``match_times`` priors
nearest to it (L1 distance of centre-size boxes) by predicted box and as many by anchor, so
large and small boxes get the same number of positives. A positive whose anchor's IoU with its
gt is below ``pos_ignore_thr`` is ignored, as is a negative whose predicted box has IoU above
``neg_ignore_thr`` with some gt. ``gt_bboxes_ignore`` is not used, as mmdet.

The result carries, as attributes (mmdet's extra properties of those names): ``pos_idx``
(which of the ``2 * match_times * num_gts`` matches are kept), ``pos_predicted_boxes`` (their
predicted boxes, with gradient) and ``target_boxes`` (their gts)."""
import torch

from ....registry import TASK_UTILS
from ..iou_calculators.iou2d_calculator import bbox_overlaps
from .assign_result import AssignResult

__all__ = ['UniformAssigner']


def _cxcywh(boxes):
    x1, y1, x2, y2 = boxes.split((1, 1, 1, 1), dim=-1)
    return torch.cat([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


@TASK_UTILS.register_module()
class UniformAssigner:
    """Args (mmdet's): ``pos_ignore_thr``, ``neg_ignore_thr`` (floats), ``match_times``
    (positives per gt from each of the two rankings, default 4), ``iou_calculator`` (only
    ``dict(type='BboxOverlaps2D')``)."""

    def __init__(self, pos_ignore_thr, neg_ignore_thr, match_times=4,
                 iou_calculator=dict(type='BboxOverlaps2D')):
        if not isinstance(iou_calculator, dict) or \
                iou_calculator.get('type') != 'BboxOverlaps2D':
            raise NotImplementedError(f"iou_calculator must be dict(type='BboxOverlaps2D'), "
                                      f'got {iou_calculator!r}')
        if not (isinstance(match_times, int) and match_times > 0):
            raise ValueError(f'match_times must be a positive int, got {match_times!r}')
        self.match_times = match_times
        self.pos_ignore_thr = pos_ignore_thr
        self.neg_ignore_thr = neg_ignore_thr

    def assign(self, bbox_pred, anchor, gt_bboxes, gt_bboxes_ignore=None, gt_labels=None):
        """``bbox_pred``: the decoded predicted boxes ``[n, 4]``; ``anchor`` ``[n, 4]``."""
        num_gts, num_bboxes = gt_bboxes.size(0), bbox_pred.size(0)
        gt_inds = bbox_pred.new_full((num_bboxes, ), 0, dtype=torch.long)
        labels = bbox_pred.new_full((num_bboxes, ), -1, dtype=torch.long)
        if num_gts == 0 or num_bboxes == 0:
            result = AssignResult(num_gts, gt_inds, None, labels=labels)
            result.pos_idx = bbox_pred.new_empty(0, dtype=torch.bool)
            result.pos_predicted_boxes = bbox_pred.new_empty((0, 4))
            result.target_boxes = bbox_pred.new_empty((0, 4))
            return result
        if num_bboxes < self.match_times:
            raise ValueError(f'UniformAssigner takes match_times={self.match_times} priors '
                             f'per gt, got {num_bboxes} priors')
        gt_cxcywh = _cxcywh(gt_bboxes)
        cost_pred = torch.cdist(_cxcywh(bbox_pred), gt_cxcywh, p=1).cpu()
        cost_anchor = torch.cdist(_cxcywh(anchor), gt_cxcywh, p=1).cpu()
        index = torch.topk(cost_pred, k=self.match_times, dim=0, largest=False)[1]
        index1 = torch.topk(cost_anchor, k=self.match_times, dim=0, largest=False)[1]
        indexes = torch.cat((index, index1), dim=1).reshape(-1).to(bbox_pred.device)
        pred_overlaps = bbox_overlaps(bbox_pred, gt_bboxes)
        anchor_overlaps = bbox_overlaps(anchor, gt_bboxes)
        gt_inds[pred_overlaps.max(dim=1)[0] > self.neg_ignore_thr] = -1
        pos_gt_index = torch.arange(0, num_gts, device=bbox_pred.device).repeat(
            self.match_times * 2)
        pos_ignore = anchor_overlaps[indexes, pos_gt_index] < self.pos_ignore_thr
        matched = pos_gt_index + 1
        matched[pos_ignore] = -1
        gt_inds[indexes] = matched  # a prior matched twice keeps the last match, as mmdet
        if gt_labels is not None:
            labels = gt_inds.new_full((num_bboxes, ), -1)
            pos = gt_inds > 0
            labels[pos] = gt_labels[gt_inds[pos] - 1]
        else:
            labels = None
        result = AssignResult(num_gts, gt_inds, anchor_overlaps.max(dim=0)[0], labels=labels)
        result.pos_idx = ~pos_ignore
        result.pos_predicted_boxes = bbox_pred[indexes]
        result.target_boxes = gt_bboxes[pos_gt_index]
        return result
