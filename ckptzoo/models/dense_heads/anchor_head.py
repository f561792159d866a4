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
from ...ops.nms import batched_nms
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.checkpoint import load_checkpoint
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import apply_init_cfg

__all__ = ['AnchorHead', 'anchor_inside_flags', 'bbox_flip', 'bbox_mapping',
           'bbox_mapping_back', 'images_to_levels', 'unmap']


@MODELS.register_module()
class AnchorHead(nn.Module):
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

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_checkpoint(self, self.init_cfg['checkpoint'], map_location='cpu',
                            strict=False, prefix=self.init_cfg.get('prefix'))

    def forward_single(self, x):
        return self.conv_cls(x), self.conv_reg(x)

    def forward(self, feats):
        """``(cls_scores, bbox_preds)``, each a list over levels of ``[B, A*C, H, W]`` and
        ``[B, A*4, H, W]``."""
        outs = [self.forward_single(x) for x in feats]
        return [o[0] for o in outs], [o[1] for o in outs]

    def forward_train(self, x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
                      proposal_cfg=None, **kwargs):
        """mmdet 2.x ``BaseDenseHead.forward_train``: the losses, and with ``proposal_cfg``
        also the boxes ``get_bboxes`` makes with that config (an RPN's proposals):
        ``(losses, proposal_list)``. Without ``gt_labels`` (an RPN) ``loss`` is called without
        them, as mmdet does."""
        outs = self(x)
        if gt_labels is None:
            losses = self.loss(*outs, gt_bboxes, img_metas, gt_bboxes_ignore=gt_bboxes_ignore)
        else:
            losses = self.loss(*outs, gt_bboxes, gt_labels, img_metas,
                               gt_bboxes_ignore=gt_bboxes_ignore)
        if proposal_cfg is None:
            return losses
        return losses, self.get_bboxes(*outs, img_metas=img_metas, cfg=proposal_cfg)

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

    # ------------------------------------------------------------- inference
    def simple_test(self, feats, img_metas, rescale=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])``."""
        return self.get_bboxes(*self(feats), img_metas=img_metas, rescale=rescale)

    simple_test_bboxes = simple_test

    def aug_test(self, feats, img_metas, rescale=False):
        """mmdet 2.x test-time augmentation of one image: every augmentation's boxes (before
        NMS) mapped back to the original image, merged, then class-wise NMS.

        ``feats`` is a list over augmentations of per-level features, ``img_metas`` a list
        over augmentations of one-dict lists. Returns ``[(det_bboxes, det_labels)]``.
        """
        if any(len(metas) != 1 for metas in img_metas):
            raise ValueError(f'aug_test takes one image per augmentation, got '
                             f'{[len(m) for m in img_metas]}')
        all_bboxes, all_scores, all_labels = [], [], []
        for x, metas in zip(feats, img_metas):
            bboxes, scores, labels = self.get_bboxes(*self(x), img_metas=metas, rescale=False,
                                                     with_nms=False)[0]
            meta = metas[0]
            all_bboxes.append(bbox_mapping_back(bboxes, meta['img_shape'], meta['scale_factor'],
                                                meta.get('flip', False),
                                                meta.get('flip_direction') or 'horizontal'))
            all_scores.append(scores)
            all_labels.append(labels)
        bboxes, scores = torch.cat(all_bboxes), torch.cat(all_scores)
        labels = torch.cat(all_labels)
        if bboxes.numel() == 0:
            dets = torch.cat([bboxes, scores[:, None]], -1)
        else:
            dets, labels = self._nms(bboxes, scores, labels, self.test_cfg)
        if not rescale:
            dets = dets.clone()
            dets[:, :4] *= dets.new_tensor(img_metas[0][0]['scale_factor'])
        return [(dets, labels)]

    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def get_bboxes(self, cls_scores, bbox_preds, score_factors=None, img_metas=None, cfg=None,
                   rescale=False, with_nms=True, **kwargs):
        """Detections per image as mmdet 2.x: per level the ``nms_pre`` best (anchor, class)
        scores above ``score_thr``, decoded and clipped to ``img_shape``, divided by
        ``scale_factor`` when ``rescale``, then class-wise NMS and ``max_per_img``. The head's
        outputs are detached first (mmdet's ``select_single_mlvl``): no gradient flows
        through the boxes.

        Returns a list of ``(det_bboxes [k, 5] (x1, y1, x2, y2, score), det_labels [k])``.
        """
        if score_factors is not None:
            raise NotImplementedError('score_factors are not supported by AnchorHead')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        featmap_sizes = [s.shape[-2:] for s in cls_scores]
        priors = self.prior_generator.grid_priors(featmap_sizes, dtype=cls_scores[0].dtype,
                                                  device=cls_scores[0].device)
        return [self._get_bboxes_single([s[i].detach() for s in cls_scores],
                                        [b[i].detach() for b in bbox_preds], priors, meta, cfg,
                                        rescale, with_nms)
                for i, meta in enumerate(img_metas)]

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, mlvl_priors, img_meta, cfg,
                           rescale=False, with_nms=True):
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg (nms_pre, score_thr, nms, '
                             'max_per_img) to predict boxes')
        img_shape = img_meta['img_shape']
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels = [], [], []
        for cls_score, bbox_pred, priors in zip(cls_score_list, bbox_pred_list, mlvl_priors):
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)
            cls_score = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            scores = cls_score.sigmoid() if self.use_sigmoid_cls \
                else cls_score.softmax(-1)[:, :-1]
            valid = scores > score_thr
            scores = scores[valid]
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores.sort(descending=True)
            if nms_pre is not None and nms_pre > 0:  # mmdet drops one box for nms_pre=-1
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            bboxes = self.bbox_coder.decode(priors[keep], bbox_pred[keep], max_shape=img_shape)
            mlvl_bboxes.append(bboxes)
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
        bboxes = torch.cat(mlvl_bboxes)
        scores = torch.cat(mlvl_scores)
        labels = torch.cat(mlvl_labels)
        if rescale:
            bboxes = bboxes / bboxes.new_tensor(img_meta['scale_factor'])
        min_bbox_size = cfg_get(cfg, 'min_bbox_size', 0)
        if min_bbox_size and min_bbox_size > 0:
            wh = bboxes[:, 2:] - bboxes[:, :2]
            big = (wh > min_bbox_size).all(dim=1)
            bboxes, scores, labels = bboxes[big], scores[big], labels[big]
        if not with_nms:
            return bboxes, scores, labels
        if bboxes.numel() == 0:
            return torch.cat([bboxes, scores[:, None]], -1), labels
        return self._nms(bboxes, scores, labels, cfg)

    def _nms(self, bboxes, scores, labels, cfg):
        """Class-wise NMS (mmcv ``batched_nms``), best first, ``max_per_img``."""
        dets, keep = batched_nms(bboxes, scores, labels,
                                 cfg_get(cfg, 'nms', dict(type='nms', iou_threshold=0.5)))
        max_per_img = cfg_get(cfg, 'max_per_img', -1)
        if max_per_img is not None and max_per_img > 0:
            dets, keep = dets[:max_per_img], keep[:max_per_img]
        return dets, labels[keep]
