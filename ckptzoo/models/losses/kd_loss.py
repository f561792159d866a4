"""mmdet 2.x ``KnowledgeDistillationKLDivLoss`` (LD, Zheng et al. 2022): the KL divergence of
the student's temperature-``T`` softmax from the teacher's (detached by default), averaged over
the last dimension's bins and scaled by ``T^2``."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['KnowledgeDistillationKLDivLoss', 'knowledge_distillation_kl_div_loss']


@weighted_loss
def knowledge_distillation_kl_div_loss(pred, soft_label, T, detach_target=True):
    """Per row of ``pred`` / ``soft_label`` ``[N, n]``: ``T^2 * mean(KL(softmax(soft/T) ||
    softmax(pred/T)))`` over the bins."""
    if pred.size() != soft_label.size():
        raise ValueError(f'pred and soft_label must have one shape, got {tuple(pred.size())} '
                         f'and {tuple(soft_label.size())}')
    target = F.softmax(soft_label / T, dim=1)
    if detach_target:
        target = target.detach()
    return F.kl_div(F.log_softmax(pred / T, dim=1), target, reduction='none').mean(1) * (T * T)


@MODELS.register_module()
class KnowledgeDistillationKLDivLoss(nn.Module):
    """Args (mmdet's): ``reduction``, ``loss_weight``, ``T`` (temperature, >= 1)."""

    def __init__(self, reduction='mean', loss_weight=1.0, T=10):
        super().__init__()
        if T < 1:
            raise ValueError(f'KnowledgeDistillationKLDivLoss T must be >= 1, got {T!r}')
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight
        self.T = T

    def forward(self, pred, soft_label, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        return self.loss_weight * knowledge_distillation_kl_div_loss(
            pred, soft_label, weight, reduction=reduction, avg_factor=avg_factor, T=self.T)
