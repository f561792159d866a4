"""mmdet 2.x ``GaussianFocalLoss`` (CornerNet / CenterNet): a focal loss against a Gaussian
heatmap target: peaks (target 1) are positives, every other point a negative down-weighted by
``(1 - target) ** gamma`` near a peak."""
import torch.nn as nn

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['GaussianFocalLoss', 'gaussian_focal_loss']


@weighted_loss
def gaussian_focal_loss(pred, gaussian_target, alpha=2.0, gamma=4.0):
    """Elementwise loss of probabilities ``pred`` against ``gaussian_target`` (same shape)."""
    if pred.shape != gaussian_target.shape:
        raise ValueError(f'pred and gaussian_target must have one shape, got '
                         f'{tuple(pred.shape)} and {tuple(gaussian_target.shape)}')
    eps = 1e-12
    pos_weights = gaussian_target.eq(1)
    neg_weights = (1 - gaussian_target).pow(gamma)
    pos_loss = -(pred + eps).log() * (1 - pred).pow(alpha) * pos_weights
    neg_loss = -(1 - pred + eps).log() * pred.pow(alpha) * neg_weights
    return pos_loss + neg_loss


@MODELS.register_module()
class GaussianFocalLoss(nn.Module):
    """Args (mmdet's): ``alpha`` (power of the prediction), ``gamma`` (power of the target's
    complement on negatives), ``reduction``, ``loss_weight``."""

    def __init__(self, alpha=2.0, gamma=4.0, reduction='mean', loss_weight=1.0):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * gaussian_focal_loss(
            pred, target, weight, alpha=self.alpha, gamma=self.gamma, reduction=reduction,
            avg_factor=avg_factor)
