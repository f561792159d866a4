"""mmdet 2.x ``YOLOV3Head``: per level a 3x3 ConvModule bridge (``convs_bridge.{i}``) and a 1x1
prediction conv (``convs_pred.{i}``) giving, per anchor, (x, y, w, h, objectness, classes).
State-dict keys equal mmdet's, so mmdet 2.x YOLOv3 checkpoints load.

Training (mmdet's): anchors are assigned by :class:`GridAssigner` among the *responsible*
anchors (the grid cell of a ground truth's centre); binary cross-entropy on the sigmoid centre
offsets, the objectness (positives and negatives) and the classes (optionally smoothed by
``one_hot_smoother``), MSE on the log sizes; each a mean over its level (lists over levels).
Testing: decoded boxes of every anchor, optionally only those with objectness at least
``conf_thr``, then class-wise NMS of ``class score * objectness``.

Checkpoint units (:mod:`ckptzoo.models.checkpointing`): ``level{i}``, one per level, covering
that level's bridge and prediction conv.
"""
from functools import partial
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.anchor import images_to_levels
from ...core.post_processing.bbox_nms import multiclass_nms
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, bias_init_with_prob, constant_init, normal_init
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['YOLOV3Head']


@MODELS.register_module()
class YOLOV3Head(LevelUnitsMixin, BaseDenseHead):
    """YOLOv3 head (Redmon and Farhadi 2018), mmdet 2.28 arguments.

    Args:
        num_classes (int): foreground classes.
        in_channels (list[int]): channels of each input level (coarsest first).
        out_channels (list[int]): channels of each level's bridge conv.
        anchor_generator (dict): a ``YOLOAnchorGenerator`` (COCO's 9 anchors by default).
        bbox_coder (dict): a ``YOLOBBoxCoder``.
        featmap_strides (list[int]): per level.
        one_hot_smoother (float): label smoothing of the class targets.
        conv_cfg, norm_cfg, act_cfg (dict | None): of the bridge convs.
        loss_cls, loss_conf, loss_xy, loss_wh (dict): loss configs.
        train_cfg (dict): ``assigner`` (and ``sampler``, PseudoSampler by default).
        test_cfg (dict): ``conf_thr``, ``score_thr``, ``nms``, ``max_per_img`` (``nms_pre``
            and ``min_bbox_size`` are accepted as mmdet's configs have them, and unused, as
            in mmdet).
        init_cfg (dict): mmdet's head initialises itself (its ``init_weights``: Normal(0.01)
            convs, the objectness bias at prior ``8 / (608 / stride) ** 2``, the class bias at
            0.01) whatever ``init_cfg`` says; so does this one, at construction. A
            ``Pretrained`` init_cfg is loaded by ``init_weights``.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet 2.x argument;
            default False). ``set_checkpoint_plan`` changes modes later.
        cp_use_reentrant (bool): torch's reentrant checkpoint instead of the non-reentrant one.
    """

    TRAIN_CFG_KEYS = ('assigner', 'sampler', 'debug')
    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'score_thr', 'conf_thr', 'nms', 'max_per_img')

    def __init__(self, num_classes, in_channels, out_channels=(1024, 512, 256),
                 anchor_generator=dict(type='YOLOAnchorGenerator',
                                       base_sizes=[[(116, 90), (156, 198), (373, 326)],
                                                   [(30, 61), (62, 45), (59, 119)],
                                                   [(10, 13), (16, 30), (33, 23)]],
                                       strides=[32, 16, 8]),
                 bbox_coder=dict(type='YOLOBBoxCoder'), featmap_strides=[32, 16, 8],
                 one_hot_smoother=0., conv_cfg=None, norm_cfg=dict(type='BN', requires_grad=True),
                 act_cfg=dict(type='LeakyReLU', negative_slope=0.1),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_conf=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_xy=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_wh=dict(type='MSELoss', loss_weight=1.0), train_cfg=None, test_cfg=None,
                 init_cfg=dict(type='Normal', std=0.01, override=dict(name='convs_pred')),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not len(in_channels) == len(out_channels) == len(featmap_strides):
            raise ValueError(f'in_channels, out_channels and featmap_strides need one entry per '
                             f'level, got {in_channels!r}, {out_channels!r}, '
                             f'{featmap_strides!r}')
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner='YOLOV3Head')
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.featmap_strides = featmap_strides
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            sampler = cfg_get(train_cfg, 'sampler') or dict(type='PseudoSampler')
            self.sampler = TASK_UTILS.build(sampler)
        self.fp16_enabled = False
        self.one_hot_smoother = one_hot_smoother
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.act_cfg = act_cfg
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.prior_generator = TASK_UTILS.build(anchor_generator)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_conf = MODELS.build(loss_conf)
        self.loss_xy = MODELS.build(loss_xy)
        self.loss_wh = MODELS.build(loss_wh)
        self.num_base_priors = self.prior_generator.num_base_priors[0]
        if len(self.prior_generator.num_base_priors) != len(featmap_strides):
            raise ValueError(f'the anchor generator has {self.prior_generator.num_levels} '
                             f'levels, featmap_strides {len(featmap_strides)}')
        self._init_layers()
        self._init_yolo_weights()
        self._init_level_units(with_cp, cp_use_reentrant)

    @property
    def anchor_generator(self):
        """mmdet < 2.18 name of ``prior_generator``."""
        return self.prior_generator

    @property
    def num_anchors(self):
        """mmdet < 2.18 name of ``num_base_priors``."""
        return self.num_base_priors

    @property
    def num_levels(self):
        return len(self.featmap_strides)

    @property
    def num_attrib(self):
        """Numbers per anchor: 4 box, 1 objectness, ``num_classes`` class scores."""
        return 5 + self.num_classes

    def _init_layers(self):
        self.convs_bridge = nn.ModuleList()
        self.convs_pred = nn.ModuleList()
        for i in range(self.num_levels):
            self.convs_bridge.append(ConvModule(
                self.in_channels[i], self.out_channels[i], 3, padding=1,
                conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg, act_cfg=self.act_cfg))
            self.convs_pred.append(nn.Conv2d(self.out_channels[i],
                                             self.num_base_priors * self.num_attrib, 1))

    def _init_yolo_weights(self):
        """mmdet's ``YOLOV3Head.init_weights``."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                normal_init(m, mean=0, std=0.01)
            if isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm,
                              nn.modules.instancenorm._InstanceNorm, nn.LayerNorm)):
                constant_init(m, 1)
        for conv_pred, stride in zip(self.convs_pred, self.featmap_strides):
            if conv_pred.bias.is_meta:
                continue
            bias = conv_pred.bias.data.view(self.num_base_priors, -1)
            bias[:, 4] = bias_init_with_prob(8 / (608 / stride)**2)
            bias[:, 5:] = bias_init_with_prob(0.01)

    def _level_function(self, level):
        """Each level has its own layers: ``forward_single`` with the level's index."""
        return partial(self.forward_single, level=level)

    def forward_single(self, x, level):
        """``(pred_map [B, A * (5 + C), H, W],)`` of level ``level``."""
        return (self.convs_pred[level](self.convs_bridge[level](x)), )

    # ------------------------------------------------------------- inference
    @force_fp32(apply_to=('pred_maps', ))
    def get_bboxes(self, pred_maps, img_metas, cfg=None, rescale=False, with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` (mmdet's); with
        ``with_nms=False`` ``(bboxes [n, 4], scores [n, C + 1], objectness [n])`` before the
        NMS (mmdet 2.28 ran the NMS whatever ``with_nms`` said, which broke its
        ``aug_test``)."""
        if len(pred_maps) != self.num_levels:
            raise ValueError(f'YOLOV3Head needs {self.num_levels} pred_maps, got '
                             f'{len(pred_maps)}')
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('YOLOV3Head needs test_cfg (score_thr, nms, max_per_img) to '
                             'predict boxes')
        num_imgs = len(img_metas)
        if num_imgs != pred_maps[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        scale_factors = np.array([meta['scale_factor'] for meta in img_metas])
        featmap_sizes = [p.shape[-2:] for p in pred_maps]
        mlvl_anchors = self.prior_generator.grid_priors(featmap_sizes,
                                                        device=pred_maps[0].device)
        preds, strides = [], []
        for pred, stride in zip(pred_maps, self.featmap_strides):
            pred = pred.detach().permute(0, 2, 3, 1).reshape(num_imgs, -1, self.num_attrib)
            preds.append(torch.cat([pred[..., :2].sigmoid(), pred[..., 2:]], -1))
            strides.append(pred.new_tensor(stride).expand(pred.size(1)))
        preds = torch.cat(preds, dim=1)
        objectness = preds[..., 4].sigmoid()
        cls_scores = preds[..., 5:].sigmoid()
        bboxes = self.bbox_coder.decode(torch.cat(mlvl_anchors), preds[..., :4],
                                        torch.cat(strides).unsqueeze(-1))
        if rescale:
            bboxes = bboxes / bboxes.new_tensor(scale_factors).unsqueeze(1)
        cls_scores = torch.cat([cls_scores, cls_scores.new_zeros(*cls_scores.shape[:2], 1)],
                               -1)  # the background column multiclass_nms drops
        conf_thr = cfg_get(cfg, 'conf_thr', -1)
        results = []
        for img_bboxes, scores, conf in zip(bboxes, cls_scores, objectness):
            if conf_thr > 0:
                keep = conf >= conf_thr
                img_bboxes, scores, conf = img_bboxes[keep], scores[keep], conf[keep]
            if not with_nms:
                results.append((img_bboxes, scores, conf))
                continue
            results.append(multiclass_nms(img_bboxes, scores, cfg_get(cfg, 'score_thr'),
                                          cfg_get(cfg, 'nms'), cfg_get(cfg, 'max_per_img', -1),
                                          score_factors=conf))
        return results

    def aug_test(self, feats, img_metas, rescale=False):
        """mmdet's ``aug_test_bboxes``: every augmentation's boxes (before NMS) mapped back to
        the original image, then class-wise NMS of the merged boxes."""
        from ...core.bbox import bbox_mapping_back
        if any(len(metas) != 1 for metas in img_metas):
            raise ValueError(f'aug_test takes one image per augmentation, got '
                             f'{[len(m) for m in img_metas]}')
        all_bboxes, all_scores, all_conf = [], [], []
        for x, metas in zip(feats, img_metas):
            bboxes, scores, conf = self.get_bboxes(*self(x), img_metas=metas, rescale=False,
                                                   with_nms=False)[0]
            meta = metas[0]
            all_bboxes.append(bbox_mapping_back(bboxes, meta['img_shape'], meta['scale_factor'],
                                                meta.get('flip', False),
                                                meta.get('flip_direction') or 'horizontal'))
            all_scores.append(scores)
            all_conf.append(conf)
        bboxes, scores = torch.cat(all_bboxes), torch.cat(all_scores)
        cfg = self.test_cfg
        dets, labels = multiclass_nms(bboxes, scores, cfg_get(cfg, 'score_thr'),
                                      cfg_get(cfg, 'nms'), cfg_get(cfg, 'max_per_img', -1),
                                      score_factors=torch.cat(all_conf))
        if not rescale:
            dets = dets.clone()
            dets[:, :4] *= dets.new_tensor(img_metas[0][0]['scale_factor'])
        return [(dets, labels)]

    # ------------------------------------------------------------------ loss
    @force_fp32(apply_to=('pred_maps', ))
    def loss(self, pred_maps, gt_bboxes, gt_labels, img_metas, gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_conf, loss_xy, loss_wh)``, each a list over levels.
        ``gt_bboxes_ignore`` is not supported (mmdet ignored it); giving boxes fails."""
        if not self.train_cfg:
            raise ValueError(f'YOLOV3Head.loss needs train_cfg (assigner), got '
                             f'{self.train_cfg!r}')
        if gt_bboxes_ignore is not None and any(g is not None and g.numel()
                                                for g in gt_bboxes_ignore):
            raise NotImplementedError('YOLOV3Head has no gt_bboxes_ignore (mmdet 2.x dropped '
                                      'them silently)')
        num_imgs = len(img_metas)
        device = pred_maps[0][0].device
        featmap_sizes = [pred_maps[i].shape[-2:] for i in range(self.num_levels)]
        mlvl_anchors = self.prior_generator.grid_priors(featmap_sizes, device=device)
        anchor_list = [mlvl_anchors for _ in range(num_imgs)]
        responsible_flag_list = [self.prior_generator.responsible_flags(
            featmap_sizes, gt_bboxes[i], device) for i in range(num_imgs)]
        target_maps_list, neg_maps_list = self.get_targets(anchor_list, responsible_flag_list,
                                                           gt_bboxes, gt_labels)
        losses = [self.loss_single(*args) for args in zip(pred_maps, target_maps_list,
                                                            neg_maps_list)]
        losses_cls, losses_conf, losses_xy, losses_wh = (list(x) for x in zip(*losses))
        return dict(loss_cls=losses_cls, loss_conf=losses_conf, loss_xy=losses_xy,
                    loss_wh=losses_wh)

    def loss_single(self, pred_map, target_map, neg_map):
        """One level: ``pred_map [B, A*(5+C), H, W]``, ``target_map [B, H*W*A, 5+C]``,
        ``neg_map [B, H*W*A]``."""
        num_imgs = len(pred_map)
        pred_map = pred_map.permute(0, 2, 3, 1).reshape(num_imgs, -1, self.num_attrib)
        neg_mask = neg_map.float()
        pos_mask = target_map[..., 4]
        pos_and_neg_mask = neg_mask + pos_mask
        pos_mask = pos_mask.unsqueeze(dim=-1)
        if torch.max(pos_and_neg_mask) > 1.:
            warnings.warn('There is overlap between pos and neg sample.')
            pos_and_neg_mask = pos_and_neg_mask.clamp(min=0., max=1.)
        loss_cls = self.loss_cls(pred_map[..., 5:], target_map[..., 5:], weight=pos_mask)
        loss_conf = self.loss_conf(pred_map[..., 4], target_map[..., 4],
                                   weight=pos_and_neg_mask)
        loss_xy = self.loss_xy(pred_map[..., :2], target_map[..., :2], weight=pos_mask)
        loss_wh = self.loss_wh(pred_map[..., 2:4], target_map[..., 2:4], weight=pos_mask)
        return loss_cls, loss_conf, loss_xy, loss_wh

    def get_targets(self, anchor_list, responsible_flag_list, gt_bboxes_list, gt_labels_list):
        """Per level ``target_maps [B, n, 5+C]`` and ``neg_maps [B, n]``."""
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        results = [self._get_targets_single(*args) for args in zip(
            anchor_list, responsible_flag_list, gt_bboxes_list, gt_labels_list)]
        target_maps, neg_maps = zip(*results)
        return (images_to_levels(list(target_maps), num_level_anchors),
                images_to_levels(list(neg_maps), num_level_anchors))

    def _get_targets_single(self, anchors, responsible_flags, gt_bboxes, gt_labels):
        anchor_strides = torch.cat([
            torch.tensor(self.featmap_strides[i], device=gt_bboxes.device).repeat(len(a))
            for i, a in enumerate(anchors)])
        concat_anchors = torch.cat(anchors)
        concat_flags = torch.cat(responsible_flags)
        assign_result = self.assigner.assign(concat_anchors, concat_flags, gt_bboxes)
        sampling_result = self.sampler.sample(assign_result, concat_anchors, gt_bboxes)
        pos = sampling_result.pos_inds
        target_map = concat_anchors.new_zeros(concat_anchors.size(0), self.num_attrib)
        target_map[pos, :4] = self.bbox_coder.encode(
            sampling_result.pos_bboxes, sampling_result.pos_gt_bboxes,
            anchor_strides[pos]).to(target_map.dtype)
        target_map[pos, 4] = 1
        one_hot = F.one_hot(gt_labels, num_classes=self.num_classes).float()
        if self.one_hot_smoother != 0:
            one_hot = one_hot * (1 - self.one_hot_smoother) + \
                self.one_hot_smoother / self.num_classes
        target_map[pos, 5:] = one_hot[sampling_result.pos_assigned_gt_inds].to(target_map.dtype)
        neg_map = concat_anchors.new_zeros(concat_anchors.size(0), dtype=torch.uint8)
        neg_map[sampling_result.neg_inds] = 1
        return target_map, neg_map
