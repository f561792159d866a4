"""mmdet 2.x ``SSDHead`` (SSD, SSDLite): per level its own classification and regression
branch (``cls_convs.{i}`` / ``reg_convs.{i}``, each an ``nn.Sequential`` of ``stacked_convs``
ConvModules (DepthwiseSeparableConvModules with ``use_depthwise``), with ``use_depthwise`` a
depthwise 3x3 ConvModule, then the predicting conv: 3x3, or 1x1 with ``use_depthwise``).
State-dict keys equal mmdet's, so mmdet 2.x SSD / SSDLite checkpoints load.

Training: softmax cross-entropy with hard negative mining (per image, the positives and the
``neg_pos_ratio`` times as many highest-loss negatives), smooth-L1 with
``train_cfg.smoothl1_beta``, both divided by the positives of the batch; the losses are lists
over images, as mmdet's.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}``, one per level, covering
that level's two branches.
"""
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses.l1_loss import smooth_l1_loss
from ..utils import ConvModule, DepthwiseSeparableConvModule, apply_init_cfg
from .anchor_head import AnchorHead
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['SSDHead']


@MODELS.register_module()
class SSDHead(LevelUnitsMixin, AnchorHead):
    """SSD head (Liu et al. 2016), mmdet 2.28 arguments.

    Args:
        num_classes (int): foreground classes (the softmax has ``num_classes + 1``).
        in_channels (tuple[int]): channels of each input level.
        stacked_convs (int): convs of each branch before the predicting conv.
        feat_channels (int): their channels.
        use_depthwise (bool): depthwise-separable convs (SSDLite).
        conv_cfg, norm_cfg, act_cfg (dict | None): of those convs (no norm, no activation by
            default, as mmdet).
        anchor_generator (dict): SSD300's ``SSDAnchorGenerator`` by default.
        bbox_coder (dict), reg_decoded_bbox (bool): as :class:`AnchorHead`.
        train_cfg (dict): ``assigner``, ``smoothl1_beta``, ``neg_pos_ratio``,
            ``allowed_border``, ``pos_weight``, ``debug``. SSD samples no anchors: mmdet
            ignored a ``sampler``, here it is refused.
        test_cfg (dict): as :class:`AnchorHead`.
        init_cfg (dict): Xavier-uniform convs with zero bias by default.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
            default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    TRAIN_CFG_KEYS = ('assigner', 'smoothl1_beta', 'neg_pos_ratio', 'allowed_border',
                      'pos_weight', 'debug')

    def __init__(self, num_classes=80, in_channels=(512, 1024, 512, 256, 256, 256),
                 stacked_convs=0, feat_channels=256, use_depthwise=False, conv_cfg=None,
                 norm_cfg=None, act_cfg=None,
                 anchor_generator=dict(type='SSDAnchorGenerator', scale_major=False,
                                       input_size=300, strides=[8, 16, 32, 64, 100, 300],
                                       ratios=([2], [2, 3], [2, 3], [2, 3], [2], [2]),
                                       basesize_ratio_range=(0.1, 0.9)),
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder', clip_border=True,
                                 target_means=[.0, .0, .0, .0],
                                 target_stds=[1.0, 1.0, 1.0, 1.0]),
                 reg_decoded_bbox=False, train_cfg=None, test_cfg=None,
                 init_cfg=dict(type='Xavier', layer='Conv2d', distribution='uniform', bias=0),
                 with_cp=False, cp_use_reentrant=False):
        BaseDenseHead.__init__(self)
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        if isinstance(train_cfg, dict):
            check_keys(train_cfg, self.TRAIN_CFG_KEYS, 'train_cfg', owner='SSDHead')
            missing = [k for k in ('assigner', 'smoothl1_beta', 'neg_pos_ratio')
                       if cfg_get(train_cfg, k) is None]
            if missing:
                raise ValueError(f'SSDHead train_cfg needs {", ".join(missing)}, got '
                                 f'{train_cfg!r}')
            ratio = cfg_get(train_cfg, 'neg_pos_ratio')
            if not (isinstance(ratio, int) and ratio >= 0):
                raise ValueError(f'train_cfg.neg_pos_ratio must be a non-negative int, got '
                                 f'{ratio!r}')
        if isinstance(test_cfg, dict):
            check_keys(test_cfg, self.TEST_CFG_KEYS, 'test_cfg', owner='SSDHead')
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.stacked_convs = stacked_convs
        self.feat_channels = feat_channels
        self.use_depthwise = use_depthwise
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.cls_out_channels = num_classes + 1  # the background
        self.prior_generator = TASK_UTILS.build(anchor_generator)
        self.num_base_priors = self.prior_generator.num_base_priors
        if len(in_channels) != self.prior_generator.num_levels:
            raise ValueError(f'in_channels needs one entry per anchor level '
                             f'({self.prior_generator.num_levels}), got {in_channels!r}')
        self._init_layers()
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.reg_decoded_bbox = reg_decoded_bbox
        self.use_sigmoid_cls = False
        self.cls_focal_loss = False
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        self.sampling = False
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            self.sampler = TASK_UTILS.build(dict(type='PseudoSampler'))
        self.fp16_enabled = False
        apply_init_cfg(self, init_cfg)
        self._init_level_units(with_cp, cp_use_reentrant)

    @property
    def num_anchors(self):
        """mmdet < 2.18 name of ``num_base_priors`` (a list: one per level)."""
        return self.num_base_priors

    def _branch(self, in_channel, out_channels):
        layers = []
        conv = DepthwiseSeparableConvModule if self.use_depthwise else ConvModule
        for _ in range(self.stacked_convs):
            layers.append(conv(in_channel, self.feat_channels, 3, padding=1,
                               conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg,
                               act_cfg=self.act_cfg))
            in_channel = self.feat_channels
        if self.use_depthwise:
            layers.append(ConvModule(in_channel, in_channel, 3, padding=1, groups=in_channel,
                                     conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg,
                                     act_cfg=self.act_cfg))
        layers.append(nn.Conv2d(in_channel, out_channels,
                                kernel_size=1 if self.use_depthwise else 3,
                                padding=0 if self.use_depthwise else 1))
        return nn.Sequential(*layers)

    def _init_layers(self):
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for channels, priors in zip(self.in_channels, self.num_base_priors):
            self.cls_convs.append(self._branch(channels, priors * self.cls_out_channels))
            self.reg_convs.append(self._branch(channels, priors * 4))

    def _level_function(self, level):
        """Each level has its own layers: ``forward_single`` with the level's index."""
        return partial(self.forward_single, level=level)

    def forward_single(self, x, level):
        """``(cls_score [B, A*(C+1), H, W], bbox_pred [B, A*4, H, W])`` of level ``level``."""
        return self.cls_convs[level](x), self.reg_convs[level](x)

    # ------------------------------------------------------------------ loss
    def loss_single(self, cls_score, bbox_pred, anchor, labels, label_weights, bbox_targets,
                    bbox_weights, num_total_samples):
        """One image: ``cls_score [A, C+1]``, ``bbox_pred [A, 4]``, ``anchor [A, 4]`` and its
        targets. Every positive, and the ``neg_pos_ratio * num_pos`` negatives of highest
        loss (all negatives when there are fewer), count in the classification loss."""
        loss_cls_all = F.cross_entropy(cls_score, labels, reduction='none') * label_weights
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero(
            as_tuple=False).reshape(-1)
        neg_inds = (labels == self.num_classes).nonzero(as_tuple=False).view(-1)
        num_neg = min(cfg_get(self.train_cfg, 'neg_pos_ratio') * pos_inds.numel(),
                      neg_inds.numel())
        topk_neg, _ = loss_cls_all[neg_inds].topk(num_neg)
        loss_cls = (loss_cls_all[pos_inds].sum() + topk_neg.sum()) / num_total_samples
        if self.reg_decoded_bbox:
            bbox_pred = self.bbox_coder.decode(anchor, bbox_pred)
        loss_bbox = smooth_l1_loss(bbox_pred, bbox_targets, bbox_weights,
                                   beta=cfg_get(self.train_cfg, 'smoothl1_beta'),
                                   avg_factor=num_total_samples)
        return loss_cls[None], loss_bbox

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls=[per image], loss_bbox=[per image])`` (mmdet's lists)."""
        if not self.train_cfg:
            raise ValueError(f'SSDHead.loss needs train_cfg (assigner, smoothl1_beta, '
                             f'neg_pos_ratio), got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels}')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         _) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                               gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
                               label_channels=1, unmap_outputs=True)
        n = len(img_metas)
        all_cls_scores = torch.cat([s.permute(0, 2, 3, 1).reshape(n, -1, self.cls_out_channels)
                                    for s in cls_scores], 1)
        all_bbox_preds = torch.cat([b.permute(0, 2, 3, 1).reshape(n, -1, 4)
                                    for b in bbox_preds], -2)
        all_labels = torch.cat(labels_list, -1).view(n, -1)
        all_label_weights = torch.cat(label_weights_list, -1).view(n, -1)
        all_bbox_targets = torch.cat(bbox_targets_list, -2).view(n, -1, 4)
        all_bbox_weights = torch.cat(bbox_weights_list, -2).view(n, -1, 4)
        losses_cls, losses_bbox = [], []
        for i in range(n):
            loss_cls, loss_bbox = self.loss_single(
                all_cls_scores[i], all_bbox_preds[i], torch.cat(anchor_list[i]), all_labels[i],
                all_label_weights[i], all_bbox_targets[i], all_bbox_weights[i],
                num_total_samples=num_total_pos)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox)
