"""The positives and negatives a sampler kept for one image (mmdet 2.x ``SamplingResult``)."""
import torch

__all__ = ['SamplingResult']


class SamplingResult:
    """What a sampler kept, indexed into the boxes it sampled from (with the ground truths
    first when the sampler added them as proposals).

    Attributes: ``pos_inds``, ``neg_inds``, ``pos_bboxes``, ``neg_bboxes``, ``pos_is_gt``
    (uint8, 1 for a ground truth added as a proposal), ``num_gts``, ``pos_assigned_gt_inds``
    (0-based), ``pos_gt_bboxes``, ``pos_gt_labels`` (None when the assigner had no labels).
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
            if self.pos_assigned_gt_inds.numel():
                raise ValueError(f'{self.pos_assigned_gt_inds.numel()} positives assigned to '
                                 'ground truths, but the image has none')
            self.pos_gt_bboxes = gt_bboxes.new_zeros((0, 4))
        else:
            self.pos_gt_bboxes = gt_bboxes.view(-1, 4)[self.pos_assigned_gt_inds.long(), :]
        self.pos_gt_labels = None if assign_result.labels is None \
            else assign_result.labels[pos_inds]

    @property
    def bboxes(self):
        """The positive boxes, then the negative ones (the order of the RoIs)."""
        return torch.cat([self.pos_bboxes, self.neg_bboxes])

    def to(self, device):
        """Move every tensor attribute to ``device``, in place; returns self."""
        for key, value in vars(self).items():
            if isinstance(value, torch.Tensor):
                setattr(self, key, value.to(device))
        return self

    @property
    def info(self):
        """The attributes mmdet's ``info`` lists, as a dict."""
        return dict(pos_inds=self.pos_inds, neg_inds=self.neg_inds,
                    pos_bboxes=self.pos_bboxes, neg_bboxes=self.neg_bboxes,
                    pos_is_gt=self.pos_is_gt, num_gts=self.num_gts,
                    pos_assigned_gt_inds=self.pos_assigned_gt_inds)

    def __repr__(self):
        return (f'SamplingResult(num_pos={self.pos_inds.numel()}, '
                f'num_neg={self.neg_inds.numel()}, num_gts={self.num_gts})')
