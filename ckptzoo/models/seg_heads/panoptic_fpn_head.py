"""mmdet 2.x ``PanopticFPNHead`` (Kirillov et al. 2019): the semantic branch of Panoptic FPN.

Each used pyramid level ``i`` goes through a ``ConvUpsample`` (``max(i, 1)`` 3x3 convs, ``i``
2x upsamples) to the finest level's resolution; the sum goes through a 1x1 ``conv_logits``
with ``num_stuff_classes + 1`` channels: the stuff classes, then one for all things. State-dict
keys as mmdet's (``conv_upsample_layers.{j}.conv.{k}.conv.weight``, ``...gn.weight``,
``conv_logits.weight``), so mmdet 2.x Panoptic FPN checkpoints load.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}``, one per used input level
(``start_level`` .. ``end_level - 1``), covering that level's ``ConvUpsample``.
"""
import warnings

import torch
import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import CheckpointUnit, unit_step
from ..utils import ConvUpsample
from .base_semantic_head import BaseSemanticHead

__all__ = ['PanopticFPNHead']


def _count(name, value, minimum=0):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f'PanopticFPNHead {name} must be an int >= {minimum}, got {value!r}')


@MODELS.register_module()
class PanopticFPNHead(BaseSemanticHead):
    """Args as mmdet 2.x:

    num_things_classes (int): default 80; num_stuff_classes (int): default 53.
    num_classes (int | None): deprecated; must be ``num_stuff_classes + 1`` when given.
    in_channels (int): 256; inner_channels (int): 128.
    start_level, end_level (int): the input levels used, ``[start_level, end_level)``
        (default 0, 4).
    fg_range, bg_range (tuple | None): deprecated (inclusive ranges of thing / stuff labels);
        when both are given they set the numbers of classes, as mmdet.
    conv_cfg, norm_cfg (dict): the convs' (default GroupNorm, 32 groups).
    init_cfg: applied at construction; ``conv_logits`` then gets N(0, 0.01) weights and zero
        bias, as mmdet's ``init_weights``.
    loss_seg (dict): default ``CrossEntropyLoss(ignore_index=-1)`` (the configs set 255).
    with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
        default False); ``set_checkpoint_plan`` changes modes later.
    cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.

    The ground truth is relabelled for the loss: thing labels ``[0, num_things)`` become
    ``num_stuff_classes``, stuff labels ``[num_things, num_things + num_stuff)`` become
    ``0 .. num_stuff - 1``, other values (the ignore label) are kept.
    """

    def __init__(self, num_things_classes=80, num_stuff_classes=53, num_classes=None,
                 in_channels=256, inner_channels=128, start_level=0, end_level=4,
                 fg_range=None, bg_range=None, conv_cfg=None,
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True), init_cfg=None,
                 loss_seg=dict(type='CrossEntropyLoss', ignore_index=-1, loss_weight=1.0),
                 with_cp=False, cp_use_reentrant=False):
        _count('num_things_classes', num_things_classes)
        _count('num_stuff_classes', num_stuff_classes)
        if num_classes is not None:
            warnings.warn('`num_classes` is deprecated now, please set `num_stuff_classes` '
                          'directly, the `num_classes` will be set to `num_stuff_classes + 1`')
            if num_classes != num_stuff_classes + 1:
                raise ValueError(f'PanopticFPNHead num_classes (deprecated) must be '
                                 f'num_stuff_classes + 1 = {num_stuff_classes + 1}, got '
                                 f'{num_classes!r}')
        super().__init__(num_stuff_classes + 1, init_cfg, loss_seg)
        self.num_things_classes = num_things_classes
        self.num_stuff_classes = num_stuff_classes
        if fg_range is not None and bg_range is not None:
            self.fg_range = fg_range
            self.bg_range = bg_range
            self.num_things_classes = fg_range[1] - fg_range[0] + 1
            self.num_stuff_classes = bg_range[1] - bg_range[0] + 1
            warnings.warn('`fg_range` and `bg_range` are deprecated now, please use '
                          f'`num_things_classes`={self.num_things_classes} and '
                          f'`num_stuff_classes`={self.num_stuff_classes} instead.')
        _count('start_level', start_level)
        _count('end_level', end_level, start_level + 1)
        _count('in_channels', in_channels, 1)
        _count('inner_channels', inner_channels, 1)
        if not isinstance(with_cp, bool):
            raise TypeError(f'PanopticFPNHead with_cp must be a bool, got {with_cp!r}')
        self.start_level = start_level
        self.end_level = end_level
        self.num_stages = end_level - start_level
        self.inner_channels = inner_channels
        self.conv_upsample_layers = nn.ModuleList(
            ConvUpsample(in_channels, inner_channels, num_layers=max(i, 1), num_upsample=i,
                         conv_cfg=conv_cfg, norm_cfg=norm_cfg)
            for i in range(start_level, end_level))
        self.conv_logits = nn.Conv2d(inner_channels, self.num_classes, 1)
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(self.num_stages)]
        self._apply_init_cfg()
        nn.init.normal_(self.conv_logits.weight, 0, 0.01)
        nn.init.zeros_(self.conv_logits.bias)

    def _checkpoint_steps(self):
        return [[unit_step(f'level{self.start_level + i}', unit, layer)]
                for i, (unit, layer) in enumerate(zip(self.level_units,
                                                      self.conv_upsample_layers))]

    def _set_things_to_void(self, gt_semantic_seg):
        """Thing labels to ``num_stuff_classes``, stuff labels to ``0 .. num_stuff - 1``."""
        gt = gt_semantic_seg.int()
        things = gt < self.num_things_classes
        stuff = (gt >= self.num_things_classes) & \
            (gt < self.num_things_classes + self.num_stuff_classes)
        new_gt = torch.where(stuff, gt - self.num_things_classes, gt)
        return torch.where(things, torch.full_like(gt, self.num_stuff_classes), new_gt)

    def loss(self, seg_preds, gt_semantic_seg):
        """``dict(loss_seg=...)`` against the relabelled ground truth (things as one class)."""
        return super().loss(seg_preds, self._set_things_to_void(gt_semantic_seg))

    def forward(self, x):
        """``dict(seg_preds=(N, num_stuff + 1, h0, w0), feats=(N, inner_channels, h0, w0))`` at
        the resolution of level ``start_level`` (times its upsampling)."""
        if len(x) < self.end_level:
            raise ValueError(f'PanopticFPNHead uses input levels {self.start_level} .. '
                             f'{self.end_level - 1}, got {len(x)} levels')
        feats = [unit(layer, x[self.start_level + i], module=layer)
                 for i, (unit, layer) in enumerate(zip(self.level_units,
                                                       self.conv_upsample_layers))]
        feats = torch.sum(torch.stack(feats, dim=0), dim=0)
        return dict(seg_preds=self.conv_logits(feats), feats=feats)
