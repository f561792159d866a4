"""mmdet 2.x's IoU-family box losses (``IoULoss``, ``BoundedIoULoss``, ``GIoULoss``,
``DIoULoss``, ``CIoULoss``) on decoded ``[N, 4]`` x1y1x2y2 boxes: use them with
``reg_decoded_bbox=True``.

The overlaps are mmdet's aligned ``bbox_overlaps`` (union and enclosing area clamped from
below by ``eps``), not torchvision's ``*_box_iou_loss`` (which adds ``eps`` to the
denominators), so the values and gradients are mmdet's.
"""
import math
import warnings

import torch
import torch.nn as nn

from ...registry import MODELS
from .utils import check_reduction, weighted_loss

__all__ = ['IoULoss', 'BoundedIoULoss', 'GIoULoss', 'DIoULoss', 'CIoULoss', 'iou_loss',
           'bounded_iou_loss', 'giou_loss', 'diou_loss', 'ciou_loss', 'aligned_overlaps']

IOU_MODES = ('linear', 'square', 'log')


def _check_boxes(pred, target):
    if pred.shape != target.shape or pred.shape[-1] != 4:
        raise ValueError(f'pred and target must both be [N, 4], got {tuple(pred.shape)} and '
                         f'{tuple(target.shape)}')


def aligned_overlaps(pred, target, mode='iou', eps=1e-6):
    """IoU (or GIoU with ``mode='giou'``) of each box of ``pred [..., 4]`` with the box of
    ``target`` at the same index: mmdet's ``bbox_overlaps(..., is_aligned=True)``."""
    if mode not in ('iou', 'giou'):
        raise ValueError(f"mode must be 'iou' or 'giou', got {mode!r}")
    if pred.shape[-2] == 0:
        return pred.new_zeros(pred.shape[:-1])
    area1 = (pred[..., 2] - pred[..., 0]) * (pred[..., 3] - pred[..., 1])
    area2 = (target[..., 2] - target[..., 0]) * (target[..., 3] - target[..., 1])
    wh = (torch.min(pred[..., 2:], target[..., 2:]) -
          torch.max(pred[..., :2], target[..., :2])).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]
    eps = pred.new_tensor([eps])
    union = torch.max(area1 + area2 - overlap, eps)
    ious = overlap / union
    if mode == 'iou':
        return ious
    enclose = (torch.max(pred[..., 2:], target[..., 2:]) -
               torch.min(pred[..., :2], target[..., :2])).clamp(min=0)
    enclose_area = torch.max(enclose[..., 0] * enclose[..., 1], eps)
    return ious - (enclose_area - union) / enclose_area


@weighted_loss
def iou_loss(pred, target, linear=False, mode='log', eps=1e-6):
    """``1 - IoU`` (linear), ``1 - IoU**2`` (square) or ``-log IoU`` (log), IoU clamped to
    ``eps`` from below; ``linear=True`` is mmdet's deprecated spelling of ``mode='linear'``."""
    if mode not in IOU_MODES:
        raise ValueError(f'mode must be one of {", ".join(IOU_MODES)}, got {mode!r}')
    if linear:
        mode = 'linear'
    _check_boxes(pred, target)
    ious = aligned_overlaps(pred, target).clamp(min=eps)
    if mode == 'linear':
        return 1 - ious
    if mode == 'square':
        return 1 - ious ** 2
    return -ious.log()


