"""mmdet 2.x sigmoid ``FocalLoss`` on ``torchvision.ops.sigmoid_focal_loss``.

Targets are class indices with ``num_classes`` (= ``pred.size(1)``) meaning background, as
mmdet's dense heads produce them: background anchors are all-zero one-hot rows.
"""
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import sigmoid_focal_loss as tv_sigmoid_focal_loss

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['FocalLoss', 'sigmoid_focal_loss']


def sigmoid_focal_loss(pred, target, weight=None, gamma=2.0, alpha=0.25, reduction='mean',
                       avg_factor=None):
    """``pred [N, C]`` logits; ``target [N]`` indices in ``0..C`` (C = background) or
    ``[N, C]`` binary targets; ``weight`` per sample ``[N]`` or per element ``[N, C]``."""
    if target.dim() == 1:
        num_classes = pred.size(1)
        target = F.one_hot(target.long(), num_classes=num_classes + 1)[:, :num_classes]
    target = target.type_as(pred)
    loss = tv_sigmoid_focal_loss(pred, target, alpha=alpha, gamma=gamma, reduction='none')
    if weight is not None and weight.shape != loss.shape:
        if weight.dim() == 1 and weight.size(0) == loss.size(0):
            weight = weight.view(-1, 1)
        elif weight.numel() == loss.numel():
            weight = weight.view(loss.shape)
        else:
            raise ValueError(f'focal loss weight must be [N] or [N, C] for pred '
                             f'{tuple(pred.shape)}, got {tuple(weight.shape)}')
    return weight_reduce_loss(loss, weight, reduction, avg_factor)


@MODELS.register_module()
class FocalLoss(nn.Module):
    """Focal loss (Lin et al. 2017), mmdet 2.x arguments.

    Args:
        use_sigmoid (bool): only True (the sigmoid form RetinaNet uses) is supported.
        gamma (float): focusing exponent.
        alpha (float): weight of positives (1 - alpha for negatives).
        reduction (str): 'none', 'mean' or 'sum'.
        loss_weight (float): multiplies the loss.
        activated (bool): ``pred`` holds probabilities, not logits (TOOD's scores).
    """

    def __init__(self, use_sigmoid=True, gamma=2.0, alpha=0.25, reduction='mean',
                 loss_weight=1.0, activated=False):
        super().__init__()
        if use_sigmoid is not True:
            raise NotImplementedError(f'FocalLoss supports use_sigmoid=True only, '
                                      f'got {use_sigmoid!r}')
        self.use_sigmoid = use_sigmoid
        self.gamma = gamma
        self.alpha = alpha
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight
        self.activated = activated

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        func = focal_loss_with_prob if self.activated else sigmoid_focal_loss
        return self.loss_weight * func(pred, target, weight, gamma=self.gamma, alpha=self.alpha,
                                       reduction=reduction, avg_factor=avg_factor)


def focal_loss_with_prob(pred, target, weight=None, gamma=2.0, alpha=0.25, reduction='mean',
                         avg_factor=None):
    """:func:`sigmoid_focal_loss` of probabilities ``pred [N, C]`` (mmdet's
    ``py_focal_loss_with_prob``, ``activated=True``): BCE times ``alpha_t * (1 - p_t)**gamma``."""
    if target.dim() == 1:
        num_classes = pred.size(1)
        target = F.one_hot(target.long(), num_classes=num_classes + 1)[:, :num_classes]
    target = target.type_as(pred)
    pt = (1 - pred) * target + pred * (1 - target)
    focal_weight = (alpha * target + (1 - alpha) * (1 - target)) * pt.pow(gamma)
    loss = F.binary_cross_entropy(pred, target, reduction='none') * focal_weight
    if weight is not None and weight.shape != loss.shape:
        if weight.dim() == 1 and weight.size(0) == loss.size(0):
            weight = weight.view(-1, 1)
        elif weight.numel() == loss.numel():
            weight = weight.view(loss.shape)
        else:
            raise ValueError(f'focal loss weight must be [N] or [N, C] for pred '
                             f'{tuple(pred.shape)}, got {tuple(weight.shape)}')
    return weight_reduce_loss(loss, weight, reduction, avg_factor)
