"""Stochastic depth as mmcv 1.x draws it (``mmcv.cnn.bricks.drop.DropPath``): one
``torch.rand`` per sample, ``floor(keep + rand)``, the kept rows scaled by ``1 / keep``.

The draw is mmcv's, not torchvision's ``StochasticDepth`` (``bernoulli_``), so an mmdet /
mmcls model trained from the same seed drops the same samples: audits against them compare
training-mode outputs exactly. Checkpoint units replay the RNG, so recomputes drop the same.
"""
import torch
import torch.nn as nn

__all__ = ['DropPath', 'drop_path']


def drop_path(x, drop_prob=0.0, training=False):
    """``x`` with whole samples (dim 0) zeroed with probability ``drop_prob``, the rest
    scaled by ``1 / (1 - drop_prob)``; ``x`` itself when not training or ``drop_prob == 0``."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    mask = (keep + torch.rand((x.shape[0], ) + (1, ) * (x.ndim - 1), dtype=x.dtype,
                              device=x.device)).floor()
    return x.div(keep) * mask


class DropPath(nn.Module):
    """:func:`drop_path` as a module (mmcv's ``DropPath(drop_prob)``)."""

    def __init__(self, drop_prob=0.1):
        super().__init__()
        if not 0.0 <= float(drop_prob) < 1.0:
            raise ValueError(f'drop_prob must be in [0, 1), got {drop_prob!r}')
        self.drop_prob = float(drop_prob)

    def forward(self, x):
        return drop_path(x, self.drop_prob, self.training)

    def extra_repr(self):
        return f'drop_prob={self.drop_prob}'
