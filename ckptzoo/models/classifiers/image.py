"""mmcls 0.x ``ImageClassifier``: backbone -> global average pooling -> linear head.

The config keys are mmcls's (``backbone``, ``neck=dict(type='GlobalAveragePooling')``,
``head=dict(type='LinearClsHead', num_classes, in_channels, loss, topk)``), so an mmcls
classification config of that shape builds unchanged. Label smoothing is
``F.cross_entropy(label_smoothing=...)``, given either as ``head.label_smoothing`` or as mmcls's
``loss=dict(type='LabelSmoothLoss', label_smooth_val=..., mode='original')`` (the same formula).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS, build_model
from ..base import BaseModel

__all__ = ['ImageClassifier', 'LinearClsHead', 'topk_accuracy']

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


@MODELS.register_module()
class ImageClassifier(BaseModel):
    """Backbone, global average pooling over its LAST output, linear head.

    Args:
        backbone (dict): backbone config, e.g. ``dict(type='ResNet', depth=18)``.
        neck (dict | None): None or ``dict(type='GlobalAveragePooling')``; pooling is applied
            either way (the only neck mmcls configs use with a linear head).
        head (dict): ``LinearClsHead`` arguments (``type`` optional). ``in_channels`` may be
            left out when the backbone has ``out_channels`` (per output) or ``feat_dim``.
        init_cfg (dict | None): kept for mmcls compatibility; backbones load their own.
    """

    def __init__(self, backbone, neck=None, head=None, pretrained=None, train_cfg=None,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if neck is not None and not (isinstance(neck, dict)
                                     and neck.get('type') == 'GlobalAveragePooling'
                                     and set(neck) <= {'type', 'dim'}
                                     and neck.get('dim', 2) == 2):
            raise ValueError("neck must be None or dict(type='GlobalAveragePooling'), "
                             f'got {neck!r}')
        if not isinstance(head, dict):
            raise TypeError(f'head must be a dict of LinearClsHead arguments, got {head!r}')
        if train_cfg:
            raise NotImplementedError(f'train_cfg (mixup / cutmix) is not supported, '
                                      f'got {train_cfg!r}')
        if pretrained is not None:
            backbone = dict(backbone, init_cfg=dict(type='Pretrained', checkpoint=pretrained))
        self.backbone = build_model(backbone)
        head = dict(head)
        head_type = head.pop('type', 'LinearClsHead')
        if head_type != 'LinearClsHead':
            raise ValueError(f"head type must be 'LinearClsHead', got {head_type!r}")
        if head.get('in_channels') is None:
            # the last output's channels (out_channels per out index), else the final width
            channels = getattr(self.backbone, 'out_channels', None)
            channels = channels[-1] if channels else getattr(self.backbone, 'feat_dim', None)
            if channels is None:
                raise ValueError('head needs in_channels: the backbone has no feat_dim or '
                                 'out_channels to infer it from')
            head['in_channels'] = channels
        self.head = LinearClsHead(**head)

    def init_weights(self):
        if hasattr(self.backbone, 'init_weights'):
            self.backbone.init_weights()

    def extract_feat(self, img):
        """Pooled features ``[B, C]`` of the backbone's last output."""
        x = self.backbone(img)
        if isinstance(x, (list, tuple)):
            x = x[-1]
        return F.adaptive_avg_pool2d(x, 1).flatten(1)

    def forward_train(self, img, gt_label, **kwargs):
        gt_label = gt_label.reshape(-1).long()
        if gt_label.numel() != img.shape[0]:
            raise ValueError(f'gt_label needs one label per image ({img.shape[0]}), '
                             f'got shape {tuple(gt_label.shape)}')
        return self.head.loss(self.head(self.extract_feat(img)), gt_label)

    def forward_test(self, img, **kwargs):
        """Softmax scores, one numpy vector per image (mmcls's ``simple_test``)."""
        scores = F.softmax(self.head(self.extract_feat(img)).float(), dim=1)
        return list(scores.detach().cpu().numpy())
