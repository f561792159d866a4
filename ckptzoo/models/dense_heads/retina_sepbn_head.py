"""mmdet 2.x ``RetinaSepBNHead`` (NAS-FPN's head): RetinaHead's towers whose convs are shared
by every level while each level has norm layers of its own. State-dict keys equal mmdet's:
``cls_convs.{level}.{i}.conv.weight`` (the same tensor under every level, as mmdet's state
dict lists it), ``cls_convs.{level}.{i}.bn.*``, ``retina_cls``, ``retina_reg``.

Checkpoint units: ``level{i}``, one per input level (``num_ins``), covering that level's towers
(its own norms, the shared convs) and ``retina_cls`` / ``retina_reg``."""
from functools import partial

import torch.nn as nn

from ...registry import MODELS
from ..checkpointing import unit_step
from ..utils import ConvModule, bias_init_with_prob, normal_init
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin

__all__ = ['RetinaSepBNHead']


@MODELS.register_module()
class RetinaSepBNHead(LevelUnitsMixin, AnchorHead):
    """RetinaHead with per-level norms (Ghiasi et al. 2019, NAS-FPN).

    Args:
        num_classes (int), in_channels (int), stacked_convs (int), conv_cfg, norm_cfg: as
            :class:`RetinaHead`.
        num_ins (int): number of input levels; each has its own norm layers. It must equal the
            anchor generator's number of strides (mmdet failed at the first forward instead).
        init_cfg: must be None, as mmdet: the head initialises itself (Normal(std=0.01) shared
            convs, zero biases, ``retina_cls`` bias at the 0.01 prior).
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
        **kwargs: :class:`AnchorHead` arguments.
    """

    def __init__(self, num_classes, num_ins, in_channels, stacked_convs=4, conv_cfg=None,
                 norm_cfg=None, init_cfg=None, with_cp=False, cp_use_reentrant=False,
                 **kwargs):
        if init_cfg is not None:
            raise ValueError(f'RetinaSepBNHead initialises itself: init_cfg must be None (as '
                             f'mmdet), got {init_cfg!r}')
        if not (isinstance(num_ins, int) and num_ins > 0):
            raise ValueError(f'num_ins must be a positive int, got {num_ins!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.num_ins = num_ins
        super().__init__(num_classes, in_channels, init_cfg=None, **kwargs)
        if stacked_convs == 0 and in_channels != self.feat_channels:
            raise ValueError(f'without tower convs (stacked_convs=0) retina_cls / retina_reg '
                             f'take feat_channels ({self.feat_channels}) channels, as mmdet: '
                             f'in_channels must equal it, got {in_channels}')
        if self.prior_generator.num_levels != num_ins:
            raise ValueError(f'num_ins ({num_ins}) must equal the number of anchor strides '
                             f'({self.prior_generator.num_levels})')
        self._init_weights()
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for _ in range(self.num_ins):
            for towers in (self.cls_convs, self.reg_convs):
                towers.append(nn.ModuleList(
                    ConvModule(self.in_channels if i == 0 else self.feat_channels,
                               self.feat_channels, 3, stride=1, padding=1,
                               conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)
                    for i in range(self.stacked_convs)))
        for i in range(self.stacked_convs):  # one conv per tower depth, shared by the levels
            for j in range(1, self.num_ins):
                self.cls_convs[j][i].conv = self.cls_convs[0][i].conv
                self.reg_convs[j][i].conv = self.reg_convs[0][i].conv
        self.retina_cls = nn.Conv2d(self.feat_channels,
                                    self.num_base_priors * self.cls_out_channels, 3, padding=1)
        self.retina_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 3, padding=1)

    def _init_weights(self):
        """mmdet's ``init_weights``, at construction as the zoo's heads do."""
        for tower in (self.cls_convs[0], self.reg_convs[0]):
            for m in tower:
                normal_init(m.conv, std=0.01)
        normal_init(self.retina_cls, std=0.01, bias=bias_init_with_prob(0.01))
        normal_init(self.retina_reg, std=0.01)

    def forward_single(self, x, level):
        """``(cls_score, bbox_pred)`` of the input level ``level`` (its own norms)."""
        cls_feat = reg_feat = x
        for conv in self.cls_convs[level]:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs[level]:
            reg_feat = conv(reg_feat)
        return self.retina_cls(cls_feat), self.retina_reg(reg_feat)

    def _checkpoint_steps(self):
        return [[unit_step(f'level{i}', unit, partial(self.forward_single, level=i), self)]
                for i, unit in enumerate(self.level_units)]

    def forward(self, feats):
        """``(cls_scores, bbox_preds)``, lists over levels, each level through its unit."""
        if len(feats) != self.num_ins:
            raise ValueError(f'RetinaSepBNHead expects num_ins={self.num_ins} levels, got '
                             f'{len(feats)}')
        outs = [unit(partial(self.forward_single, level=i), x)
                for i, (unit, x) in enumerate(zip(self.level_units, feats))]
        return tuple(list(o) for o in zip(*outs))
