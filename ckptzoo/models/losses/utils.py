"""mmdet 2.x loss reduction: element weights, then mean / sum / none, or a sum over
``avg_factor`` (e.g. the number of positive anchors)."""
import functools

import torch

__all__ = ['reduce_loss', 'weight_reduce_loss', 'weighted_loss', 'REDUCTIONS']

REDUCTIONS = ('none', 'mean', 'sum')


def check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f'reduction must be one of {", ".join(REDUCTIONS)}, got {reduction!r}')
    return reduction


def reduce_loss(loss, reduction):
    check_reduction(reduction)
    if reduction == 'mean':
        return loss.mean()
    if reduction == 'sum':
        return loss.sum()
    return loss


def weight_reduce_loss(loss, weight=None, reduction='mean', avg_factor=None):
    """``avg_factor`` replaces the element count of 'mean'; with 'sum' it is an error."""
    if weight is not None:
        loss = loss * weight
    if avg_factor is None:
        return reduce_loss(loss, reduction)
    check_reduction(reduction)
    if reduction == 'mean':
        return loss.sum() / (avg_factor + torch.finfo(torch.float32).eps)
    if reduction == 'sum':
        raise ValueError('avg_factor can not be used with reduction="sum"')
    return loss


def weighted_loss(loss_func):
    """Turn ``loss_func(pred, target, **kw) -> elementwise loss`` into
    ``loss(pred, target, weight=None, reduction='mean', avg_factor=None, **kw)``."""

    @functools.wraps(loss_func)
    def wrapper(pred, target, weight=None, reduction='mean', avg_factor=None, **kwargs):
        loss = loss_func(pred, target, **kwargs)
        return weight_reduce_loss(loss, weight, reduction, avg_factor)

    return wrapper
