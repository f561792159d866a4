"""mmdet 2.x ``CrossEntropyLoss``: softmax over classes, per-class sigmoid (binary CE
against one-hot targets where index ``num_classes`` is background), or per-RoI mask BCE on the
channel of the RoI's class (``use_mask=True``, the mask head's loss)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .utils import check_reduction, weight_reduce_loss

__all__ = ['CrossEntropyLoss', 'mask_cross_entropy']


def mask_cross_entropy(pred, target, label, reduction='mean', avg_factor=None,
                       class_weight=None):
    """Binary CE of each RoI's mask logits in the channel of its class, mean over every pixel
    of every RoI, as a 1-element tensor (mmdet 2.x's shape).

    Args:
        pred (Tensor): (N, C, H, W) mask logits.
        target (Tensor): (N, H, W) mask targets in [0, 1] (soft targets allowed).
        label (Tensor): (N, ) the class of each RoI (all 0 for a class-agnostic head).
        class_weight (Tensor | None): (C, ) weight of each class, applied to the RoIs of that
            class. mmdet 2.x passed it as an elementwise weight of the (N, H, W) loss, which
            broadcasts the class weights along the mask width (or fails); here each RoI gets
            its class's weight.

    Only ``reduction='mean'`` without ``avg_factor`` is defined (as in mmdet).
    """
    if reduction != 'mean' or avg_factor is not None:
        raise ValueError(f"mask cross entropy supports reduction='mean' without avg_factor "
                         f'only, got reduction={reduction!r}, avg_factor={avg_factor!r}')
    if pred.dim() < 2 or label.dim() != 1 or label.numel() != pred.size(0):
        raise ValueError(f'mask cross entropy needs pred (N, C, ...) and label (N, ), got '
                         f'pred {tuple(pred.shape)} and label {tuple(label.shape)}')
    rois = torch.arange(pred.size(0), dtype=torch.long, device=pred.device)
    label = label.long()
    pred_slice = pred[rois, label]
    weight = None
    if class_weight is not None:
        weight = class_weight[label].view((-1, ) + (1, ) * (pred_slice.dim() - 1))
    return F.binary_cross_entropy_with_logits(pred_slice, target.type_as(pred_slice),
                                              weight=weight, reduction='mean')[None]


@MODELS.register_module()
class CrossEntropyLoss(nn.Module):
    """Args: ``use_sigmoid``, ``use_mask``, ``reduction``, ``class_weight``,
    ``ignore_index`` (softmax only, default -100), ``loss_weight``, ``avg_non_ignore``.

    With ``use_mask=True`` the call is mmdet's ``loss(mask_pred, mask_targets, labels)``: the
    third argument (``weight`` by position) is the class of each RoI, see
    :func:`mask_cross_entropy`.
    """

    def __init__(self, use_sigmoid=False, use_mask=False, reduction='mean', class_weight=None,
                 ignore_index=None, loss_weight=1.0, avg_non_ignore=False):
        super().__init__()
        if use_sigmoid and use_mask:
            raise ValueError('CrossEntropyLoss takes use_sigmoid=True or use_mask=True, '
                             'not both')
        if use_mask and ignore_index is not None:
            raise ValueError(f'CrossEntropyLoss use_mask=True has no ignore_index, '
                             f'got {ignore_index!r}')
        self.use_sigmoid = use_sigmoid
        self.use_mask = use_mask
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
        if self.use_mask:
            if ignore_index != self.ignore_index:
                raise ValueError(f'CrossEntropyLoss use_mask=True has no ignore_index, '
                                 f'got {ignore_index!r}')
            if weight is None:
                raise ValueError('CrossEntropyLoss use_mask=True needs the class of each RoI: '
                                 'loss(mask_pred, mask_targets, labels)')
            return self.loss_weight * mask_cross_entropy(cls_score, label, weight, reduction,
                                                         avg_factor, class_weight)
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
