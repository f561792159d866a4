"""mmdet 2.x ``PseudoSampler``: keeps every assigned prior (focal loss needs no sampling)."""
import torch

from ....registry import TASK_UTILS
from .sampling_result import SamplingResult

__all__ = ['PseudoSampler', 'SamplingResult']


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
