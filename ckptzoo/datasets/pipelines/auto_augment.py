"""mmdet 2.x's ``AutoAugment``: one of several augmentation policies, drawn per image (DETR's
resize-or-resize-crop-resize training pipelines)."""
import copy

import numpy as np

from ...registry import TRANSFORMS
from .compose import Compose

__all__ = ['AutoAugment']


@TRANSFORMS.register_module()
class AutoAugment:
    """``policies``: a non-empty list of non-empty lists of transform configs; each call runs
    one policy, chosen uniformly (``np.random``, as mmdet), as a :class:`Compose`."""

    def __init__(self, policies):
        if not isinstance(policies, list) or not policies:
            raise ValueError(f'AutoAugment policies must be a non-empty list, got {policies!r}')
        for i, policy in enumerate(policies):
            if not isinstance(policy, list) or not policy or \
                    not all(isinstance(t, dict) and 'type' in t for t in policy):
                raise ValueError(f'AutoAugment policies[{i}] must be a non-empty list of '
                                 f'transform dicts with a "type", got {policy!r}')
        self.policies = copy.deepcopy(policies)
        self.transforms = [Compose(policy) for policy in self.policies]

    def __call__(self, results):
        return self.transforms[np.random.randint(len(self.transforms))](results)

    def __repr__(self):
        return f'{self.__class__.__name__}(policies={self.policies})'
