"""mmdet 2.x ``SABLRetinaHead`` (Side-Aware Boundary Localization, Wang et al. 2020,
https://arxiv.org/abs/1912.04260) for RetinaNet.

RetinaNet's two towers; the box of each square anchor (one per position, assigned by its
approxes as in guided anchoring: :class:`ApproxMaxIoUAssigner`) is coded per side as a bucket
and an offset (:class:`BucketingBBoxCoder`): ``retina_bbox_cls`` scores the buckets of each
side, ``retina_bbox_reg`` regresses the offsets, and at test the buckets' confidence rescales
the class scores. State-dict keys equal mmdet's.

Checkpoint units: ``level{i}``, one per pyramid level (:class:`LevelUnitsMixin`); a level's
unit returns its three maps flat, :meth:`SABLRetinaHead.forward` groups them as mmdet
(``bbox_preds[i] = (bbox_cls_pred, bbox_reg_pred)``).
"""
import math

import torch
import torch.nn as nn

from ...core.anchor import images_to_levels
from ...core.utils import unmap
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..checkpointing import unit_step
from ..utils import ConvModule, apply_init_cfg
from .base_dense_head import BaseDenseHead
from .guided_anchor_head import GuidedAnchorHead
from .level_units import LevelUnitsMixin

__all__ = ['SABLRetinaHead']


