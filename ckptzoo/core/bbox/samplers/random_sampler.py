"""mmdet 2.x ``RandomSampler``: a fixed number of RoIs per image, a fraction of them positive.

The draws are mmdet's: positives first, then negatives, each by
``torch.randperm(len(candidates))[:num]`` from torch's default generator, so a seeded run keeps
the same RoIs as mmdet 2.x does.

:attr:`~BaseSampler.at_capacity` is for the memory planner: a RoI head's memory grows with the
sampled RoIs (the mask head's with the positives), and an untrained RPN proposes few boxes that
overlap the ground truths, so a probe step would see fewer positives than a trained model gets.
While it is set every image yields the sampler's largest counts;
:func:`~ckptzoo.core.bbox.samplers.set_sampling_at_capacity` sets it on the samplers a model
holds.
"""
import numpy as np
import torch

from ....registry import TASK_UTILS
from .base_sampler import BaseSampler

__all__ = ['RandomSampler']


@TASK_UTILS.register_module()
class RandomSampler(BaseSampler):
    """Sample ``num`` boxes per image, at most ``int(num * pos_fraction)`` of them positive,
    at random; args as :class:`BaseSampler` (``num``, ``pos_fraction``, ``neg_pos_ub``,
    ``add_gt_as_proposals``, ``**kwargs`` ignored)."""

    def random_choice(self, gallery, num):
        """``num`` elements of ``gallery`` at random (a tensor for a tensor, else an
        ndarray), drawn as mmdet does: ``torch.randperm(len(gallery))[:num]`` on the CPU.
        At capacity the first ``num``, drawing nothing."""
        if len(gallery) < num:
            raise ValueError(f'cannot choose {num} of {len(gallery)} elements')
        is_tensor = isinstance(gallery, torch.Tensor)
        if not is_tensor:
            gallery = torch.as_tensor(np.asarray(gallery), dtype=torch.long)
        if self.at_capacity:
            chosen = gallery[:num]
        else:
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
