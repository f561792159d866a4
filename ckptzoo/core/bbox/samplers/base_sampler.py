"""mmdet 2.x ``BaseSampler``: the sampling every RoI sampler shares (ground truths added as
proposals, positives then negatives, each deduplicated), and the planner's capacity flag.

A sampler draws its positives with ``self.pos_sampler._sample_pos`` and its negatives with
``self.neg_sampler._sample_neg`` (both ``self``, but for :class:`CombinedSampler`), as mmdet.
"""
import numbers

import torch

from .sampling_result import SamplingResult

__all__ = ['BaseSampler']


def _repeat_to(inds, count):
    """``inds`` repeated up to ``count`` entries (unchanged if empty or already as many)."""
    if inds.numel() == 0 or inds.numel() >= count:
        return inds
    return inds.repeat(-(-count // inds.numel()))[:count]


class BaseSampler:
    """Args (mmdet's): ``num`` (boxes kept per image), ``pos_fraction`` (the largest share of
    positives), ``neg_pos_ub`` (at most ``neg_pos_ub * max(1, num_pos)`` negatives; < 0: no
    bound), ``add_gt_as_proposals``; other keyword arguments (the RoI head's ``context``) are
    accepted and ignored, as mmdet's.

    ``at_capacity`` (False; the memory planner's probe sets it, see
    :func:`~ckptzoo.core.bbox.samplers.set_sampling_at_capacity`): while it is True the sampler
    returns ``int(num * pos_fraction)`` positives (when an image has any) and negatives up to
    ``num`` (within ``neg_pos_ub``), repeating the candidates it has, and draws no random
    numbers (:meth:`RandomSampler.random_choice` takes the first candidates): the most RoIs
    training can see, for measuring memory. Training never runs with it.
    """

    #: yield the largest counts (see the class docstring); set per sampler
    at_capacity = False

    def __init__(self, num, pos_fraction, neg_pos_ub=-1, add_gt_as_proposals=True, **kwargs):
        name = type(self).__name__
        if not (isinstance(num, numbers.Integral) and not isinstance(num, bool) and num >= 0):
            raise ValueError(f'{name} num must be a non-negative int, got {num!r}')
        if not (isinstance(pos_fraction, numbers.Real) and 0 <= pos_fraction <= 1):
            raise ValueError(f'{name} pos_fraction must be a number in [0, 1], got '
                             f'{pos_fraction!r}')
        if not isinstance(neg_pos_ub, numbers.Real) or isinstance(neg_pos_ub, bool):
            raise ValueError(f'{name} neg_pos_ub must be a number (< 0: no bound), got '
                             f'{neg_pos_ub!r}')
        if not isinstance(add_gt_as_proposals, bool):
            raise ValueError(f'{name} add_gt_as_proposals must be a bool, got '
                             f'{add_gt_as_proposals!r}')
        self.num = int(num)
        self.pos_fraction = pos_fraction
        self.neg_pos_ub = neg_pos_ub
        self.add_gt_as_proposals = add_gt_as_proposals
        self.pos_sampler = self
        self.neg_sampler = self

    def _sample_pos(self, assign_result, num_expected, **kwargs):
        raise NotImplementedError

    def _sample_neg(self, assign_result, num_expected, **kwargs):
        raise NotImplementedError

    def sample(self, assign_result, bboxes, gt_bboxes, gt_labels=None, **kwargs):
        """A :class:`SamplingResult` of ``bboxes`` (``[N, 4]``, or ``[N, 5]`` proposals whose
        score column is dropped). With ``add_gt_as_proposals`` the ground truths come first
        and ``assign_result`` is extended in place (``add_gt_``), as mmdet does.
        ``kwargs`` (the RoI heads pass ``feats``, each level's features of this image) go
        to ``_sample_pos`` / ``_sample_neg``."""
        if bboxes.dim() < 2:
            bboxes = bboxes[None, :]
        bboxes = bboxes[:, :4]
        gt_flags = bboxes.new_zeros((bboxes.shape[0], ), dtype=torch.uint8)
        if self.add_gt_as_proposals and len(gt_bboxes) > 0:
            if gt_labels is None:
                raise ValueError(f'{type(self).__name__} with add_gt_as_proposals=True needs '
                                 'gt_labels')
            bboxes = torch.cat([gt_bboxes.to(bboxes.dtype), bboxes], dim=0)
            assign_result.add_gt_(gt_labels)
            gt_flags = torch.cat([bboxes.new_ones(gt_bboxes.shape[0], dtype=torch.uint8),
                                  gt_flags])
        at_capacity = self.at_capacity
        num_expected_pos = int(self.num * self.pos_fraction)
        pos_inds = self.pos_sampler._sample_pos(assign_result, num_expected_pos, bboxes=bboxes,
                                                **kwargs)
        pos_inds = pos_inds.unique()  # mmdet: a sampler may return duplicates
        if at_capacity:
            pos_inds = _repeat_to(pos_inds, num_expected_pos)
        num_sampled_pos = pos_inds.numel()
        num_expected_neg = self.num - num_sampled_pos
        if self.neg_pos_ub >= 0:
            num_expected_neg = min(num_expected_neg,
                                   int(self.neg_pos_ub * max(1, num_sampled_pos)))
        neg_inds = self.neg_sampler._sample_neg(assign_result, num_expected_neg, bboxes=bboxes,
                                                **kwargs)
        neg_inds = neg_inds.unique()
        if at_capacity:
            neg_inds = _repeat_to(neg_inds, num_expected_neg)
        return SamplingResult(pos_inds, neg_inds, bboxes, gt_bboxes, assign_result, gt_flags)