@MODELS.register_module()
class SABLRetinaHead(LevelUnitsMixin, BaseDenseHead):
    """SABL RetinaNet head, mmdet 2.x arguments.

    Args:
        num_classes, in_channels, stacked_convs, feat_channels (int); conv_cfg, norm_cfg
            (dict): as :class:`RetinaHead`.
        approx_anchor_generator, square_anchor_generator (dict): as
            :class:`GuidedAnchorHead` (``octave_base_scale`` = the square's scale).
        bbox_coder (dict): a :class:`BucketingBBoxCoder` (``num_buckets``, ``scale_factor``).
        reg_decoded_bbox (bool): accepted as mmdet's (unused there too).
        loss_cls, loss_bbox_cls, loss_bbox_reg (dict): class, bucket and offset losses.
        train_cfg (dict): ``assigner`` (an :class:`ApproxMaxIoUAssigner`), ``sampler``
            (used only with a sampling ``loss_cls``), ``allowed_border``, ``pos_weight``,
            ``debug``. test_cfg (dict): ``nms_pre``, ``min_bbox_size``, ``score_thr``,
            ``nms``, ``max_per_img``.
        init_cfg (dict): Normal(std=0.01) convs, the focal prior on ``retina_cls``.
        with_cp, cp_use_reentrant (bool): ``'full'`` checkpointing of every level (not mmdet
            2.x arguments; default False).
    """

    TRAIN_CFG_KEYS = ('assigner', 'sampler', 'allowed_border', 'pos_weight', 'debug')
    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'score_thr', 'nms', 'max_per_img')
    SAMPLING_FREE_LOSSES = ('FocalLoss', 'GHMC', 'QualityFocalLoss')

    def __init__(self, num_classes, in_channels, stacked_convs=4, feat_channels=256,
                 approx_anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                              scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                              strides=[8, 16, 32, 64, 128]),
                 square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[4],
                                              strides=[8, 16, 32, 64, 128]),
                 conv_cfg=None, norm_cfg=None,
                 bbox_coder=dict(type='BucketingBBoxCoder', num_buckets=14, scale_factor=3.0),
                 reg_decoded_bbox=False, train_cfg=None, test_cfg=None,
                 loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                               loss_weight=1.0),
                 loss_bbox_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.5),
                 loss_bbox_reg=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=1.5),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='retina_cls', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 0):
            raise ValueError(f'stacked_convs must be a non-negative int, got {stacked_convs!r}')
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner=type(self).__name__)
        if approx_anchor_generator.get('octave_base_scale') != \
                square_anchor_generator['scales'][0] or \
                list(approx_anchor_generator['strides']) != \
                list(square_anchor_generator['strides']):
            raise ValueError('approx_anchor_generator.octave_base_scale must be '
                             'square_anchor_generator.scales[0] and their strides the same, '
                             f'got {approx_anchor_generator!r} and {square_anchor_generator!r}')
        if bbox_coder.get('type') != 'BucketingBBoxCoder':
            raise ValueError(f"SABLRetinaHead needs bbox_coder=dict(type='BucketingBBoxCoder', "
                             f'...), got {bbox_coder!r}')
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.num_buckets = bbox_coder['num_buckets']
        self.side_num = int(math.ceil(self.num_buckets / 2))
        self.approx_anchor_generator = TASK_UTILS.build(approx_anchor_generator)
        self.square_anchor_generator = TASK_UTILS.build(square_anchor_generator)
        self.approxs_per_octave = self.approx_anchor_generator.num_base_priors[0]
        self.num_base_priors = self.square_anchor_generator.num_base_priors[0]
        if self.num_base_priors != 1:
            raise ValueError(f'square_anchor_generator must give one anchor per position, got '
                             f'{self.num_base_priors}')
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.reg_decoded_bbox = reg_decoded_bbox
        self.use_sigmoid_cls = loss_cls.get('use_sigmoid', False)
        self.sampling = loss_cls['type'] not in self.SAMPLING_FREE_LOSSES
        self.cls_out_channels = num_classes if self.use_sigmoid_cls else num_classes + 1
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox_cls = MODELS.build(loss_bbox_cls)
        self.loss_bbox_reg = MODELS.build(loss_bbox_reg)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            sampler = cfg_get(train_cfg, 'sampler') if self.sampling else None
            self.sampler = TASK_UTILS.build(sampler or dict(type='PseudoSampler'))
        self.fp16_enabled = False
        self._init_layers()
        apply_init_cfg(self, init_cfg)
        self._init_level_units(with_cp, cp_use_reentrant)

    @property
    def prior_generator(self):
        """The square anchors (one per position): what the levels are counted by."""
        return self.square_anchor_generator

    @property
    def num_anchors(self):
        return self.num_base_priors

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        self.retina_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)
        self.retina_bbox_reg = nn.Conv2d(self.feat_channels, self.side_num * 4, 3, padding=1)
        self.retina_bbox_cls = nn.Conv2d(self.feat_channels, self.side_num * 4, 3, padding=1)

    def _forward_level(self, x):
        """A level's unit: ``(cls_score, bbox_cls_pred, bbox_reg_pred)``, flat."""
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        return (self.retina_cls(cls_feat), self.retina_bbox_cls(reg_feat),
                self.retina_bbox_reg(reg_feat))

    def forward_single(self, x):
        """``(cls_score, (bbox_cls_pred, bbox_reg_pred))`` of one level, as mmdet."""
        cls_score, bbox_cls_pred, bbox_reg_pred = self._forward_level(x)
        return cls_score, (bbox_cls_pred, bbox_reg_pred)

    def _checkpoint_steps(self):
        return [[unit_step(f'level{i}', unit, self._forward_level, self)]
                for i, unit in enumerate(self.level_units)]

    def forward(self, feats):
        """``(cls_scores, bbox_preds)`` over levels, ``bbox_preds[i] = (bbox_cls_pred,
        bbox_reg_pred)``; each level through its unit."""
        if len(feats) != len(self.level_units):
            raise ValueError(f'{type(self).__name__} expects {len(self.level_units)} levels '
                             f'(one per anchor stride), got {len(feats)}')
        outs = [unit(self._forward_level, x) for unit, x in zip(self.level_units, feats)]
        return [o[0] for o in outs], [(o[1], o[2]) for o in outs]

    # ---------------------------------------------------------------- targets
    get_sampled_approxs = GuidedAnchorHead.get_sampled_approxs

    def get_anchors(self, featmap_sizes, img_metas, device='cpu'):
        """The squares of each image, per level (the same for every image)."""
        squares = self.square_anchor_generator.grid_priors(featmap_sizes, device=device)
        return [squares for _ in img_metas]

    def get_target(self, approx_list, inside_flag_list, square_list, gt_bboxes_list, img_metas,
                   gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=None,
                   sampling=True, unmap_outputs=True):
        """Per level ``(labels, label_weights, bucket labels, their weights, offsets, their
        weights)`` over the batch, and the positive / negative counts (at least 1 per
        image). mmdet's name (``get_target``)."""
        num_imgs = len(img_metas)
        if not len(approx_list) == len(inside_flag_list) == len(square_list) == num_imgs:
            raise ValueError('approxes, inside flags and squares need one entry per image')
        num_level_squares = [s.size(0) for s in square_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_target_single(
            torch.cat(approx_list[i]), torch.cat(inside_flag_list[i]), torch.cat(square_list[i]),
            gt_bboxes_list[i], gt_bboxes_ignore_list[i], gt_labels_list[i], img_metas[i],
            label_channels, sampling, unmap_outputs) for i in range(num_imgs)]
        results = list(zip(*results))
        num_total_pos = sum(max(i.numel(), 1) for i in results[6])
        num_total_neg = sum(max(i.numel(), 1) for i in results[7])
        return tuple(images_to_levels(r, num_level_squares) for r in results[:6]) + (
            num_total_pos, num_total_neg)

    def _get_target_single(self, flat_approxs, inside_flags, flat_squares, gt_bboxes,
                           gt_bboxes_ignore, gt_labels, img_meta, label_channels=None,
                           sampling=True, unmap_outputs=True):
        if not inside_flags.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}); use allowed_border=-1')
        expand = inside_flags[:, None].expand(-1, self.approxs_per_octave).reshape(-1)
        approxs = flat_approxs[expand, :]
        squares = flat_squares[inside_flags, :]
        assign_result = self.assigner.assign(approxs, squares, self.approxs_per_octave,
                                             gt_bboxes, gt_bboxes_ignore)
        sampling_result = self.sampler.sample(assign_result, squares, gt_bboxes)
        num_valid = squares.shape[0]
        bbox_cls_targets, bbox_cls_weights, bbox_reg_targets, bbox_reg_weights = (
            squares.new_zeros((num_valid, self.side_num * 4)) for _ in range(4))
        labels = squares.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = squares.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            reg_targets, reg_weights, cls_targets, cls_weights = self.bbox_coder.encode(
                sampling_result.pos_bboxes, sampling_result.pos_gt_bboxes)
            bbox_cls_targets[pos_inds, :] = cls_targets.to(squares.dtype)
            bbox_reg_targets[pos_inds, :] = reg_targets.to(squares.dtype)
            bbox_cls_weights[pos_inds, :] = cls_weights.to(squares.dtype)
            bbox_reg_weights[pos_inds, :] = reg_weights.to(squares.dtype)
            if gt_labels is None:
                labels[pos_inds] = 0  # one foreground class
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        if unmap_outputs:
            total = flat_squares.size(0)
            labels = unmap(labels, total, inside_flags, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside_flags)
            bbox_cls_targets = unmap(bbox_cls_targets, total, inside_flags)
            bbox_cls_weights = unmap(bbox_cls_weights, total, inside_flags)
            bbox_reg_targets = unmap(bbox_reg_targets, total, inside_flags)
            bbox_reg_weights = unmap(bbox_reg_weights, total, inside_flags)
        return (labels, label_weights, bbox_cls_targets, bbox_cls_weights, bbox_reg_targets,
                bbox_reg_weights, pos_inds, neg_inds)

    # ------------------------------------------------------------------ loss
    def loss_single(self, cls_score, bbox_pred, labels, label_weights, bbox_cls_targets,
                    bbox_cls_weights, bbox_reg_targets, bbox_reg_weights, num_total_samples):
        """One level: the class loss over the samples, the bucket loss over the samples x 4
        sides x buckets, the offset loss over the samples x 4 sides x ``offset_topk``."""
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
        loss_cls = self.loss_cls(cls_score, labels.reshape(-1), label_weights.reshape(-1),
                                 avg_factor=num_total_samples)
        n = self.side_num * 4
        bbox_cls_pred, bbox_reg_pred = bbox_pred
        bbox_cls_pred = bbox_cls_pred.permute(0, 2, 3, 1).reshape(-1, n)
        bbox_reg_pred = bbox_reg_pred.permute(0, 2, 3, 1).reshape(-1, n)
        loss_bbox_cls = self.loss_bbox_cls(
            bbox_cls_pred, bbox_cls_targets.reshape(-1, n).long(),
            bbox_cls_weights.reshape(-1, n), avg_factor=num_total_samples * n)
        loss_bbox_reg = self.loss_bbox_reg(
            bbox_reg_pred, bbox_reg_targets.reshape(-1, n), bbox_reg_weights.reshape(-1, n),
            avg_factor=num_total_samples * 4 * self.bbox_coder.offset_topk)
        return loss_cls, loss_bbox_cls, loss_bbox_reg

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox_cls, loss_bbox_reg)``, each a list over levels."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg (assigner, ...), '
                             f'got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.approx_anchor_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generators '
                             f'have {self.approx_anchor_generator.num_levels} strides')
        device = cls_scores[0].device
        approxs_list, inside_flag_list = self.get_sampled_approxs(featmap_sizes, img_metas,
                                                                  device=device)
        square_list = self.get_anchors(featmap_sizes, img_metas, device=device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        targets = self.get_target(approxs_list, inside_flag_list, square_list, gt_bboxes,
                                  img_metas, gt_bboxes_ignore_list=gt_bboxes_ignore,
                                  gt_labels_list=gt_labels, label_channels=label_channels,
                                  sampling=self.sampling)
        num_total_pos, num_total_neg = targets[6:]
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        losses = [self.loss_single(*args, num_total_samples=num_total_samples)
                  for args in zip(cls_scores, bbox_preds, *targets[:6])]
        loss_cls, loss_bbox_cls, loss_bbox_reg = (list(x) for x in zip(*losses))
        return dict(loss_cls=loss_cls, loss_bbox_cls=loss_bbox_cls, loss_bbox_reg=loss_bbox_reg)

    # ------------------------------------------------------------- inference
    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def get_bboxes(self, cls_scores, bbox_preds, img_metas=None, cfg=None, rescale=False,
                   with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` (``(bboxes, scores, labels)``
        with ``with_nms=False``, which mmdet's SABL head lacked, for :meth:`aug_test`)."""
        if len(cls_scores) != len(bbox_preds):
            raise ValueError(f'cls_scores and bbox_preds need one entry per level, got '
                             f'{len(cls_scores)} and {len(bbox_preds)}')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        mlvl_anchors = self.get_anchors(featmap_sizes, img_metas, device=cls_scores[0].device)
        results = []
        for i, meta in enumerate(img_metas):
            results.append(self._get_bboxes_single(
                [s[i].detach() for s in cls_scores], [b[0][i].detach() for b in bbox_preds],
                [b[1][i].detach() for b in bbox_preds], mlvl_anchors[i], meta['img_shape'],
                meta['scale_factor'], cfg, rescale, with_nms))
        return results

    def _get_bboxes_single(self, cls_scores, bbox_cls_preds, bbox_reg_preds, mlvl_anchors,
                           img_shape, scale_factor, cfg, rescale=False, with_nms=True):
        """mmdet's: per level the ``nms_pre`` best (square, class) scores above
        ``score_thr``, their boxes decoded from the buckets, the scores times the bucket
        confidence, then class-wise NMS and ``max_per_img``."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg to predict boxes')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        n = self.side_num * 4
        mlvl_bboxes, mlvl_scores, mlvl_confids, mlvl_labels = [], [], [], []
        for cls_score, bbox_cls_pred, bbox_reg_pred, anchors in zip(
                cls_scores, bbox_cls_preds, bbox_reg_preds, mlvl_anchors):
            cls_score = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            scores = cls_score.sigmoid() if self.use_sigmoid_cls \
                else cls_score.softmax(-1)[:, :-1]
            bbox_cls_pred = bbox_cls_pred.permute(1, 2, 0).reshape(-1, n)
            bbox_reg_pred = bbox_reg_pred.permute(1, 2, 0).reshape(-1, n)
            valid = scores > score_thr
            scores = scores[valid]
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores.sort(descending=True)
            if nms_pre is not None and nms_pre > 0:  # mmdet drops one box for nms_pre=-1
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            bboxes, confids = self.bbox_coder.decode(
                anchors[keep].contiguous(),
                [bbox_cls_pred[keep].contiguous(), bbox_reg_pred[keep].contiguous()],
                max_shape=img_shape)
            mlvl_bboxes.append(bboxes)
            mlvl_scores.append(scores)
            mlvl_confids.append(confids)
            mlvl_labels.append(labels)
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes, scale_factor, cfg,
                                       rescale, with_nms, mlvl_confids)
