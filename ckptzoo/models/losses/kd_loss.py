"""mmdet 2.x ``KnowledgeDistillationKLDivLoss`` (Hinton et al. 2015): the KL divergence of the
student's softened distribution from the teacher's, both at temperature ``T``, scaled by
``T**2`` so the gradient's size does not depend on ``T``. LD (localization distillation) uses
it on the box-side distributions of GFL heads."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['KnowledgeDistillationKLDivLoss', 'knowledge_distillation_kl_div_loss']


@weighted_loss
def knowledge_distillation_kl_div_loss(pred, soft_label, T, detach_target=True):
    """``pred`` and ``soft_label`` ``[N, n + 1]`` logits -> ``[N]``:
    ``T**2 * mean_j KL(softmax(soft_label / T) || softmax(pred / T))_j`` (mean over the bins,
    as mmdet). ``detach_target``: no gradient into ``soft_label``."""
    if pred.size() != soft_label.size():
        raise ValueError(f'knowledge distillation needs pred and soft_label of one shape, got '
                         f'{tuple(pred.shape)} and {tuple(soft_label.shape)}')
    target = F.softmax(soft_label / T, dim=1)
    if detach_target:
        target = target.detach()
    return F.kl_div(F.log_softmax(pred / T, dim=1), target, reduction='none').mean(1) * (T * T)


@MODELS.register_module()
class KnowledgeDistillationKLDivLoss(nn.Module):
    """Args (mmdet's): ``reduction`` ('none' | 'mean' | 'sum'), ``loss_weight``, ``T`` (the
    temperature, >= 1)."""

    def __init__(self, reduction='mean', loss_weight=1.0, T=10):
        super().__init__()
        if isinstance(T, bool) or not isinstance(T, (int, float)) or T < 1:
            raise ValueError(f'KnowledgeDistillationKLDivLoss T (the temperature) must be a '
                             f'number >= 1, got {T!r}')
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight
        self.T = T

    def forward(self, pred, soft_label, weight=None, avg_factor=None, reduction_override=None):
        """``pred`` the student's logits, ``soft_label`` the teacher's, ``[N, n + 1]``."""
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * knowledge_distillation_kl_div_loss(
            pred, soft_label, weight, reduction=reduction, avg_factor=avg_factor, T=self.T)
