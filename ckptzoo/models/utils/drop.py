"""mmcv's ``DropPath`` (stochastic depth per sample). The mask comes from the global RNG, which
the checkpoint wrapper restores for the recompute, so a checkpointed block drops the same
samples in its forward and its recompute."""
import torch
import torch.nn as nn

__all__ = ['DropPath', 'drop_path']


def drop_path(x, drop_prob=0., training=False):
    """Zero whole samples with probability ``drop_prob`` and scale the rest by
    ``1 / (1 - drop_prob)``; one ``torch.rand`` of shape ``(N, 1, ...)``, as mmcv draws it."""
    if drop_prob == 0. or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0], ) + (1, ) * (x.ndim - 1)
    mask = (keep_prob + torch.rand(shape, dtype=x.dtype, device=x.device)).floor()
    return x.div(keep_prob) * mask


class DropPath(nn.Module):
    """Module form of :func:`drop_path` (mmcv's ``DropPath(drop_prob=0.1)``)."""

    def __init__(self, drop_prob=0.1):
        super().__init__()
        if not 0 <= drop_prob < 1:
            raise ValueError(f'drop_prob must be in [0, 1), got {drop_prob!r}')
        self.drop_prob = drop_prob

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)
