"""mmdet 2.x ``AnchorHead``: anchor-based dense head training targets, losses and decoding.

Subclasses build their layers in ``_init_layers`` and implement ``forward_single(x) ->
(cls_score, bbox_pred)`` per pyramid level; this class turns those into mmdet 2.x losses
(``loss``) and detections (``get_bboxes``).
"""
import torch
import torch.nn as nn

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.bbox import bbox_flip, bbox_mapping, bbox_mapping_back
from ...core.utils import unmap
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import apply_init_cfg
from .base_dense_head import BaseDenseHead

__all__ = ['AnchorHead', 'anchor_inside_flags', 'bbox_flip', 'bbox_mapping',
           'bbox_mapping_back', 'images_to_levels', 'unmap']


@MODELS.register_module()
class AnchorHead(BaseDenseHead):
    """Anchor-based head, mmdet 2.x arguments.

    Args:
        num_classes (int): foreground classes (background is index ``num_classes``).
        in_channels (int): channels of each input level.
        feat_channels (int): channels of the hidden convs (subclasses).
        anchor_generator, bbox_coder, loss_cls, loss_bbox (dict): configs.
        reg_decoded_bbox (bool): regress decoded boxes (for IoU losses) instead of deltas.
        train_cfg (dict): ``assigner``, ``allowed_border``, ``pos_weight``, ``debug``,
            ``sampler`` (``PseudoSampler`` by default; another sampler, e.g. the RPN's
            ``RandomSampler``, makes the losses averages over the sampled anchors).
        test_cfg (dict): ``nms_pre``, ``min_bbox_size``, ``score_thr``, ``nms``,
            ``max_per_img``.
        init_cfg (dict): mmcv init_cfg, applied at construction.

    Another key of ``train_cfg`` / ``test_cfg`` fails at construction (mmdet ignored a typo
    such as ``score_thrs``); ``debug`` is accepted as mmdet's configs have it, and unused.
    """

    TRAIN_CFG_KEYS = ('assigner', 'sampler', 'allowed_border', 'pos_weight', 'debug')
    SAMPLING_FREE_LOSSES = ('FocalLoss', 'GHMC', 'QualityFocalLoss')
    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'score_thr', 'nms', 'max_per_img')

    def __init__(self, num_classes, in_channels, feat_channels=256,
                 anchor_generator=dict(type='AnchorGenerator', scales=[8, 16, 32],
                                       ratios=[0.5, 1.0, 2.0], strides=[4, 8, 16, 32, 64]),
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder', clip_border=True,
                                 target_means=(.0, .0, .0, .0),
                                 target_stds=(1.0, 1.0, 1.0, 1.0)),
                 reg_decoded_bbox=False,
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_bbox=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=1.0),
                 train_cfg=None, test_cfg=None,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01)):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner=type(self).__name__)
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.use_sigmoid_cls = loss_cls.get('use_sigmoid', False)
        self.cls_out_channels = num_classes if self.use_sigmoid_cls else num_classes + 1
        self.reg_decoded_bbox = reg_decoded_bbox
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        self.sampling = False
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            self.sampler = self._build_sampler(cfg_get(train_cfg, 'sampler'), loss_cls)
        self.fp16_enabled = False
        self.prior_generator = TASK_UTILS.build(anchor_generator)
        self.num_base_priors = self.prior_generator.num_base_priors[0]
        self._init_layers()
        apply_init_cfg(self, init_cfg)

    def _build_sampler(self, sampler, loss_cls):
        """mmdet 2.x: a sampler other than ``PseudoSampler`` turns on ``sampling`` (losses
        averaged over the sampled positives and negatives, anchors assigned without labels).

        mmdet replaced a sampler given with a focal-type loss by ``PseudoSampler`` with a
        deprecation warning; that combination fails here instead, as does a sampler that would
        add the ground truths to the anchors (``add_gt_as_proposals``), which mmdet only
        rejected at the first training step."""
        kind = None if sampler is None else sampler.get('type')
        kind = getattr(kind, '__name__', str(kind)).split('.')[-1]
        if sampler is None or kind == 'PseudoSampler':
            return TASK_UTILS.build(dict(type='PseudoSampler'))
        if loss_cls.get('type') in self.SAMPLING_FREE_LOSSES:
            raise NotImplementedError(
                f"{type(self).__name__} with loss_cls {loss_cls.get('type')} samples no "
                f"anchors: leave train_cfg.sampler out or set dict(type='PseudoSampler') "
                f'(mmdet 2.x replaced it by PseudoSampler with a deprecation warning), got '
                f'{sampler!r}')
        self.sampling = True
        built = TASK_UTILS.build(sampler)
        if getattr(built, 'add_gt_as_proposals', False):
            raise ValueError(f'{type(self).__name__} samples anchors, not proposals: '
                             f'train_cfg.sampler needs add_gt_as_proposals=False (the '
                             f'default of {kind} is True), got {sampler!r}')
        return built

    @property
    def anchor_generator(self):
        """mmdet < 2.18 name of ``prior_generator``."""
        return self.prior_generator

    @property
    def num_anchors(self):
        return self.num_base_priors

    def _init_layers(self):
        self.conv_cls = nn.Conv2d(self.in_channels,
                                  self.num_base_priors * self.cls_out_channels, 1)
        self.conv_reg = nn.Conv2d(self.in_channels, self.num_base_priors * 4, 1)

    def forward_single(self, x):
        return self.conv_cls(x), self.conv_reg(x)

    def forward(self, feats):
        """``(cls_scores, bbox_preds)``, each a list over levels of ``[B, A*C, H, W]`` and
        ``[B, A*4, H, W]`` (each output of ``forward_single`` as a list over levels)."""
        return tuple(list(o) for o in zip(*[self.forward_single(x) for x in feats]))

    # ---------------------------------------------------------------- targets
    def get_anchors(self, featmap_sizes, img_metas, device='cpu'):
        """Anchors (the same for every image) and each image's valid flags, per level."""
        anchors = self.prior_generator.grid_priors(featmap_sizes, device=device)
        anchor_list = [anchors for _ in img_metas]
        valid_flag_list = [self.prior_generator.valid_flags(featmap_sizes, meta['pad_shape'],
                                                            device) for meta in img_metas]
        return anchor_list, valid_flag_list

    def _get_targets_single(self, flat_anchors, valid_flags, gt_bboxes, gt_bboxes_ignore,
                            gt_labels, img_meta, label_channels=1, unmap_outputs=True):
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     allowed_border)
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}, allowed_border '
                             f'{allowed_border}); use allowed_border=-1 or smaller anchors')
        anchors = flat_anchors[inside]
        gt_bboxes = gt_bboxes.to(anchors.dtype)
        assign_result = self.assigner.assign(anchors, gt_bboxes, gt_bboxes_ignore,
                                             None if self.sampling else gt_labels)
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)

        num_valid = anchors.shape[0]
        bbox_targets = torch.zeros_like(anchors)
        bbox_weights = torch.zeros_like(anchors)
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            if self.reg_decoded_bbox:
                pos_targets = sampling_result.pos_gt_bboxes
            else:
                pos_targets = self.bbox_coder.encode(sampling_result.pos_bboxes,
                                                     sampling_result.pos_gt_bboxes)
            bbox_targets[pos_inds, :] = pos_targets.to(bbox_targets.dtype)
            bbox_weights[pos_inds, :] = 1.0
            if gt_labels is None:
                labels[pos_inds] = 0  # RPN: one foreground class
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        if unmap_outputs:
            total = flat_anchors.size(0)
            labels = unmap(labels, total, inside, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside)
            bbox_targets = unmap(bbox_targets, total, inside)
            bbox_weights = unmap(bbox_weights, total, inside)
        return (labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds,
                sampling_result)

    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True):
        """Per-level targets over the batch and the positive / negative counts, where each
        image counts at least 1 (mmdet's ``max(num, 1)``)."""
        num_imgs = len(img_metas)
        if not (len(anchor_list) == len(valid_flag_list) == len(gt_bboxes_list) == num_imgs):
            raise ValueError(f'anchors, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(anchor_list)}, {len(valid_flag_list)}, '
                             f'{len(gt_bboxes_list)}')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_targets_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            gt_bboxes_ignore_list[i], gt_labels_list[i], img_metas[i], label_channels,
            unmap_outputs) for i in range(num_imgs)]
        labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds, _ = zip(*results)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        num_total_neg = sum(max(inds.numel(), 1) for inds in neg_inds)
        return (images_to_levels(labels, num_level_anchors),
                images_to_levels(label_weights, num_level_anchors),
                images_to_levels(bbox_targets, num_level_anchors),
                images_to_levels(bbox_weights, num_level_anchors),
                num_total_pos, num_total_neg)

    # ------------------------------------------------------------------ loss
    def loss_single(self, cls_score, bbox_pred, anchors, labels, label_weights, bbox_targets,
                    bbox_weights, num_total_samples):
        labels = labels.reshape(-1)
        label_weights = label_weights.reshape(-1)
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
        loss_cls = self.loss_cls(cls_score, labels, label_weights, avg_factor=num_total_samples)
        bbox_targets = bbox_targets.reshape(-1, 4)
        bbox_weights = bbox_weights.reshape(-1, 4)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
        if self.reg_decoded_bbox:
            bbox_pred = self.bbox_coder.decode(anchors.reshape(-1, 4), bbox_pred)
        loss_bbox = self.loss_bbox(bbox_pred, bbox_targets, bbox_weights,
                                   avg_factor=num_total_samples)
        return loss_cls, loss_bbox

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """mmdet 2.x losses: ``dict(loss_cls=[per level], loss_bbox=[per level])``, each
        averaged over the positives of the batch (at least 1 per image)."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg (assigner, ...), '
                             f'got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                                           gt_bboxes_ignore_list=gt_bboxes_ignore,
                                           gt_labels_list=gt_labels,
                                           label_channels=label_channels)
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        all_anchors = images_to_levels([torch.cat(a) for a in anchor_list], num_level_anchors)
        losses_cls, losses_bbox = [], []
        for args in zip(cls_scores, bbox_preds, all_anchors, labels_list, label_weights_list,
                        bbox_targets_list, bbox_weights_list):
            loss_cls, loss_bbox = self.loss_single(*args, num_total_samples=num_total_samples)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox)
