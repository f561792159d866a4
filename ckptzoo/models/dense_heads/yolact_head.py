"""mmdet 2.x YOLACT heads (Bolya et al. 2019): ``YOLACTHead`` (boxes, classes and mask
coefficients per anchor), ``YOLACTSegmHead`` (a semantic segmentation loss on the first FPN level,
training only) and ``YOLACTProtonet`` (:mod:`.yolact_protonet`: prototypes combined into
instance masks). State-dict keys equal mmdet's (``head_convs.0.conv.weight``, ``conv_cls``,
``conv_reg``, ``conv_coeff``, ``segm_conv``, ``protonet.0.weight`` ...).

Checkpoint units: ``bbox_head.level{i}`` (one per pyramid level, as RetinaHead) and
``mask_head.protonet``."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.post_processing import fast_nms
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, apply_init_cfg
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin
from .yolact_protonet import InterpolateModule, YOLACTProtonet

__all__ = ['YOLACTHead', 'YOLACTSegmHead', 'YOLACTProtonet', 'InterpolateModule']


@MODELS.register_module()
class YOLACTHead(LevelUnitsMixin, AnchorHead):
    """YOLACT box head: a light RetinaHead with ``num_head_convs`` convs shared by the
    classification, box and coefficient branches, one third of the anchors, SSD-style hard
    negative mining (``use_ohem``, ``train_cfg.neg_pos_ratio``) and ``num_protos`` mask
    coefficients per anchor (tanh).

    Args:
        num_classes, in_channels, anchor_generator, loss_cls, loss_bbox, conv_cfg, norm_cfg,
        init_cfg: as mmdet (``loss_cls`` needs ``reduction='none'`` with ``use_ohem``).
        num_head_convs (int): shared 3x3 ConvModules.
        num_protos (int): mask coefficients per anchor.
        use_ohem (bool): every positive and the ``neg_pos_ratio`` x as many highest-loss
            negatives per image (``PseudoSampler``); else :class:`AnchorHead`'s loss.
        with_cp (bool): ``'full'`` checkpointing of every level (not an mmdet argument).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
        **kwargs: :class:`AnchorHead` arguments (feat_channels, bbox_coder, train_cfg, ...).

    ``test_cfg``: ``nms_pre``, ``score_thr``, ``iou_thr``, ``top_k``, ``max_per_img``
    (:func:`fast_nms`); ``min_bbox_size`` is accepted and unused, as in mmdet.

    Initialisation as mmdet's: Xavier (uniform) convs, then the ``head_convs`` ConvModules'
    own kaiming init (mmcv's ``ModuleList.init_weights`` reaches them).

    Differences from mmdet, where mmdet fails or is wrong: anchors outside the image
    (``allowed_border`` >= 0, invalid flags) are unmapped (label background, weight 0) instead of
    crashing the OHEM loss, and the positives handed to the mask head index all anchors (mmdet
    indexed the inside ones into the full coefficient list).
    """

    TRAIN_CFG_KEYS = AnchorHead.TRAIN_CFG_KEYS + ('neg_pos_ratio', )
    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'score_thr', 'iou_thr', 'top_k',
                     'max_per_img')

    def __init__(self, num_classes, in_channels,
                 anchor_generator=dict(type='AnchorGenerator', octave_base_scale=3,
                                       scales_per_octave=1, ratios=[0.5, 1.0, 2.0],
                                       strides=[8, 16, 32, 64, 128]),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, reduction='none',
                               loss_weight=1.0),
                 loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.5),
                 num_head_convs=1, num_protos=32, use_ohem=True, conv_cfg=None, norm_cfg=None,
                 init_cfg=dict(type='Xavier', distribution='uniform', bias=0, layer='Conv2d'),
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        if not (isinstance(num_head_convs, int) and num_head_convs >= 0):
            raise ValueError(f'num_head_convs must be a non-negative int, got '
                             f'{num_head_convs!r}')
        if not (isinstance(num_protos, int) and num_protos > 0):
            raise ValueError(f'num_protos must be a positive int, got {num_protos!r}')
        self.num_head_convs = num_head_convs
        self.num_protos = num_protos
        self.use_ohem = bool(use_ohem)
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        train_cfg = kwargs.get('train_cfg')
        if self.use_ohem:
            if loss_cls.get('reduction', 'mean') != 'none':
                raise ValueError(f"YOLACTHead use_ohem=True mines per-anchor losses: loss_cls "
                                 f"needs reduction='none', got {loss_cls!r}")
            if train_cfg:
                ratio = cfg_get(train_cfg, 'neg_pos_ratio')
                if not (isinstance(ratio, int) and not isinstance(ratio, bool) and ratio >= 0):
                    raise ValueError(f'YOLACTHead use_ohem=True needs train_cfg.neg_pos_ratio, '
                                     f'a non-negative int, got {ratio!r}')
                sampler = cfg_get(train_cfg, 'sampler')
                if sampler is not None and sampler.get('type') != 'PseudoSampler':
                    raise ValueError(f'YOLACTHead use_ohem=True samples by hard negative '
                                     f'mining: leave train_cfg.sampler out, got {sampler!r}')
        super().__init__(num_classes, in_channels, anchor_generator=anchor_generator,
                         loss_cls=loss_cls, loss_bbox=loss_bbox, init_cfg=init_cfg, **kwargs)
        # mmdet keeps head_convs in mmcv's ModuleList, whose init_weights runs each
        # ConvModule's own (kaiming) after the head's Xavier init_cfg: so do we
        for conv in self.head_convs:
            conv.init_weights()
        self._init_level_units(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.head_convs = nn.ModuleList(
            ConvModule(self.in_channels if i == 0 else self.feat_channels, self.feat_channels,
                       3, stride=1, padding=1, conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)
            for i in range(self.num_head_convs))
        chn = self.feat_channels if self.num_head_convs else self.in_channels
        self.conv_cls = nn.Conv2d(chn, self.num_base_priors * self.cls_out_channels, 3,
                                  padding=1)
        self.conv_reg = nn.Conv2d(chn, self.num_base_priors * 4, 3, padding=1)
        self.conv_coeff = nn.Conv2d(chn, self.num_base_priors * self.num_protos, 3, padding=1)

    def forward_single(self, x):
        """``(cls_score [B, A*C, H, W], bbox_pred [B, A*4, H, W], coeff_pred
        [B, A*num_protos, H, W])``, the coefficients in (-1, 1)."""
        for conv in self.head_convs:
            x = conv(x)
        return self.conv_cls(x), self.conv_reg(x), self.conv_coeff(x).tanh()

    def forward_train(self, x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=None,
                      proposal_cfg=None, **kwargs):
        """``(losses, sampling_results, coeff_preds)``: what the YOLACT detector needs for its
        mask head (mmdet's detector calls ``loss`` itself; so does ours)."""
        cls_scores, bbox_preds, coeff_preds = self(x)
        losses, sampling_results = self.loss(cls_scores, bbox_preds, gt_bboxes, gt_labels,
                                             img_metas, gt_bboxes_ignore=gt_bboxes_ignore)
        return losses, sampling_results, coeff_preds

    # ---------------------------------------------------------------- targets
    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True, return_sampling_results=False):
        """:meth:`AnchorHead.get_targets`, and with ``return_sampling_results`` each image's
        sampling result last, its ``pos_inds`` indexing all the image's anchors."""
        num_imgs = len(img_metas)
        if not return_sampling_results:
            return super().get_targets(anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                                       gt_bboxes_ignore_list, gt_labels_list, label_channels,
                                       unmap_outputs)
        if not (len(anchor_list) == len(valid_flag_list) == len(gt_bboxes_list) == num_imgs):
            raise ValueError(f'anchors, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(anchor_list)}, {len(valid_flag_list)}, '
                             f'{len(gt_bboxes_list)}')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        results = []
        for i in range(num_imgs):
            anchors, valid = torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i])
            out = self._get_targets_single(anchors, valid, gt_bboxes_list[i],
                                           gt_bboxes_ignore_list[i], gt_labels_list[i],
                                           img_metas[i], label_channels, unmap_outputs=True)
            inside = anchor_inside_flags(anchors, valid, img_metas[i]['img_shape'][:2],
                                         allowed_border).nonzero(as_tuple=False).squeeze(1)
            sampling_result = out[-1]
            sampling_result.pos_inds = inside[sampling_result.pos_inds]
            sampling_result.neg_inds = inside[sampling_result.neg_inds]
            results.append(out)
        labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds, sampling = \
            zip(*results)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        num_total_neg = sum(max(inds.numel(), 1) for inds in neg_inds)
        return (images_to_levels(labels, num_level_anchors),
                images_to_levels(label_weights, num_level_anchors),
                images_to_levels(bbox_targets, num_level_anchors),
                images_to_levels(bbox_weights, num_level_anchors),
                num_total_pos, num_total_neg, list(sampling))

    # ------------------------------------------------------------------ loss
    @force_fp32(apply_to=('cls_scores', 'bbox_preds'))
    def loss(self, cls_scores, bbox_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``(dict(loss_cls=[...], loss_bbox=[...]), sampling_results)``: with ``use_ohem`` one
        loss per image (SSD's hard negative mining over all levels at once), else one per
        level (:class:`AnchorHead`); both averaged over the batch's positives (at least one
        per image)."""
        if not self.train_cfg:
            raise ValueError(f'YOLACTHead.loss needs train_cfg (assigner, neg_pos_ratio, ...), '
                             f'got {self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg, sampling_results) = self.get_targets(
            anchor_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
            label_channels=label_channels, return_sampling_results=True)
        if not self.use_ohem:
            num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
            num_level_anchors = [a.size(0) for a in anchor_list[0]]
            all_anchors = images_to_levels([torch.cat(a) for a in anchor_list],
                                           num_level_anchors)
            losses = [self.loss_single(*args, num_total_samples=num_total_samples) for args in
                      zip(cls_scores, bbox_preds, all_anchors, labels_list, label_weights_list,
                          bbox_targets_list, bbox_weights_list)]
        else:
            num_imgs = len(img_metas)
            all_cls_scores = torch.cat([s.permute(0, 2, 3, 1).reshape(
                num_imgs, -1, self.cls_out_channels) for s in cls_scores], 1)
            all_bbox_preds = torch.cat([b.permute(0, 2, 3, 1).reshape(num_imgs, -1, 4)
                                        for b in bbox_preds], 1)
            if not (torch.isfinite(all_cls_scores).all() and torch.isfinite(all_bbox_preds).all()):
                raise FloatingPointError('YOLACTHead: classification scores or box predictions '
                                         'became infinite or NaN')
            per_image = (all_cls_scores, all_bbox_preds,
                         [torch.cat(a) for a in anchor_list],
                         torch.cat(labels_list, 1), torch.cat(label_weights_list, 1),
                         torch.cat(bbox_targets_list, 1), torch.cat(bbox_weights_list, 1))
            losses = [self.loss_single_OHEM(*args, num_total_samples=num_total_pos)
                      for args in zip(*per_image)]
        losses_cls, losses_bbox = (list(x) for x in zip(*losses))
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox), sampling_results

    def loss_single_OHEM(self, cls_score, bbox_pred, anchors, labels, label_weights,
                         bbox_targets, bbox_weights, num_total_samples):
        """One image, all levels: every positive's classification loss plus the
        ``neg_pos_ratio * num_pos`` highest negative ones (every negative when the image has
        no positive), and the box loss of the positives, over ``num_total_samples``."""
        loss_cls_all = self.loss_cls(cls_score, labels, label_weights)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero(as_tuple=False)
        neg_inds = (labels == self.num_classes).nonzero(as_tuple=False).view(-1)
        num_pos = pos_inds.size(0)
        num_neg = neg_inds.size(0) if num_pos == 0 else \
            min(cfg_get(self.train_cfg, 'neg_pos_ratio') * num_pos, neg_inds.size(0))
        topk_neg, _ = loss_cls_all[neg_inds].topk(num_neg)
        loss_cls = (loss_cls_all[pos_inds.view(-1)].sum() + topk_neg.sum()) / num_total_samples
        if self.reg_decoded_bbox:
            bbox_pred = self.bbox_coder.decode(anchors, bbox_pred)
        loss_bbox = self.loss_bbox(bbox_pred, bbox_targets, bbox_weights,
                                   avg_factor=num_total_samples)
        return loss_cls, loss_bbox

    # ------------------------------------------------------------- inference
    def simple_test(self, feats, img_metas, rescale=False):
        """``(det_bboxes, det_labels, det_coeffs)``, each a list over images."""
        return self.get_bboxes(*self(feats), img_metas=img_metas, rescale=rescale)

    simple_test_bboxes = simple_test

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('YOLACT does not support test-time augmentation (as mmdet)')

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'coeff_preds'))
    def get_bboxes(self, cls_scores, bbox_preds, coeff_preds, img_metas, cfg=None,
                   rescale=False):
        """Per image the ``nms_pre`` anchors of best foreground score per level, decoded and
        clipped, divided by ``scale_factor`` when ``rescale``, then :func:`fast_nms`.

        Returns ``(det_bboxes, det_labels, det_coeffs)``, lists over images of ``[k, 5]``,
        ``[k]`` and ``[k, num_protos]`` (detached, as mmdet's ``select_single_mlvl``)."""
        if not (len(cls_scores) == len(bbox_preds) == len(coeff_preds)):
            raise ValueError(f'cls_scores, bbox_preds and coeff_preds need one entry per '
                             f'level, got {len(cls_scores)}, {len(bbox_preds)}, '
                             f'{len(coeff_preds)}')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        cfg = self.test_cfg if cfg is None else cfg
        missing = [k for k in ('score_thr', 'iou_thr', 'top_k') if cfg_get(cfg, k) is None] \
            if cfg else ['test_cfg']
        if missing:
            raise ValueError(f'YOLACTHead needs test_cfg score_thr, iou_thr and top_k (fast NMS) '
                             f'to predict boxes; missing {missing} in {cfg!r}')
        priors = self.prior_generator.grid_priors([s.shape[-2:] for s in cls_scores],
                                                  dtype=cls_scores[0].dtype,
                                                  device=cls_scores[0].device)
        results = [self._get_bboxes_single([s[i].detach() for s in cls_scores],
                                           [b[i].detach() for b in bbox_preds],
                                           [c[i].detach() for c in coeff_preds], priors,
                                           meta['img_shape'], meta['scale_factor'], cfg,
                                           rescale)
                   for i, meta in enumerate(img_metas)]
        return tuple(list(x) for x in zip(*results))

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, coeff_preds_list,
                           mlvl_anchors, img_shape, scale_factor, cfg, rescale=False):
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        mlvl_bboxes, mlvl_scores, mlvl_coeffs = [], [], []
        for cls_score, bbox_pred, coeff_pred, anchors in zip(cls_score_list, bbox_pred_list,
                                                             coeff_preds_list, mlvl_anchors):
            cls_score = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            scores = cls_score.sigmoid() if self.use_sigmoid_cls else cls_score.softmax(-1)
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)
            coeff_pred = coeff_pred.permute(1, 2, 0).reshape(-1, self.num_protos)
            if 0 < nms_pre < scores.shape[0]:
                fg = scores if self.use_sigmoid_cls else scores[:, :-1]
                _, topk = fg.max(dim=1).values.topk(nms_pre)
                anchors, bbox_pred = anchors[topk], bbox_pred[topk]
                scores, coeff_pred = scores[topk], coeff_pred[topk]
            mlvl_bboxes.append(self.bbox_coder.decode(anchors, bbox_pred, max_shape=img_shape))
            mlvl_scores.append(scores)
            mlvl_coeffs.append(coeff_pred)
        bboxes = torch.cat(mlvl_bboxes)
        if rescale:
            bboxes = bboxes / bboxes.new_tensor(scale_factor)
        scores = torch.cat(mlvl_scores)
        if self.use_sigmoid_cls:  # a dummy background column, as fast_nms drops the last
            scores = torch.cat([scores, scores.new_zeros(scores.shape[0], 1)], dim=1)
        return fast_nms(bboxes, scores, torch.cat(mlvl_coeffs), cfg_get(cfg, 'score_thr'),
                        cfg_get(cfg, 'iou_thr'), cfg_get(cfg, 'top_k'),
                        cfg_get(cfg, 'max_per_img', -1))


