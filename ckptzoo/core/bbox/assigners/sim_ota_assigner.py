"""mmdet 2.x ``SimOTAAssigner`` (YOLOX): each ground truth takes its ``k`` cheapest priors,
``k`` its dynamic budget (the sum of its ``candidate_topk`` best IoUs, at least 1).

The cost of a (prior, gt) pair is ``cls_weight * BCE(sqrt(score), one-hot) + iou_weight *
-log(IoU + eps)``, plus 1e5 unless the prior centre lies both inside the box and inside the
``center_radius * stride`` square around its centre. Only priors inside the box or inside
that square of some gt are candidates; a prior that two gts both take goes to the cheaper.

Fixes over mmdet: the fallback to the CPU happens on an out-of-memory error only (mmdet
retried any ``RuntimeError``, hiding real errors behind an "OOM" warning); the IoUs keep the
inputs' dtype (as mmdet's ``bbox_overlaps``, with its ``eps`` clamp of the union).
"""
import warnings

import torch
import torch.nn.functional as F

from ....registry import TASK_UTILS
from .assign_result import AssignResult

__all__ = ['SimOTAAssigner']

INF = 100000.0


def _pairwise_iou(boxes1, boxes2, eps=1e-6):
    """``[N, M]`` IoU in the boxes' dtype, the union clamped to ``eps`` (mmdet's)."""
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    union = (area1[:, None] + area2[None, :] - inter).clamp(min=eps)
    return inter / union


