"""mmdet 2.x Generalized Focal Loss (Li et al. 2020): ``QualityFocalLoss`` (a sigmoid focal
loss whose positive target is a soft IoU score instead of 1) and ``DistributionFocalLoss``
(cross entropy of a discretised distance distribution against its two neighbouring bins)."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['QualityFocalLoss', 'DistributionFocalLoss', 'quality_focal_loss',
           'quality_focal_loss_with_prob', 'distribution_focal_loss']


def _qfl(pred, prob, target, beta, bce):
    if not (isinstance(target, (tuple, list)) and len(target) == 2):
        raise ValueError('QualityFocalLoss target must be a (labels [N], scores [N]) pair, '
                         f'got {type(target).__name__}')
    label, score = target
    # every class as a negative: BCE against 0 scaled by p**beta
    loss = bce(pred, pred.new_zeros(pred.shape), reduction='none') * prob.pow(beta)
    pos = ((label >= 0) & (label < pred.size(1))).nonzero().squeeze(1)
    pos_label = label[pos].long()
    pos_score = score[pos].to(pred.dtype)
    # the positive's own class: BCE against its IoU score scaled by |score - p|**beta
    loss[pos, pos_label] = bce(pred[pos, pos_label], pos_score, reduction='none') * \
        (pos_score - prob[pos, pos_label]).abs().pow(beta)
    return loss.sum(dim=1)


@weighted_loss
def quality_focal_loss(pred, target, beta=2.0):
    """``pred [N, C]`` logits, ``target = (labels [N] (C = background), scores [N])`` ->
    ``[N]``."""
    return _qfl(pred, pred.sigmoid(), target, beta, F.binary_cross_entropy_with_logits)


@weighted_loss
def quality_focal_loss_with_prob(pred, target, beta=2.0):
    """:func:`quality_focal_loss` of probabilities (``activated=True``)."""
    return _qfl(pred, pred, target, beta, F.binary_cross_entropy)


@weighted_loss
def distribution_focal_loss(pred, label):
    """``pred [N, n + 1]`` logits over the bins 0..n, ``label [N]`` a distance in [0, n):
    cross entropy with the two bins around it, weighted by closeness."""
    left = label.long()
    right = left + 1
    weight_left = right.to(label.dtype) - label
    weight_right = label - left.to(label.dtype)
    return F.cross_entropy(pred, left, reduction='none') * weight_left + \
        F.cross_entropy(pred, right, reduction='none') * weight_right


@MODELS.register_module()
class QualityFocalLoss(nn.Module):
    """Args (mmdet's): ``use_sigmoid`` (only True), ``beta``, ``reduction``, ``loss_weight``,
    ``activated`` (``pred`` is already a probability)."""

    def __init__(self, use_sigmoid=True, beta=2.0, reduction='mean', loss_weight=1.0,
                 activated=False):
        super().__init__()
        if use_sigmoid is not True:
            raise NotImplementedError(f'QualityFocalLoss supports only use_sigmoid=True, got '
                                      f'{use_sigmoid!r}')
        self.use_sigmoid = use_sigmoid
        self.beta = beta
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight
        self.activated = activated

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        func = quality_focal_loss_with_prob if self.activated else quality_focal_loss
        return self.loss_weight * func(pred, target, weight, beta=self.beta,
                                       reduction=reduction, avg_factor=avg_factor)


@MODELS.register_module()
class DistributionFocalLoss(nn.Module):
    """Args (mmdet's): ``reduction``, ``loss_weight``."""

    def __init__(self, reduction='mean', loss_weight=1.0):
        super().__init__()
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * distribution_focal_loss(
            pred, target, weight, reduction=reduction, avg_factor=avg_factor)