@MODELS.register_module()
class YOLACTSegmHead(nn.Module):
    """YOLACT's semantic segmentation head: a 1x1 conv to ``num_classes`` maps on the first
    FPN level and a per-class sigmoid loss against the union of each class's ground-truth
    masks (downsampled bilinearly, > 0.5). Training only.

    Fix over mmdet 2.28.2: mmdet writes the masks of class ``c`` into map ``c - 1`` (a
    leftover of 1-based labels: class 0 lands in the last map), so the maps and classes
    disagree; here class ``c`` is map ``c``. Keys and shapes are unchanged.
    """

    def __init__(self, num_classes, in_channels=256,
                 loss_segm=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 init_cfg=dict(type='Xavier', distribution='uniform',
                               override=dict(name='segm_conv'))):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.loss_segm = MODELS.build(loss_segm)
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self.segm_conv = nn.Conv2d(in_channels, num_classes, kernel_size=1)
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """The init_cfg was applied at construction."""

    def forward(self, x):
        """``[N, num_classes, H, W]`` logits."""
        return self.segm_conv(x)

    @force_fp32(apply_to=('segm_pred', ))
    def loss(self, segm_pred, gt_masks, gt_labels):
        """``dict(loss_segm=[per image])``: each a sum over the image's pixels and classes
        divided by ``N * H * W`` of the batch (zero for an image without objects)."""
        num_imgs, _, mask_h, mask_w = segm_pred.size()
        losses = []
        for pred, masks, labels in zip(segm_pred, gt_masks, gt_labels):
            targets = self.get_targets(pred, masks.float(), labels)
            if targets is None:
                zeros = torch.zeros_like(pred)
                losses.append(self.loss_segm(pred, zeros, zeros))
            else:
                losses.append(self.loss_segm(pred, targets,
                                             avg_factor=num_imgs * mask_h * mask_w))
        return dict(loss_segm=losses)

    def get_targets(self, segm_pred, gt_masks, gt_labels):
        """``[num_classes, H, W]``: per class the union of its masks at the prediction's size;
        None without objects."""
        if gt_masks.size(0) == 0:
            return None
        with torch.no_grad():
            masks = F.interpolate(gt_masks.unsqueeze(0), segm_pred.shape[-2:], mode='bilinear',
                                  align_corners=False).squeeze(0).gt(0.5).to(segm_pred.dtype)
            targets = torch.zeros_like(segm_pred)
            for mask, label in zip(masks, gt_labels.long()):
                targets[label] = torch.max(targets[label], mask)
        return targets

    def simple_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('YOLACTSegmHead only takes part in training (as mmdet)')