@TASK_UTILS.register_module()
class SimOTAAssigner:
    """Args (mmdet's): ``center_radius`` (2.5), ``candidate_topk`` (10), ``iou_weight``
    (3.0), ``cls_weight`` (1.0)."""

    def __init__(self, center_radius=2.5, candidate_topk=10, iou_weight=3.0, cls_weight=1.0):
        if not (isinstance(candidate_topk, int) and candidate_topk > 0):
            raise ValueError(f'SimOTAAssigner candidate_topk must be a positive int, '
                             f'got {candidate_topk!r}')
        if not center_radius > 0:
            raise ValueError(f'SimOTAAssigner center_radius must be > 0, got {center_radius!r}')
        self.center_radius = center_radius
        self.candidate_topk = candidate_topk
        self.iou_weight = iou_weight
        self.cls_weight = cls_weight

    def assign(self, pred_scores, priors, decoded_bboxes, gt_bboxes, gt_labels,
               gt_bboxes_ignore=None, eps=1e-7):
        """Args:
            pred_scores (Tensor[N, C]): per prior, class probabilities (cls x objectness).
            priors (Tensor[N, 4]): ``(cx, cy, stride_w, stride_h)``.
            decoded_bboxes (Tensor[N, 4]): predicted x1y1x2y2 boxes.
            gt_bboxes (Tensor[G, 4]), gt_labels (Tensor[G]).
            gt_bboxes_ignore: unused (as mmdet).
            eps (float): in ``-log(IoU + eps)``.

        Returns :class:`AssignResult`: ``max_overlaps`` is the IoU with the assigned gt for
        positives and -1e5 elsewhere (0 everywhere when nothing can be assigned), as mmdet.
        """
        try:
            return self._assign(pred_scores, priors, decoded_bboxes, gt_bboxes, gt_labels, eps)
        except torch.OutOfMemoryError:
            device = pred_scores.device
            warnings.warn('SimOTAAssigner ran out of GPU memory; this image is assigned on '
                          'the CPU (reduce the batch or image size to avoid it)')
            torch.cuda.empty_cache()
            result = self._assign(pred_scores.cpu(), priors.cpu(), decoded_bboxes.cpu(),
                                  gt_bboxes.cpu().float(), gt_labels.cpu(), eps)
            result.gt_inds = result.gt_inds.to(device)
            result.max_overlaps = result.max_overlaps.to(device)
            result.labels = result.labels.to(device)
            return result

    def _assign(self, pred_scores, priors, decoded_bboxes, gt_bboxes, gt_labels, eps):
        num_gt, num_bboxes = gt_bboxes.size(0), decoded_bboxes.size(0)
        gt_inds = decoded_bboxes.new_zeros((num_bboxes, ), dtype=torch.long)
        valid, in_box_and_center = self.get_in_gt_and_in_center_info(priors, gt_bboxes)
        valid_bboxes = decoded_bboxes[valid]
        valid_scores = pred_scores[valid]
        num_valid = valid_bboxes.size(0)
        if num_gt == 0 or num_bboxes == 0 or num_valid == 0:
            labels = None if gt_labels is None else \
                decoded_bboxes.new_full((num_bboxes, ), -1, dtype=torch.long)
            return AssignResult(num_gt, gt_inds, decoded_bboxes.new_zeros((num_bboxes, )),
                                labels=labels)

        ious = _pairwise_iou(valid_bboxes, gt_bboxes)
        iou_cost = -torch.log(ious + eps)
        onehot = F.one_hot(gt_labels.to(torch.int64), pred_scores.shape[-1]).float()
        # BCE of sqrt(score) against each gt's one-hot, in float32 as mmdet computes it
        probs = valid_scores.to(torch.float32).sqrt()[:, None, :].expand(-1, num_gt, -1)
        cls_cost = F.binary_cross_entropy(probs, onehot[None].expand(num_valid, -1, -1),
                                          reduction='none').sum(-1).to(valid_scores.dtype)
        cost = cls_cost * self.cls_weight + iou_cost * self.iou_weight + \
            (~in_box_and_center) * INF

        matched_ious, matched_gt = self.dynamic_k_matching(cost, ious, num_gt, valid)
        gt_inds[valid] = matched_gt + 1
        labels = gt_inds.new_full((num_bboxes, ), -1)
        labels[valid] = gt_labels[matched_gt].long()
        max_overlaps = gt_inds.new_full((num_bboxes, ), -INF, dtype=torch.float32)
        max_overlaps[valid] = matched_ious.to(torch.float32)
        return AssignResult(num_gt, gt_inds, max_overlaps, labels=labels)

    def get_in_gt_and_in_center_info(self, priors, gt_bboxes):
        """``(candidates [N] bool, inside_both [num candidates, G] bool)``: a candidate's
        centre is inside some gt box or some gt's centre square (strict inequalities)."""
        x, y = priors[:, 0:1], priors[:, 1:2]
        sx, sy = priors[:, 2:3], priors[:, 3:4]
        in_gts = torch.stack([x - gt_bboxes[:, 0], y - gt_bboxes[:, 1],
                              gt_bboxes[:, 2] - x, gt_bboxes[:, 3] - y],
                             dim=1).min(dim=1).values > 0
        cx = (gt_bboxes[:, 0] + gt_bboxes[:, 2]) / 2.0
        cy = (gt_bboxes[:, 1] + gt_bboxes[:, 3]) / 2.0
        r = self.center_radius
        in_cts = torch.stack([x - (cx - r * sx), y - (cy - r * sy),
                              (cx + r * sx) - x, (cy + r * sy) - y],
                             dim=1).min(dim=1).values > 0
        candidates = in_gts.any(dim=1) | in_cts.any(dim=1)
        return candidates, in_gts[candidates] & in_cts[candidates]

    def dynamic_k_matching(self, cost, pairwise_ious, num_gt, valid_mask):
        """Each gt takes its ``k`` cheapest candidates; a candidate taken twice goes to its
        cheapest gt. Narrows ``valid_mask`` in place to the matched priors; returns
        ``(IoU with the matched gt, matched gt index)`` of each."""
        matching = torch.zeros_like(cost, dtype=torch.uint8)
        topk = min(self.candidate_topk, pairwise_ious.size(0))
        dynamic_ks = torch.clamp(torch.topk(pairwise_ious, topk, dim=0)[0].sum(0).int(), min=1)
        for g in range(num_gt):
            _, idx = torch.topk(cost[:, g], k=int(dynamic_ks[g]), largest=False)
            matching[idx, g] = 1
        taken_twice = matching.sum(1) > 1
        if taken_twice.any():
            cheapest = torch.min(cost[taken_twice], dim=1)[1]
            matching[taken_twice] = 0
            matching[taken_twice, cheapest] = 1
        fg = matching.sum(1) > 0
        valid_mask[valid_mask.clone()] = fg
        matched_gt = matching[fg].argmax(1)
        matched_ious = (matching * pairwise_ious).sum(1)[fg]
        return matched_ious, matched_gt
