"""What an assigner decided for each prior (mmdet 2.x ``AssignResult``)."""
import torch

__all__ = ['AssignResult']


class AssignResult:
    """Attributes:
        num_gts (int): ground-truth boxes considered.
        gt_inds (LongTensor[N]): per prior, 0 = negative, -1 = ignored, k > 0 = the 1-based
            index of its ground-truth box.
        max_overlaps (Tensor[N]): per prior, its largest IoU with any ground truth.
        labels (LongTensor[N] | None): per prior, its gt's class, -1 when not positive.
    """

    def __init__(self, num_gts, gt_inds, max_overlaps, labels=None):
        self.num_gts = num_gts
        self.gt_inds = gt_inds
        self.max_overlaps = max_overlaps
        self.labels = labels

    @property
    def num_preds(self):
        return len(self.gt_inds)

    def add_gt_(self, gt_labels):
        """Put the ground truths in front of the priors, each assigned to itself with overlap
        1 and its label (what a sampler does when it adds them as proposals)."""
        self_inds = torch.arange(1, len(gt_labels) + 1, dtype=torch.long,
                                 device=gt_labels.device)
        self.gt_inds = torch.cat([self_inds, self.gt_inds])
        self.max_overlaps = torch.cat([self.max_overlaps.new_ones(len(gt_labels)),
                                       self.max_overlaps])
        if self.labels is not None:
            self.labels = torch.cat([gt_labels, self.labels])

    def __repr__(self):
        return (f'AssignResult(num_gts={self.num_gts}, num_preds={self.num_preds}, '
                f'num_pos={int((self.gt_inds > 0).sum())}, '
                f'num_neg={int((self.gt_inds == 0).sum())})')
