"""mmdet 2.x ``GIoULoss`` on ``torchvision.ops.generalized_box_iou_loss`` (decoded boxes:
use it with ``reg_decoded_bbox=True``)."""
import torch.nn as nn
from torchvision.ops import generalized_box_iou_loss

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['GIoULoss']


@MODELS.register_module()
class GIoULoss(nn.Module):
    """``1 - GIoU(pred, target)`` per box pair; args ``eps``, ``reduction``, ``loss_weight``.

    ``weight`` may be per box ``[N]`` or per coordinate ``[N, 4]`` (averaged, as mmdet).
    """

    def __init__(self, eps=1e-6, reduction='mean', loss_weight=1.0):
        super().__init__()
        self.eps = eps
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        if weight is not None and not (weight > 0).any():
            if pred.dim() == weight.dim() + 1:
                weight = weight.unsqueeze(1)
            return (pred * weight).sum()  # zero, connected to the graph
        if weight is not None and weight.dim() > 1:
            if weight.shape != pred.shape:
                raise ValueError(f'GIoULoss weight must be [N] or [N, 4] like pred '
                                 f'{tuple(pred.shape)}, got {tuple(weight.shape)}')
            weight = weight.mean(-1)
        if pred.shape != target.shape or pred.shape[-1] != 4:
            raise ValueError(f'pred and target must both be [N, 4], got {tuple(pred.shape)} '
                             f'and {tuple(target.shape)}')
        loss = generalized_box_iou_loss(pred.float(), target.float(), reduction='none',
                                        eps=self.eps)
        return self.loss_weight * weight_reduce_loss(loss, weight, reduction, avg_factor)
