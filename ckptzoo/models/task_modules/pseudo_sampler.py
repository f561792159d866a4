"""mmdet 2.x ``PseudoSampler``: keeps every assigned prior (focal loss needs no sampling)."""
import torch

from ...registry import TASK_UTILS

__all__ = ['PseudoSampler', 'SamplingResult']


class SamplingResult:
    """The positives and negatives of one image, as mmdet 2.x's ``SamplingResult``.

    Attributes: ``pos_inds``, ``neg_inds`` (indices into the priors), ``pos_bboxes``,
    ``neg_bboxes``, ``pos_assigned_gt_inds`` (0-based), ``pos_gt_bboxes``, ``pos_gt_labels``
    (None when the assigner had no labels), ``pos_is_gt``, ``num_gts``.
    """

    def __init__(self, pos_inds, neg_inds, bboxes, gt_bboxes, assign_result, gt_flags):
        self.pos_inds = pos_inds
        self.neg_inds = neg_inds
        self.pos_bboxes = bboxes[pos_inds]
        self.neg_bboxes = bboxes[neg_inds]
        self.pos_is_gt = gt_flags[pos_inds]
        self.num_gts = gt_bboxes.shape[0]
        self.pos_assigned_gt_inds = assign_result.gt_inds[pos_inds] - 1
        if gt_bboxes.numel() == 0:
            self.pos_gt_bboxes = gt_bboxes.new_zeros((0, 4)) if pos_inds.numel() == 0 \
                else gt_bboxes.view(-1, 4)[self.pos_assigned_gt_inds]
        else:
            self.pos_gt_bboxes = gt_bboxes.view(-1, 4)[self.pos_assigned_gt_inds]
        self.pos_gt_labels = None if assign_result.labels is None \
            else assign_result.labels[pos_inds]

    @property
    def bboxes(self):
        return torch.cat([self.pos_bboxes, self.neg_bboxes])

    def __repr__(self):
        return (f'SamplingResult(num_pos={self.pos_inds.numel()}, '
                f'num_neg={self.neg_inds.numel()}, num_gts={self.num_gts})')


@TASK_UTILS.register_module()
class PseudoSampler:
    """All positives (``gt_inds > 0``) and all negatives (``gt_inds == 0``)."""

    def __init__(self, **kwargs):
        pass

    def sample(self, assign_result, bboxes, gt_bboxes, *args, **kwargs):
        pos_inds = torch.nonzero(assign_result.gt_inds > 0, as_tuple=False).squeeze(-1).unique()
        neg_inds = torch.nonzero(assign_result.gt_inds == 0, as_tuple=False).squeeze(-1).unique()
        gt_flags = bboxes.new_zeros(bboxes.shape[0], dtype=torch.uint8)
        return SamplingResult(pos_inds, neg_inds, bboxes, gt_bboxes, assign_result, gt_flags)
