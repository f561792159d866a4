"""mmdet 2.x ``BalancedL1Loss`` (Libra R-CNN, arXiv:1904.02701): an L1 whose gradient is
raised for the inliers (``|d| < beta``) so that they balance the outliers' large gradients."""
import numbers

import numpy as np
import torch
import torch.nn as nn

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['BalancedL1Loss', 'balanced_l1_loss']


@weighted_loss
def balanced_l1_loss(pred, target, beta=1.0, alpha=0.5, gamma=1.5):
    """With ``b = e**(gamma / alpha) - 1``: ``alpha / b * (b|d| + 1) * log(b|d| / beta + 1)
    - alpha|d|`` where ``|d| < beta``, else ``gamma|d| + gamma / b - alpha * beta``."""
    if not beta > 0:
        raise ValueError(f'beta must be positive, got {beta!r}')
    if target.numel() == 0:
        return pred.sum() * 0
    if pred.size() != target.size():
        raise ValueError(f'pred and target must have one shape, got {tuple(pred.shape)} and '
                         f'{tuple(target.shape)}')
    diff = torch.abs(pred - target)
    b = np.e ** (gamma / alpha) - 1
    inlier = alpha / b * (b * diff + 1) * torch.log(b * diff / beta + 1) - alpha * diff
    outlier = gamma * diff + gamma / b - alpha * beta
    return torch.where(diff < beta, inlier, outlier)


@MODELS.register_module()
class BalancedL1Loss(nn.Module):
    """Args (mmdet's): ``alpha`` (0.5), ``gamma`` (1.5), ``beta`` (1.0, the inlier bound),
    ``reduction``, ``loss_weight``."""

    def __init__(self, alpha=0.5, gamma=1.5, beta=1.0, reduction='mean', loss_weight=1.0):
        super().__init__()
        for name, value in (('alpha', alpha), ('gamma', gamma), ('beta', beta)):
            if not (isinstance(value, numbers.Real) and value > 0):
                raise ValueError(f'BalancedL1Loss {name} must be a positive number, got '
                                 f'{value!r}')
        self.alpha = alpha
        self.gamma = gamma
        self.beta = beta
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None,
                **kwargs):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * balanced_l1_loss(
            pred, target, weight, alpha=self.alpha, gamma=self.gamma, beta=self.beta,
            reduction=reduction, avg_factor=avg_factor, **kwargs)
