"""mmdet 2.x ``ScoreHLRSampler`` (PISA's ISR-N, Cao et al. 2020): positives at random, and the
negatives that matter most: the RoI head scores every negative, the ones above ``score_thr``
are grouped by NMS (``nms_match``) and ranked by their score-hierarchical local rank (first
within their group, then across groups); the top ones are kept (random low-score ones fill
up), and their classification weights fall with the rank, ``(bias + (1 - bias) * w) ** k``,
renormalised so that the negatives' total loss is unchanged.

``sample`` returns ``(SamplingResult, neg_label_weights)``: the RoI head
(:class:`~ckptzoo.models.roi_heads.PISARoIHead`) puts the weights on the negatives' labels.
The indices keep the sampler's order (no ``unique``), so the weights stay aligned, as mmdet.
"""
import numbers

import torch

from ....ops import nms_match
from ....registry import TASK_UTILS
from ..transforms import bbox2roi
from .base_sampler import BaseSampler, _repeat_to
from .sampling_result import SamplingResult

__all__ = ['ScoreHLRSampler']


@TASK_UTILS.register_module()
class ScoreHLRSampler(BaseSampler):
    """Args (mmdet's): ``num``, ``pos_fraction``, ``context`` (the RoI head, required: it
    scores the negatives; a cascade head's ``current_stage``), ``neg_pos_ub``,
    ``add_gt_as_proposals``, ``k`` (power of the weight mapping), ``bias`` (its shift),
    ``score_thr`` (a negative counts as valid above it), ``iou_thr`` (of the grouping NMS).

    At capacity (:attr:`BaseSampler.at_capacity`): positives as the other samplers; the
    negatives are ranked as ever (no randomness there), the low-score fill takes the first
    candidates instead of random ones, and the negatives (with their weights) are repeated up
    to the expected count. No random numbers are drawn.
    """

    def __init__(self, num, pos_fraction, context=None, neg_pos_ub=-1,
                 add_gt_as_proposals=True, k=0.5, bias=0, score_thr=0.05, iou_thr=0.5,
                 **kwargs):
        super().__init__(num, pos_fraction, neg_pos_ub, add_gt_as_proposals)
        if context is None:
            raise ValueError('ScoreHLRSampler needs context=<the RoI head> (it scores the '
                             'negatives); build it through a PISARoIHead')
        for name, value in (('k', k), ('bias', bias), ('score_thr', score_thr),
                            ('iou_thr', iou_thr)):
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise ValueError(f'ScoreHLRSampler {name} must be a number, got {value!r}')
        self.k = k
        self.bias = bias
        self.score_thr = score_thr
        self.iou_thr = iou_thr
        self.context = context
        if not hasattr(context, 'num_stages'):
            self.bbox_roi_extractor = context.bbox_roi_extractor
            self.bbox_head = context.bbox_head
            self.with_shared_head = context.with_shared_head
            if self.with_shared_head:
                self.shared_head = context.shared_head
        else:  # a cascade: the stage being built
            self.bbox_roi_extractor = context.bbox_roi_extractor[context.current_stage]
            self.bbox_head = context.bbox_head[context.current_stage]

    def random_choice(self, gallery, num):
        """``num`` of ``gallery`` at random, on its device (mmdet's draw); at capacity the
        first ``num``."""
        if len(gallery) < num:
            raise ValueError(f'cannot choose {num} of {len(gallery)} elements')
        if self.at_capacity:
            return gallery[:num]
        return gallery[torch.randperm(gallery.numel(), device=gallery.device)[:num]]

    def _sample_pos(self, assign_result, num_expected, **kwargs):
        pos_inds = torch.nonzero(assign_result.gt_inds > 0).flatten()
        if pos_inds.numel() <= num_expected:
            return pos_inds
        return self.random_choice(pos_inds, num_expected)

    def _draw(self, count, num):
        """``num`` of ``range(count)``: mmdet's CPU ``randperm``; at capacity the first."""
        return torch.arange(count)[:num] if self.at_capacity else torch.randperm(count)[:num]

    def _sample_neg(self, assign_result, num_expected, bboxes, feats=None, img_meta=None,
                    **kwargs):
        """``(neg_inds, neg_label_weights)``; ``(empty, None)`` without negatives."""
        neg_inds = torch.nonzero(assign_result.gt_inds == 0).flatten()
        num_neg = neg_inds.size(0)
        if num_neg == 0:
            return neg_inds, None
        with torch.no_grad():
            neg_rois = bbox2roi([bboxes[neg_inds]])
            bbox_result = self.context._bbox_forward(feats, neg_rois)
            cls_score, bbox_pred = bbox_result['cls_score'], bbox_result['bbox_pred']
            ori_loss = self.bbox_head.loss(
                cls_score=cls_score, bbox_pred=None, rois=None,
                labels=neg_inds.new_full((num_neg, ), self.bbox_head.num_classes),
                label_weights=cls_score.new_ones(num_neg), bbox_targets=None,
                bbox_weights=None, reduction_override='none')['loss_cls']
            max_score, argmax_score = cls_score.softmax(-1)[:, :-1].max(-1)
            valid_inds = (max_score > self.score_thr).nonzero().view(-1)
            invalid_inds = (max_score <= self.score_thr).nonzero().view(-1)
            num_valid, num_invalid = valid_inds.size(0), invalid_inds.size(0)
            num_expected = min(num_neg, num_expected)
            num_hlr = min(num_valid, num_expected)
            num_rand = num_expected - num_hlr
            if num_valid == 0:
                weights = cls_score.new_ones(num_expected)
                select_inds = self._draw(num_neg, num_expected)
                return neg_inds[select_inds], weights
            valid_rois = neg_rois[valid_inds]
            valid_max_score = max_score[valid_inds]
            valid_bbox_pred = bbox_pred[valid_inds].view(num_valid, -1, 4)
            selected_bbox_pred = valid_bbox_pred[range(num_valid), argmax_score[valid_inds]]
            pred_bboxes = self.bbox_head.bbox_coder.decode(valid_rois[:, 1:],
                                                           selected_bbox_pred)
            groups = nms_match(torch.cat([pred_bboxes, valid_max_score[:, None]], -1),
                               self.iou_thr)
            # importance: the rank within the group first, the score breaks the ties
            imp = cls_score.new_zeros(num_valid)
            for g in groups:
                g_score = valid_max_score[g]  # already in descending order
                imp[g] = num_valid - g_score.new_tensor(range(g_score.size(0))) + g_score
            _, imp_rank_inds = imp.sort(descending=True)
            _, imp_rank = imp_rank_inds.sort()
            hlr_inds = imp_rank_inds[:num_expected]
            if num_rand > 0:
                rand_inds = self._draw(num_invalid, num_rand)
                select_inds = torch.cat([valid_inds[hlr_inds], invalid_inds[rand_inds]])
            else:
                select_inds = valid_inds[hlr_inds]
            weights = cls_score.new_ones(num_expected)
            up_bound = max(num_expected, num_valid)
            imp_weights = (up_bound - imp_rank[hlr_inds].float()) / up_bound
            weights[:num_hlr] = imp_weights
            weights[num_hlr:] = imp_weights.min()
            weights = (self.bias + (1 - self.bias) * weights).pow(self.k)
            ori_selected_loss = ori_loss[select_inds]
            weights *= ori_selected_loss.sum() / (ori_selected_loss * weights).sum()
            return neg_inds[select_inds], weights

    def sample(self, assign_result, bboxes, gt_bboxes, gt_labels=None, img_meta=None,
               **kwargs):
        """``(SamplingResult, neg_label_weights)`` (None without negatives); ``kwargs``
        (``feats``: each level's features of this image) reach ``_sample_neg``."""
        bboxes = bboxes[:, :4]
        gt_flags = bboxes.new_zeros((bboxes.shape[0], ), dtype=torch.uint8)
        if self.add_gt_as_proposals:
            if gt_labels is None:
                raise ValueError('ScoreHLRSampler with add_gt_as_proposals=True needs gt_labels')
            bboxes = torch.cat([gt_bboxes, bboxes], dim=0)
            assign_result.add_gt_(gt_labels)
            gt_flags = torch.cat([bboxes.new_ones(gt_bboxes.shape[0], dtype=torch.uint8),
                                  gt_flags])
        num_expected_pos = int(self.num * self.pos_fraction)
        pos_inds = self.pos_sampler._sample_pos(assign_result, num_expected_pos,
                                                bboxes=bboxes, **kwargs)
        if self.at_capacity:
            pos_inds = _repeat_to(pos_inds, num_expected_pos)
        num_sampled_pos = pos_inds.numel()
        num_expected_neg = self.num - num_sampled_pos
        if self.neg_pos_ub >= 0:
            num_expected_neg = min(num_expected_neg,
                                   int(self.neg_pos_ub * max(1, num_sampled_pos)))
        neg_inds, neg_label_weights = self.neg_sampler._sample_neg(
            assign_result, num_expected_neg, bboxes, img_meta=img_meta, **kwargs)
        if self.at_capacity and 0 < neg_inds.numel() < num_expected_neg:
            reps = -(-num_expected_neg // neg_inds.numel())
            neg_label_weights = neg_label_weights.repeat(reps)[:num_expected_neg]
            neg_inds = _repeat_to(neg_inds, num_expected_neg)
        return SamplingResult(pos_inds, neg_inds, bboxes, gt_bboxes, assign_result,
                              gt_flags), neg_label_weights