@weighted_loss
def bounded_iou_loss(pred, target, beta=0.2, eps=1e-3):
    """Bounded IoU (Fitness NMS, arXiv:1711.00164): per box the bounds of the IoU reachable by
    moving only the centre x / y or only the width / height, through a smooth L1 with
    transition ``beta``; ``[N, 4]``. Gradients flow through ``pred`` only."""
    _check_boxes(pred, target)
    pxy = (pred[:, :2] + pred[:, 2:]) * 0.5
    pwh = pred[:, 2:] - pred[:, :2]
    with torch.no_grad():
        txy = (target[:, :2] + target[:, 2:]) * 0.5
        twh = target[:, 2:] - target[:, :2]
    dxy = (txy - pxy).abs()
    loss_xy = 1 - torch.max((twh - 2 * dxy) / (twh + 2 * dxy + eps), torch.zeros_like(dxy))
    loss_wh = 1 - torch.min(twh / (pwh + eps), pwh / (twh + eps))
    loss = torch.cat([loss_xy, loss_wh], dim=-1)  # dx, dy, dw, dh
    return torch.where(loss < beta, 0.5 * loss * loss / beta, loss - 0.5 * beta)


@weighted_loss
def giou_loss(pred, target, eps=1e-7):
    """``1 - GIoU`` (arXiv:1902.09630)."""
    _check_boxes(pred, target)
    return 1 - aligned_overlaps(pred, target, mode='giou', eps=eps)


def _distance_terms(pred, target, eps):
    """IoU, squared centre distance and squared enclosing diagonal, as DIoU / CIoU use them
    (``eps`` added to the union and the diagonal)."""
    wh = (torch.min(pred[:, 2:], target[:, 2:]) -
          torch.max(pred[:, :2], target[:, :2])).clamp(min=0)
    overlap = wh[:, 0] * wh[:, 1]
    area_p = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    area_t = (target[:, 2] - target[:, 0]) * (target[:, 3] - target[:, 1])
    ious = overlap / (area_p + area_t - overlap + eps)
    enclose = (torch.max(pred[:, 2:], target[:, 2:]) -
               torch.min(pred[:, :2], target[:, :2])).clamp(min=0)
    c2 = enclose[:, 0] ** 2 + enclose[:, 1] ** 2 + eps
    centre = (target[:, :2] + target[:, 2:]) - (pred[:, :2] + pred[:, 2:])
    rho2 = centre[:, 0] ** 2 / 4 + centre[:, 1] ** 2 / 4
    return ious, rho2, c2


@weighted_loss
def diou_loss(pred, target, eps=1e-7):
    """``1 - DIoU``: IoU less the squared centre distance over the squared diagonal of the
    enclosing box (arXiv:1911.08287)."""
    _check_boxes(pred, target)
    ious, rho2, c2 = _distance_terms(pred, target, eps)
    return 1 - (ious - rho2 / c2)


