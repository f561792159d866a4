"""mmdet 2.x ``MaskPseudoSampler`` (MaskFormer / Mask2Former): keeps every query as the
assigner left it (matched queries positive, the rest negative); nothing is sampled."""
import torch

from ....registry import TASK_UTILS
from .mask_sampling_result import MaskSamplingResult

__all__ = ['MaskPseudoSampler']


@TASK_UTILS.register_module()
class MaskPseudoSampler:
    """All positives (``gt_inds > 0``) and all negatives (``gt_inds == 0``) of the queries."""

    def __init__(self, **kwargs):
        pass

    def sample(self, assign_result, masks, gt_masks, **kwargs):
        """A :class:`MaskSamplingResult` over ``masks`` (``(num_query, H, W)``)."""
        pos_inds = torch.nonzero(assign_result.gt_inds > 0, as_tuple=False).squeeze(-1).unique()
        neg_inds = torch.nonzero(assign_result.gt_inds == 0, as_tuple=False).squeeze(-1).unique()
        gt_flags = masks.new_zeros(masks.shape[0], dtype=torch.uint8)
        return MaskSamplingResult(pos_inds, neg_inds, masks, gt_masks, assign_result, gt_flags)
