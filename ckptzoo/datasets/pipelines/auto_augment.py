"""mmdet 2.x's ``AutoAugment``: one of several policies (lists of transforms) drawn per sample.

DETR and Deformable DETR draw either a multi-scale ``Resize`` or a ``Resize`` ->
``RandomCrop`` -> ``Resize(override=True)``; the ``Swin`` / ``ConvNeXt`` ``ms-crop`` 3x
schedules likewise. The policy is drawn with mmdet's call (``np.random.choice`` over the
policies: one ``randint(0, len(policies))`` of numpy's global generator), before the policy's
own draws, so under the per-sample generator of :mod:`ckptzoo.datasets.sample_seed` it is a
function of (seed, epoch, index) and with numpy seeded alike it is mmdet's draw.
"""
import copy

import numpy as np

from ...registry import TRANSFORMS
from .compose import Compose

__all__ = ['AutoAugment']


@TRANSFORMS.register_module()
class AutoAugment:
    """``policies``: a non-empty list of non-empty lists of transform configs (dicts with a
    ``type``). Each call runs one policy, drawn uniformly, its transforms in order; a
    transform returning ``None`` (a ``RandomCrop`` that kept no box) makes the call return
    ``None``, so the dataset draws another image."""

    def __init__(self, policies):
        if not isinstance(policies, (list, tuple)) or not policies:
            raise ValueError(f'AutoAugment policies must be a non-empty list of policies '
                             f'(lists of transform dicts), got {policies!r}')
        for k, policy in enumerate(policies):
            if not isinstance(policy, (list, tuple)) or not policy:
                raise ValueError(f'AutoAugment policies[{k}] must be a non-empty list of '
                                 f'transform dicts, got {policy!r}')
            for t in policy:
                if not isinstance(t, dict) or 'type' not in t:
                    raise ValueError(f'AutoAugment policies[{k}] holds {t!r}: each '
                                     f"transform must be a dict with a 'type'")
        self.policies = copy.deepcopy([list(p) for p in policies])
        self.transforms = [Compose(copy.deepcopy(p)) for p in self.policies]

    def __call__(self, results):
        transform = self.transforms[np.random.choice(len(self.transforms))]
        return transform(results)

    def __repr__(self):
        return f'{type(self).__name__}(policies={self.policies})'
