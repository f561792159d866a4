"""mmdet 2.x ``MaskSamplingResult``: a :class:`SamplingResult` over query masks instead of
boxes (``pos_masks``, ``neg_masks``, ``pos_gt_masks``)."""
import torch

from .sampling_result import SamplingResult

__all__ = ['MaskSamplingResult']


class MaskSamplingResult(SamplingResult):
    """Attributes as :class:`SamplingResult`, with ``pos_masks`` / ``neg_masks`` /
    ``pos_gt_masks`` in place of the boxes."""

    def __init__(self, pos_inds, neg_inds, masks, gt_masks, assign_result, gt_flags):
        self.pos_inds = pos_inds
        self.neg_inds = neg_inds
        self.pos_masks = masks[pos_inds]
        self.neg_masks = masks[neg_inds]
        self.pos_is_gt = gt_flags[pos_inds]
        self.num_gts = gt_masks.shape[0]
        self.pos_assigned_gt_inds = assign_result.gt_inds[pos_inds] - 1
        if gt_masks.numel() == 0:
            if self.pos_assigned_gt_inds.numel():
                raise ValueError(f'{self.pos_assigned_gt_inds.numel()} positives assigned to '
                                 'ground-truth masks, but the image has none')
            self.pos_gt_masks = torch.empty_like(gt_masks)
        else:
            self.pos_gt_masks = gt_masks[self.pos_assigned_gt_inds, :]
        self.pos_gt_labels = None if assign_result.labels is None \
            else assign_result.labels[pos_inds]

    @property
    def masks(self):
        """The positive masks, then the negative ones."""
        return torch.cat([self.pos_masks, self.neg_masks])

    @property
    def info(self):
        return dict(pos_inds=self.pos_inds, neg_inds=self.neg_inds,
                    pos_masks=self.pos_masks, neg_masks=self.neg_masks,
                    pos_is_gt=self.pos_is_gt, num_gts=self.num_gts,
                    pos_assigned_gt_inds=self.pos_assigned_gt_inds)

    def __repr__(self):
        return (f'MaskSamplingResult(num_pos={self.pos_inds.numel()}, '
                f'num_neg={self.neg_inds.numel()}, num_gts={self.num_gts})')
