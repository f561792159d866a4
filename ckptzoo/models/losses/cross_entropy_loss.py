"""mmdet 2.x ``CrossEntropyLoss``: softmax over classes, or per-class sigmoid (binary CE
against one-hot targets where index ``num_classes`` is background)."""
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['CrossEntropyLoss']


@MODELS.register_module()
class CrossEntropyLoss(nn.Module):
    """Args: ``use_sigmoid``, ``use_mask`` (unsupported), ``reduction``, ``class_weight``,
    ``ignore_index`` (softmax only, default -100), ``loss_weight``, ``avg_non_ignore``."""

    def __init__(self, use_sigmoid=False, use_mask=False, reduction='mean', class_weight=None,
                 ignore_index=None, loss_weight=1.0, avg_non_ignore=False):
        super().__init__()
        if use_mask:
            raise NotImplementedError('CrossEntropyLoss use_mask=True is not supported')
        self.use_sigmoid = use_sigmoid
        self.reduction = check_reduction(reduction)
        self.class_weight = class_weight
        self.ignore_index = -100 if ignore_index is None else ignore_index
        self.loss_weight = loss_weight
        self.avg_non_ignore = avg_non_ignore

    def forward(self, cls_score, label, weight=None, avg_factor=None, reduction_override=None,
                ignore_index=None):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        ignore_index = self.ignore_index if ignore_index is None else ignore_index
        class_weight = None if self.class_weight is None \
            else cls_score.new_tensor(self.class_weight)
        if weight is not None:
            weight = weight.float()
        if self.use_sigmoid:
            if cls_score.dim() != label.dim():
                num_classes = cls_score.size(-1)
                valid = (label >= 0) & (label != ignore_index)
                target = F.one_hot(label.clamp(min=0).long(), num_classes + 1)[..., :num_classes]
                target = target * valid[..., None]
                valid_w = valid[..., None].expand_as(cls_score).float()
                weight = valid_w if weight is None else valid_w * (
                    weight[..., None] if weight.dim() == label.dim() else weight)
            else:
                target = label
            loss = F.binary_cross_entropy_with_logits(cls_score, target.type_as(cls_score),
                                                      pos_weight=class_weight, reduction='none')
        else:
            loss = F.cross_entropy(cls_score, label.long(), weight=class_weight,
                                   reduction='none', ignore_index=ignore_index)
            if avg_factor is None and self.avg_non_ignore and reduction == 'mean':
                avg_factor = (label != ignore_index).sum().item()
        return self.loss_weight * weight_reduce_loss(loss, weight, reduction, avg_factor)
