"""mmdet 2.x ``RandomSampler``: a fixed number of RoIs per image, a fraction of them positive.

The draws are mmdet's: positives first, then negatives, each by
``torch.randperm(len(candidates))[:num]`` from torch's default generator, so a seeded run keeps
the same RoIs as mmdet 2.x does.

:attr:`RandomSampler.at_capacity` is for the memory planner: a RoI head's memory grows with the
sampled RoIs (the mask head's with the positives), and an untrained RPN proposes few boxes that
overlap the ground truths, so a probe step would see fewer positives than a trained model gets.
While it is set every image yields the sampler's largest counts;
:func:`~ckptzoo.core.bbox.samplers.set_sampling_at_capacity` sets it on the samplers a model
holds.
"""
import numbers

import numpy as np
import torch

from ....registry import TASK_UTILS
from .sampling_result import SamplingResult

__all__ = ['RandomSampler']


def _repeat_to(inds, count):
    """``inds`` repeated up to ``count`` entries (unchanged if empty or already as many)."""
    if inds.numel() == 0 or inds.numel() >= count:
        return inds
    return inds.repeat(-(-count // inds.numel()))[:count]


@TASK_UTILS.register_module()
class RandomSampler:
    """Sample ``num`` boxes per image, at most ``int(num * pos_fraction)`` of them positive.

    Args:
        num (int): boxes kept per image (fewer when there are fewer candidates).
        pos_fraction (float): the largest share of positives.
        neg_pos_ub (float): at most ``neg_pos_ub * max(1, num_pos)`` negatives; < 0: no bound.
        add_gt_as_proposals (bool): put the ground truths in front of the candidates (as
            positives of themselves) before sampling.

    ``at_capacity`` (False; the memory planner's probe sets it, see
    :func:`~ckptzoo.core.bbox.samplers.set_sampling_at_capacity`): while it is True the sampler
    returns ``int(num * pos_fraction)`` positives (when an image has any) and negatives up to
    ``num`` (within ``neg_pos_ub``), repeating the candidates it has, without drawing random
    numbers: the most RoIs training can see, for measuring memory. Training never runs with it.
    """

    #: yield the largest counts (see the class docstring); set per sampler
    at_capacity = False

    def __init__(self, num, pos_fraction, neg_pos_ub=-1, add_gt_as_proposals=True):
        if not (isinstance(num, numbers.Integral) and not isinstance(num, bool) and num >= 0):
            raise ValueError(f'RandomSampler num must be a non-negative int, got {num!r}')
        if not (isinstance(pos_fraction, numbers.Real) and 0 <= pos_fraction <= 1):
            raise ValueError(f'RandomSampler pos_fraction must be a number in [0, 1], got '
                             f'{pos_fraction!r}')
        if not isinstance(neg_pos_ub, numbers.Real) or isinstance(neg_pos_ub, bool):
            raise ValueError(f'RandomSampler neg_pos_ub must be a number (< 0: no bound), got '
                             f'{neg_pos_ub!r}')
        if not isinstance(add_gt_as_proposals, bool):
            raise ValueError(f'RandomSampler add_gt_as_proposals must be a bool, got '
                             f'{add_gt_as_proposals!r}')
        self.num = int(num)
        self.pos_fraction = pos_fraction
        self.neg_pos_ub = neg_pos_ub
        self.add_gt_as_proposals = add_gt_as_proposals

    @staticmethod
    def random_choice(gallery, num):
        """``num`` elements of ``gallery`` at random (a tensor for a tensor, else an
        ndarray), drawn as mmdet does: ``torch.randperm(len(gallery))[:num]`` on the CPU."""
        if len(gallery) < num:
            raise ValueError(f'cannot choose {num} of {len(gallery)} elements')
        is_tensor = isinstance(gallery, torch.Tensor)
        if not is_tensor:
            gallery = torch.as_tensor(np.asarray(gallery), dtype=torch.long)
        perm = torch.randperm(gallery.numel())[:num].to(device=gallery.device)
        chosen = gallery[perm]
        return chosen if is_tensor else chosen.cpu().numpy()

    def _sample(self, inds, num_expected):
        inds = inds.flatten()
        return inds if inds.numel() <= num_expected else self.random_choice(inds, num_expected)

    def _sample_pos(self, assign_result, num_expected, **kwargs):
        return self._sample(torch.nonzero(assign_result.gt_inds > 0, as_tuple=False),
                            num_expected)

    def _sample_neg(self, assign_result, num_expected, **kwargs):
        return self._sample(torch.nonzero(assign_result.gt_inds == 0, as_tuple=False),
                            num_expected)

    def sample(self, assign_result, bboxes, gt_bboxes, gt_labels=None, **kwargs):
        """A :class:`SamplingResult` of ``bboxes`` (``[N, 4]``, or ``[N, 5]`` proposals whose
        score column is dropped). With ``add_gt_as_proposals`` the ground truths come first
        and ``assign_result`` is extended in place (``add_gt_``), as mmdet does.
        ``kwargs`` (mmdet passes ``feats``) are for samplers that look at features."""
        if bboxes.dim() < 2:
            bboxes = bboxes[None, :]
        bboxes = bboxes[:, :4]
        gt_flags = bboxes.new_zeros((bboxes.shape[0], ), dtype=torch.uint8)
        if self.add_gt_as_proposals and len(gt_bboxes) > 0:
            if gt_labels is None:
                raise ValueError('RandomSampler with add_gt_as_proposals=True needs gt_labels')
            bboxes = torch.cat([gt_bboxes.to(bboxes.dtype), bboxes], dim=0)
            assign_result.add_gt_(gt_labels)
            gt_flags = torch.cat([bboxes.new_ones(gt_bboxes.shape[0], dtype=torch.uint8),
                                  gt_flags])
        num_expected_pos = int(self.num * self.pos_fraction)
        pos_inds = self._sample_pos(assign_result, num_expected_pos, bboxes=bboxes, **kwargs)
        pos_inds = pos_inds.unique()  # mmdet: randperm once returned duplicates
        at_capacity = self.at_capacity
        if at_capacity:
            pos_inds = _repeat_to(pos_inds, num_expected_pos)
        num_sampled_pos = pos_inds.numel()
        num_expected_neg = self.num - num_sampled_pos
        if self.neg_pos_ub >= 0:
            num_expected_neg = min(num_expected_neg,
                                   int(self.neg_pos_ub * max(1, num_sampled_pos)))
        neg_inds = self._sample_neg(assign_result, num_expected_neg, bboxes=bboxes, **kwargs)
        neg_inds = neg_inds.unique()
        if at_capacity:
            neg_inds = _repeat_to(neg_inds, num_expected_neg)
        return SamplingResult(pos_inds, neg_inds, bboxes, gt_bboxes, assign_result, gt_flags)
