"""mmdet 2.x ``FusedSemanticHead`` (HTC's semantic segmentation branch): every pyramid level
through a 1x1 lateral ConvModule, resized (bilinear, ``align_corners=True``) to level
``fusion_level`` and summed, ``num_convs`` 3x3 ConvModules, then a 1x1 ``conv_logits`` (the
stuff/thing map, loss ``loss_seg``) and a 1x1 ``conv_embedding`` (the semantic feature the RoI
head pools). State-dict keys are mmdet's.

Fix over mmdet, which leaves its results equal: ``ignore_label`` / ``loss_weight`` update a
copy of ``loss_seg`` (mmdet wrote them into its shared default dict, so one head's values
became every later head's default).
"""
import warnings

import torch.nn as nn
import torch.nn.functional as F

from ....registry import MODELS
from ....runner.fp16 import auto_fp16, force_fp32
from ...utils import ConvModule, apply_init_cfg

__all__ = ['FusedSemanticHead']


@MODELS.register_module()
class FusedSemanticHead(nn.Module):
    """Args (mmdet 2.x's):
        num_ins (int): pyramid levels taken; fusion_level (int): the level fused at.
        num_convs, in_channels, conv_out_channels, conv_cfg, norm_cfg: the conv tower.
        num_classes (int): channels of ``conv_logits`` (183 COCO-stuff classes).
        ignore_label, loss_weight: deprecated spellings of ``loss_seg``'s ``ignore_index``
            and ``loss_weight`` (a warning, as mmdet; falsy values are not applied, as mmdet).
        loss_seg (dict): default ``CrossEntropyLoss(ignore_index=255, loss_weight=0.2)``.
        init_cfg: default Kaiming on ``conv_logits``.
    """

    def __init__(self, num_ins, fusion_level, num_convs=4, in_channels=256,
                 conv_out_channels=256, num_classes=183, conv_cfg=None, norm_cfg=None,
                 ignore_label=None, loss_weight=None,
                 loss_seg=dict(type='CrossEntropyLoss', ignore_index=255, loss_weight=0.2),
                 init_cfg=dict(type='Kaiming', override=dict(name='conv_logits'))):
        super().__init__()
        if not (isinstance(fusion_level, int) and 0 <= fusion_level < num_ins):
            raise ValueError(f'FusedSemanticHead fusion_level must be one of the num_ins='
                             f'{num_ins} levels, got {fusion_level!r}')
        self.num_ins = num_ins
        self.fusion_level = fusion_level
        self.num_convs = num_convs
        self.in_channels = in_channels
        self.conv_out_channels = conv_out_channels
        self.num_classes = num_classes
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.fp16_enabled = False
        self.lateral_convs = nn.ModuleList(
            ConvModule(in_channels, in_channels, 1, conv_cfg=conv_cfg, norm_cfg=norm_cfg,
                       inplace=False) for _ in range(num_ins))
        self.convs = nn.ModuleList(
            ConvModule(in_channels if i == 0 else conv_out_channels, conv_out_channels, 3,
                       padding=1, conv_cfg=conv_cfg, norm_cfg=norm_cfg)
            for i in range(num_convs))
        self.conv_embedding = ConvModule(conv_out_channels, conv_out_channels, 1,
                                         conv_cfg=conv_cfg, norm_cfg=norm_cfg)
        self.conv_logits = nn.Conv2d(conv_out_channels, num_classes, 1)
        loss_seg = dict(loss_seg)
        if ignore_label:
            loss_seg['ignore_index'] = ignore_label
        if loss_weight:
            loss_seg['loss_weight'] = loss_weight
        if ignore_label or loss_weight:
            warnings.warn('FusedSemanticHead ignore_label and loss_weight are deprecated (as '
                          "in mmdet): set ignore_index and loss_weight in loss_seg instead")
        self.criterion = MODELS.build(loss_seg)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The ``init_cfg`` was applied at construction."""

    @auto_fp16()
    def forward(self, feats):
        """``(mask_pred, semantic_feat)``, both at level ``fusion_level``'s size."""
        if len(feats) > self.num_ins or len(feats) <= self.fusion_level:
            raise ValueError(f'FusedSemanticHead (num_ins={self.num_ins}, fusion_level='
                             f'{self.fusion_level}) got {len(feats)} feature levels')
        x = self.lateral_convs[self.fusion_level](feats[self.fusion_level])
        fused_size = tuple(x.shape[-2:])
        for i, feat in enumerate(feats):
            if i != self.fusion_level:
                feat = F.interpolate(feat, size=fused_size, mode='bilinear',
                                     align_corners=True)
                x = x + self.lateral_convs[i](feat)
        for conv in self.convs:
            x = conv(x)
        mask_pred = self.conv_logits(x)
        return mask_pred, self.conv_embedding(x)

    @force_fp32(apply_to=('mask_pred', ))
    def loss(self, mask_pred, labels):
        """``loss_seg`` of the ``(N, C, h, w)`` logits against the ``(N, 1, h, w)`` map (the
        pipeline's ``gt_semantic_seg`` after ``SegRescale``, padding 255)."""
        if not (labels.dim() == 3 or (labels.dim() == 4 and labels.shape[1] == 1)) or \
                labels.shape[-2:] != mask_pred.shape[-2:]:
            raise ValueError(f'FusedSemanticHead.loss needs gt_semantic_seg of shape (N, 1, '
                             f'{mask_pred.shape[-2]}, {mask_pred.shape[-1]}) (the semantic '
                             f'logits\' size: SegRescale to the fusion level), got '
                             f'{tuple(labels.shape)}')
        return self.criterion(mask_pred, labels.squeeze(1).long())
