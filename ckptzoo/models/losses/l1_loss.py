"""mmdet 2.x ``L1Loss`` and ``SmoothL1Loss`` for box regression."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['L1Loss', 'SmoothL1Loss', 'l1_loss', 'smooth_l1_loss']


def _check_shapes(pred, target):
    if pred.shape != target.shape:
        raise ValueError(f'pred and target must have one shape, got {tuple(pred.shape)} and '
                         f'{tuple(target.shape)}')


@weighted_loss
def l1_loss(pred, target):
    _check_shapes(pred, target)
    return F.l1_loss(pred, target, reduction='none')


@weighted_loss
def smooth_l1_loss(pred, target, beta=1.0):
    """``0.5 * d**2 / beta`` where ``d < beta``, else ``d - 0.5 * beta``."""
    if beta <= 0:
        raise ValueError(f'beta must be positive, got {beta!r}')
    _check_shapes(pred, target)
    return F.smooth_l1_loss(pred, target, reduction='none', beta=beta)


class _RegressionLoss(nn.Module):

    def __init__(self, reduction='mean', loss_weight=1.0):
        super().__init__()
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def _loss(self, pred, target, **kwargs):
        raise NotImplementedError

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        if target.numel() == 0:
            return pred.sum() * 0  # keeps the graph (and DDP) intact with no positives
        return self.loss_weight * self._loss(pred, target, weight=weight, reduction=reduction,
                                             avg_factor=avg_factor)


@MODELS.register_module()
class L1Loss(_RegressionLoss):
    """``|pred - target|``; args ``reduction``, ``loss_weight``."""

    def _loss(self, pred, target, **kwargs):
        return l1_loss(pred, target, **kwargs)


@MODELS.register_module()
class SmoothL1Loss(_RegressionLoss):
    """Huber-style L1 with transition point ``beta``; args ``beta``, ``reduction``,
    ``loss_weight``."""

    def __init__(self, beta=1.0, reduction='mean', loss_weight=1.0):
        super().__init__(reduction, loss_weight)
        if beta <= 0:
            raise ValueError(f'beta must be positive, got {beta!r}')
        self.beta = beta

    def _loss(self, pred, target, **kwargs):
        return smooth_l1_loss(pred, target, beta=self.beta, **kwargs)
