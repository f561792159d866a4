"""mmdet 2.x ``DiceLoss`` (SOLO, MaskFormer, ...): one loss per mask, ``1 - dice`` between
the flattened prediction and its binary target.

Two forms, as mmdet: V-Net's (squared terms in the denominator, ``eps`` added to each sum)
and, with ``naive_dice=True``, the first-power form ``(2ab + eps) / (a + b + eps)``."""
import torch
import torch.nn as nn

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['DiceLoss', 'dice_loss']


def dice_loss(pred, target, weight=None, eps=1e-3, reduction='mean', naive_dice=False,
              avg_factor=None):
    """``pred`` (n, *) probabilities, ``target`` (n, *) of the same element count per mask;
    ``weight`` (n,) one per mask. Returns the per-mask loss reduced as asked."""
    if pred.size(0) != target.size(0):
        raise ValueError(f'pred and target must hold as many masks, got {pred.size(0)} and '
                         f'{target.size(0)}')
    pred = pred.flatten(1)
    target = target.flatten(1).float()
    if pred.shape != target.shape:
        raise ValueError(f'pred and target masks must have one size, got '
                         f'{tuple(pred.shape)} and {tuple(target.shape)} flattened')
    inter = (pred * target).sum(1)
    if naive_dice:
        dice = (2 * inter + eps) / (pred.sum(1) + target.sum(1) + eps)
    else:
        # each sum takes its eps in its own dtype first (the target is float32), as mmdet
        dice = 2 * inter / (((pred * pred).sum(1) + eps) + ((target * target).sum(1) + eps))
    loss = 1 - dice
    if weight is not None and (weight.dim() != 1 or len(weight) != len(loss)):
        raise ValueError(f'weight must be one value per mask ({len(loss)},), got '
                         f'{tuple(weight.shape)}')
    return weight_reduce_loss(loss, weight, reduction, avg_factor)


@MODELS.register_module()
class DiceLoss(nn.Module):
    """Args (mmdet's): ``use_sigmoid`` (only the sigmoid activation exists, as in mmdet),
    ``activate`` (False: ``pred`` is already a probability), ``reduction``, ``naive_dice``,
    ``loss_weight``, ``eps``.

    mmdet raised a bare ``NotImplementedError`` at the first forward for
    ``use_sigmoid=False, activate=True``; here the constructor refuses it, naming the args."""

    def __init__(self, use_sigmoid=True, activate=True, reduction='mean', naive_dice=False,
                 loss_weight=1.0, eps=1e-3):
        super().__init__()
        if activate and not use_sigmoid:
            raise ValueError('DiceLoss: activate=True needs use_sigmoid=True (a softmax '
                             'activation is not implemented, as in mmdet); give '
                             'activate=False for probabilities')
        self.use_sigmoid = use_sigmoid
        self.activate = activate
        self.reduction = check_reduction(reduction)
        self.naive_dice = naive_dice
        self.loss_weight = loss_weight
        self.eps = eps

    def forward(self, pred, target, weight=None, reduction_override=None, avg_factor=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        if self.activate:
            pred = pred.sigmoid()
        return self.loss_weight * dice_loss(pred, target, weight, eps=self.eps,
                                            reduction=reduction, naive_dice=self.naive_dice,
                                            avg_factor=avg_factor)
