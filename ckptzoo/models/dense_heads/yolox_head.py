"""mmdet 2.x ``YOLOXHead``: per level a decoupled head (a classification tower and a
regression tower of ``stacked_convs`` ConvModules, then 1x1 ``conv_cls`` / ``conv_reg`` /
``conv_obj``), anchor-free on a point grid with offset 0, trained with SimOTA targets.
State-dict keys equal mmdet's (``multi_level_cls_convs.0.0.conv.weight``,
``multi_level_conv_obj.2.bias``, ...), so mmdet 2.x YOLOX checkpoints load.

Checkpoint units: ``level{i}``, one per level, covering that level's two towers and three
predictors (each level has its own modules: ``_level_function`` binds them to mmdet's
``forward_single``).

Fixes over mmdet: ``get_bboxes(with_nms=False)`` returns the boxes before NMS (mmdet ignored
the flag, so its test-time augmentation could not merge them); ``test_cfg.max_per_img`` is
honoured where set (mmdet ignored it; YOLOX configs leave it out); no detections give
``[0, 5]`` boxes (mmdet gave ``[0, 4]``).
"""
import math
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.anchor import MlvlPointGenerator
from ...core.utils import reduce_mean
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, DepthwiseSeparableConvModule, apply_init_cfg, bias_init_with_prob
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['YOLOXHead']


def _xyxy_to_cxcywh(bboxes):
    x1, y1, x2, y2 = bboxes.split((1, 1, 1, 1), dim=-1)
    return torch.cat([(x2 + x1) / 2, (y2 + y1) / 2, x2 - x1, y2 - y1], dim=-1)


