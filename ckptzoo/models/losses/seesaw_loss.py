"""mmdet 2.x ``SeesawLoss`` (Seesaw Loss for Long-Tailed Instance Segmentation,
arXiv:2008.10032), the classification loss of the LVIS seesaw configs.

The classifier has ``num_classes + 2`` outputs: class logits and a 2-way objectness
(foreground, background). Objectness takes a plain cross entropy over all RoIs; the class
logits of the positives a cross entropy whose negative-class logits are shifted by the log of
the seesaw weights: a mitigation factor ``(N_j / N_i)**p`` for classes ``j`` seen less often
than the label ``i`` (counts accumulated in the ``cum_samples`` buffer, a state-dict entry as
in mmdet) and a compensation factor ``(s_j / s_i)**q`` for classes scored above the label.

It is a loss with the custom-classifier protocol mmdet's ``BBoxHead`` reads:
``custom_cls_channels`` (:meth:`get_cls_channels`), ``custom_activation``
(:meth:`get_activation`: the scores of ``num_classes + 1`` from the split logits) and
``custom_accuracy`` (:meth:`get_accuracy`: ``acc_objectness`` and ``acc_classes``).
"""
import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS
from .accuracy import accuracy
from .utils import check_reduction, weight_reduce_loss

__all__ = ['SeesawLoss', 'seesaw_ce_loss']


def seesaw_ce_loss(cls_score, labels, label_weights, cum_samples, num_classes, p, q, eps,
                   reduction='mean', avg_factor=None):
    """The seesaw cross entropy of ``cls_score [N, num_classes]`` (positives only) against
    ``labels [N]``, with ``cum_samples [num_classes]`` the samples seen of each class."""
    if cls_score.size(-1) != num_classes or len(cum_samples) != num_classes:
        raise ValueError(f'cls_score {tuple(cls_score.shape)} and cum_samples '
                         f'({len(cum_samples)}) need num_classes={num_classes} columns')
    labels = labels.long()
    onehot = F.one_hot(labels, num_classes)
    weights = cls_score.new_ones(onehot.size())
    if p > 0:
        counts = cum_samples.clamp(min=1)
        ratio = counts[None, :] / counts[:, None]  # [i, j] = N_j / N_i
        weights = weights * torch.where(ratio < 1.0, ratio.pow(p), torch.ones_like(ratio))[
            labels, :]
    if q > 0:
        scores = F.softmax(cls_score.detach(), dim=1)
        self_scores = scores[torch.arange(len(scores), device=scores.device), labels]
        ratio = scores / self_scores[:, None].clamp(min=eps)
        weights = weights * torch.where(ratio > 1.0, ratio.pow(q), torch.ones_like(ratio))
    cls_score = cls_score + weights.log() * (1 - onehot)
    loss = F.cross_entropy(cls_score, labels, reduction='none')
    if label_weights is not None:
        label_weights = label_weights.float()
    return weight_reduce_loss(loss, label_weights, reduction, avg_factor)


@MODELS.register_module()
class SeesawLoss(nn.Module):
    """Args (mmdet's): ``use_sigmoid`` (False only), ``p`` (0.8, mitigation), ``q`` (2.0,
    compensation), ``num_classes`` (1203: LVIS v1), ``eps`` (1e-2, the smallest label score
    divided by), ``reduction``, ``loss_weight``, ``return_dict`` (True: the losses
    ``loss_cls_objectness`` and ``loss_cls_classes``; False: their sum)."""

    def __init__(self, use_sigmoid=False, p=0.8, q=2.0, num_classes=1203, eps=1e-2,
                 reduction='mean', loss_weight=1.0, return_dict=True):
        super().__init__()
        if use_sigmoid:
            raise ValueError('SeesawLoss supports use_sigmoid=False only (softmax), got '
                             f'use_sigmoid={use_sigmoid!r}')
        if not (isinstance(num_classes, numbers.Integral) and num_classes > 0):
            raise ValueError(f'SeesawLoss num_classes must be a positive int, got '
                             f'{num_classes!r}')
        for name, value in (('p', p), ('q', q), ('eps', eps)):
            if not (isinstance(value, numbers.Real) and value >= 0):
                raise ValueError(f'SeesawLoss {name} must be a number >= 0, got {value!r}')
        self.use_sigmoid = False
        self.p = p
        self.q = q
        self.num_classes = num_classes
        self.eps = eps
        self.reduction = check_reduction(reduction)
        self.loss_weight = loss_weight
        self.return_dict = return_dict
        self.cls_criterion = seesaw_ce_loss
        # samples seen per label (background last), a buffer as in mmdet's checkpoints
        self.register_buffer('cum_samples',
                             torch.zeros(self.num_classes + 1, dtype=torch.float))
        self.custom_cls_channels = True
        self.custom_activation = True
        self.custom_accuracy = True

    def _split_cls_score(self, cls_score):
        if cls_score.size(-1) != self.num_classes + 2:
            raise ValueError(f'SeesawLoss takes cls_score of num_classes + 2 = '
                             f'{self.num_classes + 2} columns, got {tuple(cls_score.shape)}')
        return cls_score[..., :-2], cls_score[..., -2:]

    def get_cls_channels(self, num_classes):
        """The classifier's outputs: ``num_classes + 2``."""
        if num_classes != self.num_classes:
            raise ValueError(f'SeesawLoss was built for num_classes={self.num_classes}, the '
                             f'head has {num_classes}')
        return num_classes + 2

    def get_activation(self, cls_score):
        """``[N, num_classes + 1]`` scores: class softmax times the foreground probability,
        then the background probability."""
        classes, objectness = self._split_cls_score(cls_score)
        objectness = F.softmax(objectness, dim=-1)
        return torch.cat([F.softmax(classes, dim=-1) * objectness[..., [0]],
                          objectness[..., [1]]], dim=-1)

    def get_accuracy(self, cls_score, labels):
        """``acc_objectness`` over every RoI, ``acc_classes`` over the positives."""
        pos = labels < self.num_classes
        classes, objectness = self._split_cls_score(cls_score)
        return dict(acc_objectness=accuracy(objectness, (labels == self.num_classes).long()),
                    acc_classes=accuracy(classes[pos], labels[pos]))

    def forward(self, cls_score, labels, label_weights=None, avg_factor=None,
                reduction_override=None):
        """Counts ``labels`` into ``cum_samples`` (every call, as mmdet), then the losses."""
        reduction = check_reduction(reduction_override) if reduction_override \
            else self.reduction
        classes, objectness = self._split_cls_score(cls_score)
        pos = labels < self.num_classes
        obj_labels = (labels == self.num_classes).long()
        self.cum_samples += torch.bincount(labels.long(), minlength=self.num_classes + 1)[
            :self.num_classes + 1].to(self.cum_samples.dtype)
        label_weights = labels.new_ones(labels.size(), dtype=torch.float) \
            if label_weights is None else label_weights.float()
        if pos.any():
            loss_classes = self.loss_weight * self.cls_criterion(
                classes[pos], labels[pos], label_weights[pos],
                self.cum_samples[:self.num_classes], self.num_classes, self.p, self.q,
                self.eps, reduction, avg_factor)
        else:
            loss_classes = classes[pos].sum()
        loss_objectness = self.loss_weight * weight_reduce_loss(
            F.cross_entropy(objectness, obj_labels, reduction='none'), label_weights,
            reduction, avg_factor)
        if self.return_dict:
            return dict(loss_cls_objectness=loss_objectness, loss_cls_classes=loss_classes)
        return loss_classes + loss_objectness
