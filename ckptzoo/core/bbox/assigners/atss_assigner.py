"""mmdet 2.x ``ATSSAssigner`` (Adaptive Training Sample Selection, Zhang et al. 2020): per
ground truth, the ``topk`` priors of each pyramid level whose centres are closest to its
centre are candidates; those whose IoU is at least the candidates' mean + std and whose centre
lies inside the box are positives; a prior positive for several boxes goes to the one it
overlaps most. With ``alpha`` (DDOD) the IoU is replaced by the cost
``sigmoid(cls_score)**(1 - alpha) * IoU(pred_box, gt)**alpha``.

One fix over mmdet: a ground truth with a single candidate (one level, ``topk=1``) has an
undefined (NaN) sample std in mmdet, which makes that candidate negative; here its std is 0,
so the candidate is kept when its centre lies in the box."""
import torch

from ....registry import TASK_UTILS
from ..iou_calculators.iou2d_calculator import bbox_overlaps
from .assign_result import AssignResult

__all__ = ['ATSSAssigner']

INF = 100000000


@TASK_UTILS.register_module()
class ATSSAssigner:
    """Args (mmdet's):
        topk (int): candidates per level and ground truth.
        alpha (float | None): DDOD's cost exponent; None gives plain ATSS.
        iou_calculator (dict): only ``dict(type='BboxOverlaps2D')``.
        ignore_iof_thr (float): priors whose IoF with a ``gt_bboxes_ignore`` box exceeds it
            (when > 0) are ignored (-1) and never candidates.
    """

    def __init__(self, topk, alpha=None, iou_calculator=dict(type='BboxOverlaps2D'),
                 ignore_iof_thr=-1):
        if isinstance(topk, bool) or not isinstance(topk, int) or topk < 1:
            raise ValueError(f'ATSSAssigner topk must be a positive int, got {topk!r}')
        if alpha is not None and not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1):
            raise ValueError(f'ATSSAssigner alpha must be None or a float in [0, 1], '
                             f'got {alpha!r}')
        if not isinstance(iou_calculator, dict) or iou_calculator.get('type') != 'BboxOverlaps2D':
            raise NotImplementedError(f"ATSSAssigner iou_calculator must be "
                                      f"dict(type='BboxOverlaps2D'), got {iou_calculator!r}")
        self.topk = topk
        self.alpha = alpha
        self.ignore_iof_thr = ignore_iof_thr

    def _overlaps(self, bboxes, gt_bboxes, gt_labels, cls_scores, bbox_preds):
        if self.alpha is None:
            if cls_scores is not None or bbox_preds is not None:
                raise ValueError('ATSSAssigner got cls_scores / bbox_preds without alpha: set '
                                 'alpha (the cost-based ATSS of DDOD) or leave them out')
            return bbox_overlaps(bboxes, gt_bboxes)
        if cls_scores is None or bbox_preds is None or gt_labels is None:
            raise ValueError('ATSSAssigner with alpha (DDOD) needs cls_scores, bbox_preds '
                             'and gt_labels')
        cls_cost = torch.sigmoid(cls_scores[:, gt_labels])
        ious = bbox_overlaps(bbox_preds, gt_bboxes).to(cls_cost.dtype)
        return cls_cost**(1 - self.alpha) * ious**self.alpha

    def assign(self, bboxes, num_level_bboxes, gt_bboxes, gt_bboxes_ignore=None,
               gt_labels=None, cls_scores=None, bbox_preds=None):
        """``bboxes [N, 4]`` priors of all levels (level after level, ``num_level_bboxes``
        each), ``gt_bboxes [K, 4]``; with ``alpha``, ``cls_scores [N, C]`` logits and
        ``bbox_preds [N, 4]`` decoded boxes. Returns an :class:`AssignResult`."""
        bboxes = bboxes[:, :4]
        num_gt, num_bboxes = gt_bboxes.size(0), bboxes.size(0)
        if sum(num_level_bboxes) != num_bboxes:
            raise ValueError(f'num_level_bboxes {list(num_level_bboxes)} must add up to the '
                             f'{num_bboxes} bboxes')
        overlaps = self._overlaps(bboxes, gt_bboxes, gt_labels, cls_scores, bbox_preds)
        gt_inds = overlaps.new_zeros((num_bboxes, ), dtype=torch.long)
        if num_gt == 0 or num_bboxes == 0:
            labels = None if gt_labels is None else \
                overlaps.new_full((num_bboxes, ), -1, dtype=torch.long)
            return AssignResult(num_gt, gt_inds, overlaps.new_zeros((num_bboxes, )),
                                labels=labels)

        gt_centres = (gt_bboxes[:, :2] + gt_bboxes[:, 2:]) / 2.0
        centres = (bboxes[:, :2] + bboxes[:, 2:]) / 2.0
        distances = (centres[:, None, :] - gt_centres[None, :, :]).pow(2).sum(-1).sqrt()
        if (self.ignore_iof_thr > 0 and gt_bboxes_ignore is not None
                and gt_bboxes_ignore.numel() > 0):
            ignored = bbox_overlaps(bboxes, gt_bboxes_ignore, mode='iof').max(dim=1)[0] \
                > self.ignore_iof_thr
            distances[ignored, :] = INF
            gt_inds[ignored] = -1

        # per level, the topk closest priors of each gt: [sum_l k_l, K] prior indices
        candidates, start = [], 0
        for count in num_level_bboxes:
            k = min(self.topk, count)
            nearest = distances[start:start + count].topk(k, dim=0, largest=False)[1]
            candidates.append(nearest + start)
            start += count
        candidates = torch.cat(candidates, dim=0)
        gt_cols = torch.arange(num_gt, device=candidates.device)
        cand_overlaps = overlaps[candidates, gt_cols]
        std = cand_overlaps.std(0) if cand_overlaps.size(0) > 1 \
            else torch.zeros_like(cand_overlaps[0])
        is_pos = cand_overlaps >= (cand_overlaps.mean(0) + std)[None, :]

        # the candidate's centre strictly inside its gt (by more than 0.01)
        cx, cy = centres[candidates, 0], centres[candidates, 1]
        inside = torch.stack([cx - gt_bboxes[:, 0], cy - gt_bboxes[:, 1],
                              gt_bboxes[:, 2] - cx, gt_bboxes[:, 3] - cy], dim=1)
        is_pos = is_pos & (inside.min(dim=1)[0] > 0.01)

        # a prior positive for several gts goes to the one with the highest overlap
        masked = torch.full_like(overlaps, -INF)
        rows, cols = candidates[is_pos], gt_cols.expand_as(candidates)[is_pos]
        masked[rows, cols] = overlaps[rows, cols]
        max_overlaps, argmax = masked.max(dim=1)
        found = max_overlaps != -INF
        gt_inds[found] = argmax[found] + 1

        labels = None
        if gt_labels is not None:
            labels = gt_inds.new_full((num_bboxes, ), -1)
            pos = gt_inds > 0
            labels[pos] = gt_labels[gt_inds[pos] - 1]
        return AssignResult(num_gt, gt_inds, max_overlaps, labels=labels)