@MODELS.register_module()
class YOLOXHead(LevelUnitsMixin, BaseDenseHead):
    """YOLOX head (Ge et al. 2021).

    Args (mmdet's):
        num_classes (int), in_channels (int), feat_channels (int, 256), stacked_convs (int, 2).
        strides (list[int]): one per level, ``[8, 16, 32]``.
        use_depthwise (bool): depthwise separable tower convs.
        dcn_on_last_conv (bool): the last tower conv is DCNv2.
        conv_bias (bool | 'auto'), conv_cfg, norm_cfg (BN momentum 0.03, eps 1e-3),
        act_cfg (Swish): the tower convs.
        loss_cls, loss_obj (sigmoid CE, sum), loss_bbox (IoU square, sum, weight 5),
        loss_l1 (L1, sum; only while ``use_l1`` is True, which ``YOLOXModeSwitchHook`` sets
        for the last epochs).
        train_cfg (dict): ``assigner`` (SimOTA); test_cfg (dict): ``score_thr``, ``nms``,
        ``max_per_img`` (optional).
        init_cfg: default Kaiming-uniform convs (PyTorch's default), then the ``conv_cls`` and
        ``conv_obj`` biases at probability 0.01.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    TRAIN_CFG_KEYS = ('assigner', )
    TEST_CFG_KEYS = ('score_thr', 'nms', 'max_per_img')

    def __init__(self, num_classes, in_channels, feat_channels=256, stacked_convs=2,
                 strides=[8, 16, 32], use_depthwise=False, dcn_on_last_conv=False,
                 conv_bias='auto', conv_cfg=None,
                 norm_cfg=dict(type='BN', momentum=0.03, eps=0.001),
                 act_cfg=dict(type='Swish'),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, reduction='sum',
                               loss_weight=1.0),
                 loss_bbox=dict(type='IoULoss', mode='square', eps=1e-16, reduction='sum',
                                loss_weight=5.0),
                 loss_obj=dict(type='CrossEntropyLoss', use_sigmoid=True, reduction='sum',
                               loss_weight=1.0),
                 loss_l1=dict(type='L1Loss', reduction='sum', loss_weight=1.0),
                 train_cfg=None, test_cfg=None,
                 init_cfg=dict(type='Kaiming', layer='Conv2d', a=math.sqrt(5),
                               distribution='uniform', mode='fan_in',
                               nonlinearity='leaky_relu'),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 1):
            # the predictors take feat_channels: mmdet needs at least one tower conv too
            raise ValueError(f'YOLOXHead stacked_convs must be a positive int, '
                             f'got {stacked_convs!r}')
        if not (conv_bias == 'auto' or isinstance(conv_bias, bool)):
            raise ValueError(f"conv_bias must be 'auto' or a bool, got {conv_bias!r}")
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner=type(self).__name__)
        self.num_classes = num_classes
        self.cls_out_channels = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.stacked_convs = stacked_convs
        self.strides = strides
        self.use_depthwise = use_depthwise
        self.dcn_on_last_conv = dcn_on_last_conv
        self.conv_bias = conv_bias
        self.use_sigmoid_cls = True
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.loss_obj = MODELS.build(loss_obj)
        self.use_l1 = False  # YOLOXModeSwitchHook turns it on
        self.loss_l1 = MODELS.build(loss_l1)
        self.prior_generator = MlvlPointGenerator(strides, offset=0)
        self.test_cfg = test_cfg
        self.train_cfg = train_cfg
        self.init_cfg = init_cfg
        self.sampling = False
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            self.sampler = TASK_UTILS.build(dict(type='PseudoSampler'))
        self.fp16_enabled = False
        self._init_layers()
        apply_init_cfg(self, init_cfg)
        self._init_prior_biases()
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self.multi_level_cls_convs = nn.ModuleList()
        self.multi_level_reg_convs = nn.ModuleList()
        self.multi_level_conv_cls = nn.ModuleList()
        self.multi_level_conv_reg = nn.ModuleList()
        self.multi_level_conv_obj = nn.ModuleList()
        for _ in self.strides:
            self.multi_level_cls_convs.append(self._build_stacked_convs())
            self.multi_level_reg_convs.append(self._build_stacked_convs())
            conv_cls, conv_reg, conv_obj = self._build_predictor()
            self.multi_level_conv_cls.append(conv_cls)
            self.multi_level_conv_reg.append(conv_reg)
            self.multi_level_conv_obj.append(conv_obj)

    def _build_stacked_convs(self):
        conv = DepthwiseSeparableConvModule if self.use_depthwise else ConvModule
        convs = []
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            last_dcn = self.dcn_on_last_conv and i == self.stacked_convs - 1
            convs.append(conv(chn, self.feat_channels, 3, stride=1, padding=1,
                              conv_cfg=dict(type='DCNv2') if last_dcn else self.conv_cfg,
                              norm_cfg=self.norm_cfg, act_cfg=self.act_cfg,
                              bias=self.conv_bias))
        return nn.Sequential(*convs)

    def _build_predictor(self):
        return (nn.Conv2d(self.feat_channels, self.cls_out_channels, 1),
                nn.Conv2d(self.feat_channels, 4, 1), nn.Conv2d(self.feat_channels, 1, 1))

    def _init_prior_biases(self):
        bias = bias_init_with_prob(0.01)
        with torch.no_grad():
            for conv_cls, conv_obj in zip(self.multi_level_conv_cls, self.multi_level_conv_obj):
                conv_cls.bias.fill_(bias)
                conv_obj.bias.fill_(bias)

    # ------------------------------------------------------------- forward
    def forward_single(self, x, cls_convs, reg_convs, conv_cls, conv_reg, conv_obj):
        """One level: ``(cls_score, bbox_pred, objectness)``."""
        cls_feat = cls_convs(x)
        reg_feat = reg_convs(x)
        return conv_cls(cls_feat), conv_reg(reg_feat), conv_obj(reg_feat)

    def _level_function(self, i):
        return partial(self.forward_single, cls_convs=self.multi_level_cls_convs[i],
                       reg_convs=self.multi_level_reg_convs[i],
                       conv_cls=self.multi_level_conv_cls[i],
                       conv_reg=self.multi_level_conv_reg[i],
                       conv_obj=self.multi_level_conv_obj[i])

    # ------------------------------------------------------------- shared
    def _flatten(self, maps, channels, num_imgs):
        return torch.cat([m.permute(0, 2, 3, 1).reshape(num_imgs, -1, channels) for m in maps],
                         dim=1)

    def _priors(self, cls_scores):
        sizes = [s.shape[2:] for s in cls_scores]
        return torch.cat(self.prior_generator.grid_priors(
            sizes, dtype=cls_scores[0].dtype, device=cls_scores[0].device, with_stride=True))

    @staticmethod
    def _bbox_decode(priors, bbox_preds):
        """``(dx, dy, log w, log h)`` in stride units from the prior point to x1y1x2y2."""
        xys = bbox_preds[..., :2] * priors[:, 2:] + priors[:, :2]
        whs = bbox_preds[..., 2:].exp() * priors[:, 2:]
        return torch.stack([xys[..., 0] - whs[..., 0] / 2, xys[..., 1] - whs[..., 1] / 2,
                            xys[..., 0] + whs[..., 0] / 2, xys[..., 1] + whs[..., 1] / 2], -1)

    # ------------------------------------------------------------- inference
    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'objectnesses'))
    def get_bboxes(self, cls_scores, bbox_preds, objectnesses, img_metas=None, cfg=None,
                   rescale=False, with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])``: each prior's best class, scored
        ``class prob x objectness``, kept from ``score_thr`` on, class-wise NMS
        (``(bboxes, scores, labels)`` before NMS with ``with_nms=False``)."""
        if not len(cls_scores) == len(bbox_preds) == len(objectnesses):
            raise ValueError(f'cls_scores, bbox_preds and objectnesses need one entry per '
                             f'level, got {len(cls_scores)}, {len(bbox_preds)}, '
                             f'{len(objectnesses)}')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('YOLOXHead needs test_cfg (score_thr, nms) to predict boxes')
        num_imgs = len(img_metas)
        scores = self._flatten(cls_scores, self.cls_out_channels, num_imgs).sigmoid()
        deltas = self._flatten(bbox_preds, 4, num_imgs)
        objectness = self._flatten(objectnesses, 1, num_imgs)[..., 0].sigmoid()
        bboxes = self._bbox_decode(self._priors(cls_scores), deltas)
        if rescale:
            factors = bboxes.new_tensor(np.array([m['scale_factor'] for m in img_metas]))
            bboxes = bboxes / factors.view(num_imgs, 1, -1)  # [B, 4] or one factor each
        return [self._bboxes_nms(scores[i], bboxes[i], objectness[i], cfg, with_nms)
                for i in range(num_imgs)]

    def _bboxes_nms(self, cls_scores, bboxes, score_factor, cfg, with_nms=True):
        max_scores, labels = torch.max(cls_scores, 1)
        valid = score_factor * max_scores >= cfg_get(cfg, 'score_thr')
        bboxes, labels = bboxes[valid], labels[valid]
        scores = max_scores[valid] * score_factor[valid]
        if not with_nms:
            return bboxes, scores, labels
        if labels.numel() == 0:
            return torch.cat([bboxes, scores[:, None]], -1), labels
        return self._nms(bboxes, scores, labels, cfg)

    # ------------------------------------------------------------- training
    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'objectnesses'))
    def loss(self, cls_scores, bbox_preds, objectnesses, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``loss_cls``, ``loss_bbox``, ``loss_obj`` (and ``loss_l1`` while ``use_l1``), each
        summed and divided by the positives (mean over ranks, at least 1).
        ``gt_bboxes_ignore`` is unused (as mmdet)."""
        if self.train_cfg is None or not hasattr(self, 'assigner'):
            raise ValueError('YOLOXHead needs train_cfg with an assigner to compute losses')
        num_imgs = len(img_metas)
        cls_preds = self._flatten(cls_scores, self.cls_out_channels, num_imgs)
        deltas = self._flatten(bbox_preds, 4, num_imgs)
        objectness = self._flatten(objectnesses, 1, num_imgs)[..., 0]
        priors = self._priors(cls_scores)
        bboxes = self._bbox_decode(priors, deltas)

        targets = [self._get_target_single(cls_preds[i].detach(), objectness[i].detach(),
                                           priors, bboxes[i].detach(), gt_bboxes[i],
                                           gt_labels[i]) for i in range(num_imgs)]
        pos_masks, cls_targets, obj_targets, bbox_targets, l1_targets, num_fg = zip(*targets)
        num_pos = torch.tensor(sum(num_fg), dtype=torch.float, device=cls_preds.device)
        num_total = max(reduce_mean(num_pos), 1.0)
        pos_masks = torch.cat(pos_masks, 0)
        losses = dict(
            loss_cls=self.loss_cls(cls_preds.view(-1, self.num_classes)[pos_masks],
                                   torch.cat(cls_targets, 0)) / num_total,
            loss_bbox=self.loss_bbox(bboxes.view(-1, 4)[pos_masks],
                                     torch.cat(bbox_targets, 0)) / num_total,
            loss_obj=self.loss_obj(objectness.view(-1, 1), torch.cat(obj_targets, 0))
            / num_total)
        if self.use_l1:
            losses['loss_l1'] = self.loss_l1(deltas.view(-1, 4)[pos_masks],
                                             torch.cat(l1_targets, 0)) / num_total
        return losses

    @torch.no_grad()
    def _get_target_single(self, cls_preds, objectness, priors, decoded_bboxes, gt_bboxes,
                           gt_labels):
        """Targets of one image: ``(foreground mask [N], cls targets [P, C] (one-hot x IoU),
        obj targets [N, 1], box targets [P, 4], l1 targets [P, 4], P)``."""
        num_priors = priors.size(0)
        gt_bboxes = gt_bboxes.to(decoded_bboxes.dtype)
        if gt_labels.numel() == 0:
            return (cls_preds.new_zeros(num_priors).bool(),
                    cls_preds.new_zeros((0, self.num_classes)),
                    cls_preds.new_zeros((num_priors, 1)), cls_preds.new_zeros((0, 4)),
                    cls_preds.new_zeros((0, 4)), 0)
        # SimOTA assigns on the cell centres (offset 0.5); the boxes regress from offset 0
        offset_priors = torch.cat([priors[:, :2] + priors[:, 2:] * 0.5, priors[:, 2:]], dim=-1)
        assign_result = self.assigner.assign(
            cls_preds.sigmoid() * objectness.unsqueeze(1).sigmoid(), offset_priors,
            decoded_bboxes, gt_bboxes, gt_labels)
        sampling_result = self.sampler.sample(assign_result, priors, gt_bboxes)
        pos_inds = sampling_result.pos_inds
        num_pos = pos_inds.size(0)
        pos_ious = assign_result.max_overlaps[pos_inds]
        cls_target = F.one_hot(sampling_result.pos_gt_labels, self.num_classes) * \
            pos_ious.unsqueeze(-1)
        obj_target = torch.zeros_like(objectness).unsqueeze(-1)
        obj_target[pos_inds] = 1
        bbox_target = sampling_result.pos_gt_bboxes
        l1_target = cls_preds.new_zeros((num_pos, 4))
        if self.use_l1:
            l1_target = self._get_l1_target(l1_target, bbox_target, priors[pos_inds])
        fg_mask = torch.zeros_like(objectness).to(torch.bool)
        fg_mask[pos_inds] = 1
        return fg_mask, cls_target, obj_target, bbox_target, l1_target, num_pos

    def _get_l1_target(self, l1_target, gt_bboxes, priors, eps=1e-8):
        """The gt as the head's raw outputs: centre offset in strides, log size in strides."""
        gt = _xyxy_to_cxcywh(gt_bboxes)
        l1_target[:, :2] = (gt[:, :2] - priors[:, :2]) / priors[:, 2:]
        l1_target[:, 2:] = torch.log(gt[:, 2:] / priors[:, 2:] + eps)
        return l1_target
