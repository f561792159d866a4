"""mmcls 0.x ``LinearClsHead`` (``mmcls/models/heads/linear_head.py``): one ``fc`` layer over
the pooled features of an :class:`~ckptzoo.models.classifiers.ImageClassifier`, its
cross-entropy (or label-smoothing) loss and top-k accuracies."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS

__all__ = ['LinearClsHead', 'topk_accuracy']

_LOSSES = ('CrossEntropyLoss', 'LabelSmoothLoss')


def topk_accuracy(scores, labels, topk=(1, )):
    """Top-k accuracies in percent (mmcls's ``accuracy``), one float tensor per k."""
    maxk = max(topk)
    pred = scores.topk(maxk, dim=1).indices
    correct = pred.eq(labels.view(-1, 1))
    return [correct[:, :k].any(dim=1).float().mean() * 100.0 for k in topk]


def _check_topk(topk, num_classes):
    topk = (topk, ) if isinstance(topk, int) else tuple(topk)
    if not topk or any(not isinstance(k, int) or not 1 <= k <= num_classes for k in topk):
        raise ValueError(f'topk must be ints in 1..num_classes ({num_classes}), got {topk!r}')
    return topk


@MODELS.register_module()
class LinearClsHead(nn.Module):
    """mmcls's ``LinearClsHead``: one ``fc`` layer over pooled features (keys ``fc.weight``).

    Args:
        num_classes (int): number of classes.
        in_channels (int): feature channels of the backbone's last output.
        loss (dict): ``dict(type='CrossEntropyLoss', loss_weight=1.0)`` or mmcls's
            ``dict(type='LabelSmoothLoss', label_smooth_val=0.1, loss_weight=1.0)``.
        label_smoothing (float): smoothing in [0, 1) for ``CrossEntropyLoss``.
        topk (int | tuple[int]): accuracies logged in training (``accuracy_top-k``).
    """

    def __init__(self, num_classes, in_channels, loss=dict(type='CrossEntropyLoss',
                 loss_weight=1.0), label_smoothing=0.0, topk=(1, ), cal_acc=True,
                 init_cfg=None):
        super().__init__()
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not isinstance(in_channels, int) or in_channels < 1:
            raise ValueError(f'in_channels must be a positive int, got {in_channels!r}')
        loss = dict(loss or dict(type='CrossEntropyLoss'))
        loss_type = loss.pop('type', 'CrossEntropyLoss')
        if loss_type not in _LOSSES:
            raise ValueError(f'head loss type must be one of {", ".join(_LOSSES)}, '
                             f'got {loss_type!r}')
        self.loss_weight = float(loss.pop('loss_weight', 1.0))
        if loss_type == 'LabelSmoothLoss':
            mode = loss.pop('mode', 'original')
            if mode != 'original':
                raise ValueError(f"LabelSmoothLoss mode must be 'original', got {mode!r}")
            label_smoothing = loss.pop('label_smooth_val')
        if loss:
            raise ValueError(f'unsupported {loss_type} arguments {sorted(loss)}: allowed are '
                             'loss_weight (and label_smooth_val, mode for LabelSmoothLoss)')
        if not 0.0 <= float(label_smoothing) < 1.0:
            raise ValueError(f'label_smoothing must be in [0, 1), got {label_smoothing!r}')
        self.label_smoothing = float(label_smoothing)
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.topk = _check_topk(topk, num_classes)
        self.cal_acc = cal_acc
        self.init_cfg = init_cfg
        self.fc = nn.Linear(in_channels, num_classes)
        nn.init.normal_(self.fc.weight, 0, 0.01)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        return self.fc(x)

    def loss(self, cls_score, gt_label):
        cls_score = cls_score.float()
        losses = dict(loss=self.loss_weight * F.cross_entropy(
            cls_score, gt_label, label_smoothing=self.label_smoothing))
        if self.cal_acc:
            with torch.no_grad():
                for k, acc in zip(self.topk, topk_accuracy(cls_score, gt_label, self.topk)):
                    losses[f'accuracy_top-{k}'] = acc
        return losses