@weighted_loss
def ciou_loss(pred, target, eps=1e-7):
    """``1 - CIoU``: DIoU less ``alpha * v``, ``v`` the aspect-ratio consistency and
    ``alpha`` (no gradient; 0 where IoU <= 0.5) its trade-off (arXiv:2005.03572); CIoU is
    clamped to [-1, 1]."""
    _check_boxes(pred, target)
    ious, rho2, c2 = _distance_terms(pred, target, eps)
    w1, h1 = pred[:, 2] - pred[:, 0], pred[:, 3] - pred[:, 1] + eps
    w2, h2 = target[:, 2] - target[:, 0], target[:, 3] - target[:, 1] + eps
    v = (4 / math.pi ** 2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
    with torch.no_grad():
        alpha = (ious > 0.5).float() * v / (1 - ious + v)
    return 1 - (ious - (rho2 / c2 + alpha * v)).clamp(min=-1.0, max=1.0)


class _IoUFamilyLoss(nn.Module):
    """The forward the family shares: all-zero ``weight`` gives a zero that keeps the graph;
    a per-coordinate ``weight [N, 4]`` is averaged to one per box (not for
    ``BoundedIoULoss``, whose loss is per coordinate)."""

    #: the weighted elementwise loss function
    loss_fn = None
    #: mmdet's IoULoss returns the zero only when reducing
    zero_only_when_reducing = False
    #: average a [N, 4] weight to [N]
    average_box_weight = True

    def __init__(self, eps, reduction='mean', loss_weight=1.0):
        super().__init__()
        if not eps >= 0:
            raise ValueError(f'{type(self).__name__} eps must be >= 0, got {eps!r}')
        self.eps = eps
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight

    def _loss_kwargs(self):
        return dict(eps=self.eps)

    def forward(self, pred, target, weight=None, avg_factor=None, reduction_override=None,
                **kwargs):
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        if weight is not None and not torch.any(weight > 0) and not (
                self.zero_only_when_reducing and reduction == 'none'):
            if pred.dim() == weight.dim() + 1:
                weight = weight.unsqueeze(1)
            return (pred * weight).sum()  # zero, connected to the graph
        if self.average_box_weight and weight is not None and weight.dim() > 1:
            if weight.shape != pred.shape:
                raise ValueError(f'{type(self).__name__} weight must be [N] or [N, 4] like '
                                 f'pred {tuple(pred.shape)}, got {tuple(weight.shape)}')
            weight = weight.mean(-1)
        return self.loss_weight * type(self).loss_fn(
            pred, target, weight, reduction=reduction, avg_factor=avg_factor,
            **self._loss_kwargs(), **kwargs)


@MODELS.register_module()
class IoULoss(_IoUFamilyLoss):
    """Args (mmdet's): ``linear`` (deprecated: ``mode='linear'``), ``eps``, ``reduction``,
    ``loss_weight``, ``mode`` ('linear', 'square' or 'log')."""

    loss_fn = iou_loss
    zero_only_when_reducing = True

    def __init__(self, linear=False, eps=1e-6, reduction='mean', loss_weight=1.0, mode='log'):
        super().__init__(eps, reduction, loss_weight)
        if mode not in IOU_MODES:
            raise ValueError(f'IoULoss mode must be one of {", ".join(IOU_MODES)}, got '
                             f'{mode!r}')
        if linear:
            mode = 'linear'
            warnings.warn('IoULoss linear=True is deprecated: use mode="linear"',
                          DeprecationWarning)
        self.mode = mode
        self.linear = linear

    def _loss_kwargs(self):
        return dict(eps=self.eps, mode=self.mode)


@MODELS.register_module()
class BoundedIoULoss(_IoUFamilyLoss):
    """Args (mmdet's): ``beta`` (smooth L1 transition), ``eps``, ``reduction``,
    ``loss_weight``. The loss is per coordinate, so is ``weight``."""

    loss_fn = bounded_iou_loss
    average_box_weight = False

    def __init__(self, beta=0.2, eps=1e-3, reduction='mean', loss_weight=1.0):
        super().__init__(eps, reduction, loss_weight)
        if not beta > 0:
            raise ValueError(f'BoundedIoULoss beta must be positive, got {beta!r}')
        self.beta = beta

    def _loss_kwargs(self):
        return dict(beta=self.beta, eps=self.eps)


@MODELS.register_module()
class GIoULoss(_IoUFamilyLoss):
    """``1 - GIoU``; args ``eps``, ``reduction``, ``loss_weight``."""

    loss_fn = giou_loss

    def __init__(self, eps=1e-6, reduction='mean', loss_weight=1.0):
        super().__init__(eps, reduction, loss_weight)


@MODELS.register_module()
class DIoULoss(_IoUFamilyLoss):
    """``1 - DIoU``; args ``eps``, ``reduction``, ``loss_weight``."""

    loss_fn = diou_loss

    def __init__(self, eps=1e-6, reduction='mean', loss_weight=1.0):
        super().__init__(eps, reduction, loss_weight)


@MODELS.register_module()
class CIoULoss(_IoUFamilyLoss):
    """``1 - CIoU``; args ``eps``, ``reduction``, ``loss_weight``."""

    loss_fn = ciou_loss

    def __init__(self, eps=1e-6, reduction='mean', loss_weight=1.0):
        super().__init__(eps, reduction, loss_weight)
