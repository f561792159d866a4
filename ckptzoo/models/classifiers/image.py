"""mmcls 0.x ``ImageClassifier``: backbone -> global average pooling -> linear head.

The config keys are mmcls's (``backbone``, ``neck=dict(type='GlobalAveragePooling')``,
``head=dict(type='LinearClsHead', num_classes, in_channels, loss, topk)``), so an mmcls
classification config of that shape builds unchanged. Label smoothing is
``F.cross_entropy(label_smoothing=...)``, given either as ``head.label_smoothing`` or as mmcls's
``loss=dict(type='LabelSmoothLoss', label_smooth_val=..., mode='original')`` (the same formula).
"""
import torch.nn.functional as F

from ...registry import MODELS, build_model
from ..base import BaseModel
from ..heads import LinearClsHead

__all__ = ['ImageClassifier']


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
