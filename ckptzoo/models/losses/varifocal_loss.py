"""mmdet 2.x ``VarifocalLoss`` (Zhang et al. 2021, VarifocalNet): a binary cross-entropy on an
IoU-aware classification target ``q`` (the IoU with the gt at the positives' class, 0
elsewhere). Positives weigh ``q`` (``iou_weighted``) or 1; negatives are down-weighted as in
the focal loss, ``alpha * |p - q| ** gamma``."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['VarifocalLoss', 'varifocal_loss']


def varifocal_loss(pred, target, weight=None, alpha=0.75, gamma=2.0, iou_weighted=True,
                   reduction='mean', avg_factor=None):
    """``pred [N, C]`` logits, ``target [N, C]`` IoU-aware targets in ``[0, 1]``."""
    if pred.size() != target.size():
        raise ValueError(f'varifocal_loss needs pred and target of one shape, got '
                         f'{tuple(pred.size())} and {tuple(target.size())}')
    pred_sigmoid = pred.sigmoid()
    target = target.type_as(pred)
    positive = (target > 0.0).float()
    negative_weight = alpha * (pred_sigmoid - target).abs().pow(gamma) * \
        (target <= 0.0).float()
    focal_weight = (target * positive if iou_weighted else positive) + negative_weight
    loss = F.binary_cross_entropy_with_logits(pred, target, reduction='none') * focal_weight
    return weight_reduce_loss(loss, weight, reduction, avg_factor)


@MODELS.register_module()
class VarifocalLoss(nn.Module):
    """Args (mmdet 2.x's):
        use_sigmoid (bool): only True is supported (as mmdet).
        alpha (float): the negatives' balance, >= 0.
        gamma (float): the negatives' focusing exponent.
        iou_weighted (bool): weigh the positives by their target IoU.
        reduction (str): 'none', 'mean' or 'sum'.
        loss_weight (float): multiplies the loss.
    """

    def __init__(self, use_sigmoid=True, alpha=0.75, gamma=2.0, iou_weighted=True,
                 reduction='mean', loss_weight=1.0):
        super().__init__()
        if use_sigmoid is not True:
            raise NotImplementedError(f'VarifocalLoss supports use_sigmoid=True only (as '
                                      f'mmdet), got {use_sigmoid!r}')
        if not alpha >= 0.0:
            raise ValueError(f'VarifocalLoss alpha must be >= 0, got {alpha!r}')
        self.use_sigmoid = use_sigmoid
        self.alpha = alpha
        self.gamma = gamma
        self.iou_weighted = iou_weighted
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * varifocal_loss(
            pred, target, weight, alpha=self.alpha, gamma=self.gamma,
            iou_weighted=self.iou_weighted, reduction=reduction, avg_factor=avg_factor)
