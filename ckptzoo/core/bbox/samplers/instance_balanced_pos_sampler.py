"""mmdet 2.x ``InstanceBalancedPosSampler`` (Libra R-CNN): positives spread evenly over the
ground truths they match, so that large objects do not take all of them."""
import torch

from ....registry import TASK_UTILS
from .random_sampler import RandomSampler

__all__ = ['InstanceBalancedPosSampler']


@TASK_UTILS.register_module()
class InstanceBalancedPosSampler(RandomSampler):
    """Args as :class:`RandomSampler`. With more positives than wanted, each ground truth
    keeps at most ``round(num_expected / num_gts) + 1`` of its own (at random), then the
    others fill up or the kept ones are cut down to ``num_expected`` (at random).

    One fix over mmdet: its fill-up took its candidates from a set difference of 0-d tensors,
    which hash by identity, so it removed nothing (the fill could repeat kept positives, which
    ``unique`` then dropped, leaving fewer positives) and ran in an order that varied from run
    to run; here the fill-up draws from the positives not kept, in index order.
    """

    def _sample_pos(self, assign_result, num_expected, **kwargs):
        gt_inds = assign_result.gt_inds
        pos_inds = torch.nonzero(gt_inds > 0, as_tuple=False).flatten()
        if pos_inds.numel() <= num_expected:
            return pos_inds
        unique_gt_inds = gt_inds[pos_inds].unique()
        num_per_gt = int(round(num_expected / float(len(unique_gt_inds))) + 1)
        sampled = []
        for i in unique_gt_inds:
            inds = torch.nonzero(gt_inds == i.item(), as_tuple=False).flatten()
            if len(inds) > num_per_gt:
                inds = self.random_choice(inds, num_per_gt)
            sampled.append(inds)
        sampled = torch.cat(sampled)
        if len(sampled) < num_expected:
            num_extra = num_expected - len(sampled)
            extra = pos_inds[~torch.isin(pos_inds, sampled)]
            if len(extra) > num_extra:
                extra = self.random_choice(extra, num_extra)
            sampled = torch.cat([sampled, extra.to(sampled.device).long()])
        elif len(sampled) > num_expected:
            sampled = self.random_choice(sampled, num_expected)
        return sampled
