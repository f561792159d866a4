"""mmdet 2.x ``GuidedAnchorHead`` (Wang et al. 2019, https://arxiv.org/abs/1901.03278) and its
``FeatureAdaption``.

Each position predicts where an object centre lies (``conv_loc``) and the shape (log w, h
deltas, ``conv_shape``) of its one anchor, a square of the ``square_anchor_generator``; the
features are adapted to that shape by a deformable conv whose offsets come from the shape map
(:class:`FeatureAdaption`), then ``conv_cls`` / ``conv_reg`` score and refine the *guided*
anchors. The shape is trained against the best of the ``approx_anchor_generator``'s anchors at
each position (:class:`ApproxMaxIoUAssigner`, ``train_cfg.ga_assigner``) with a bounded-IoU
loss, the location against centre regions of the ground truths. State-dict keys equal mmdet's.

Checkpoint units: ``level{i}``, one per pyramid level (:class:`LevelUnitsMixin`); the guided
anchors are made from detached outputs, so they keep nothing for backward.
"""
import torch
import torch.nn as nn

from ...core.anchor import anchor_inside_flags, calc_region, images_to_levels
from ...core.post_processing import multiclass_nms
from ...core.utils import unmap
from ...ops import DeformConv2d, MaskedConv2d
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import apply_init_cfg
from .anchor_head import AnchorHead
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['FeatureAdaption', 'GuidedAnchorHead', 'init_with_masked_convs']


def init_with_masked_convs(module, init_cfg):
    """``apply_init_cfg`` where ``layer='Conv2d'`` also reaches :class:`MaskedConv2d` (an
    ``nn.Conv2d`` subclass, which mmcv's initialisers match by base class), then each
    :class:`FeatureAdaption` re-initialised by its own ``init_cfg``, as mmcv initialises a
    child after its parent."""
    def widen(cfg):
        cfg = dict(cfg)
        layer = cfg.get('layer')
        if layer is not None:
            layer = [layer] if isinstance(layer, str) else list(layer)
            cfg['layer'] = layer + ['MaskedConv2d'] if 'Conv2d' in layer else layer
        return cfg
    if init_cfg is not None:
        apply_init_cfg(module, [widen(c) for c in (
            init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg])])
    for m in module.modules():
        if isinstance(m, FeatureAdaption):
            apply_init_cfg(m, m.init_cfg)


class FeatureAdaption(nn.Module):
    """A deformable conv (+ ReLU) whose offsets are a 1x1 conv (``conv_offset``, no bias) of
    the predicted anchor shape ``[B, 2, H, W]`` (detached): the features follow the anchor.
    mmdet's arguments and ``init_cfg`` (Normal std 0.1, ``conv_adaption`` std 0.01). The ReLU
    is not in place (mmdet's is), so that a ``'selective'`` unit may keep the conv output."""

    def __init__(self, in_channels, out_channels, kernel_size=3, deform_groups=4,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.1,
                               override=dict(type='Normal', name='conv_adaption', std=0.01))):
        super().__init__()
        self.conv_offset = nn.Conv2d(2, deform_groups * kernel_size * kernel_size * 2, 1,
                                     bias=False)
        self.conv_adaption = DeformConv2d(in_channels, out_channels, kernel_size=kernel_size,
                                          padding=(kernel_size - 1) // 2,
                                          deform_groups=deform_groups)
        self.relu = nn.ReLU(inplace=False)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def forward(self, x, shape):
        return self.relu(self.conv_adaption(x, self.conv_offset(shape.detach())))


@MODELS.register_module()
class GuidedAnchorHead(LevelUnitsMixin, AnchorHead):
    """Guided-anchor head, mmdet 2.x arguments.

    Args:
        num_classes, in_channels, feat_channels (int): as :class:`AnchorHead`.
        approx_anchor_generator (dict): the anchors a square is judged by (``octave_base_scale``
            must be the square's scale, the strides the same).
        square_anchor_generator (dict): one square anchor per position.
        anchor_coder, bbox_coder (dict): the shape deltas' and the box deltas' coders.
        reg_decoded_bbox (bool), loss_cls, loss_bbox (dict): as :class:`AnchorHead`.
        deform_groups (int): of the :class:`FeatureAdaption` conv.
        loc_filter_thr (float): at test, positions whose location score is below it are
            dropped (and their convs masked to 0, as mmdet's ``MaskedConv2d``).
        loss_loc (dict): location loss (Focal), the centres its positives (mmdet 2.x took
            them as background: fixed, see :meth:`loss_loc_single`).
        loss_shape (dict): shape loss (BoundedIoU).
        train_cfg (dict): :class:`AnchorHead`'s keys plus ``ga_assigner``, ``ga_sampler``
            (shape targets; PseudoSampler when absent), ``center_ratio`` / ``ignore_ratio``
            (the positive and ignored centre regions of the location targets).
        with_cp, cp_use_reentrant (bool): ``'full'`` checkpointing of every level (not mmdet
            2.x arguments; default False).

    mmdet's masked test-time convs take one image (the first image's mask for the batch);
    here each image is masked by its own location map.
    """

    TRAIN_CFG_KEYS = AnchorHead.TRAIN_CFG_KEYS + ('ga_assigner', 'ga_sampler', 'center_ratio',
                                                  'ignore_ratio')
    #: classification losses that take every anchor (no sampler), mmdet's GuidedAnchorHead list
    SAMPLING_FREE_LOSSES = ('FocalLoss', )

    def __init__(self, num_classes, in_channels, feat_channels=256,
                 approx_anchor_generator=dict(type='AnchorGenerator', octave_base_scale=8,
                                              scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                              strides=[4, 8, 16, 32, 64]),
                 square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[8],
                                              strides=[4, 8, 16, 32, 64]),
                 anchor_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                                   target_stds=[1.0, 1.0, 1.0, 1.0]),
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                                 target_stds=[1.0, 1.0, 1.0, 1.0]),
                 reg_decoded_bbox=False, deform_groups=4, loc_filter_thr=0.01, train_cfg=None,
                 test_cfg=None,
                 loss_loc=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                               loss_weight=1.0),
                 loss_shape=dict(type='BoundedIoULoss', beta=0.2, loss_weight=1.0),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='conv_loc', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False):
        BaseDenseHead.__init__(self)
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        for name, cfg, keys in (('train_cfg', train_cfg, self.TRAIN_CFG_KEYS),
                                ('test_cfg', test_cfg, self.TEST_CFG_KEYS)):
            if isinstance(cfg, dict):
                check_keys(cfg, keys, name, owner=type(self).__name__)
        if approx_anchor_generator.get('octave_base_scale') != \
                square_anchor_generator['scales'][0]:
            raise ValueError(f"approx_anchor_generator.octave_base_scale "
                             f"({approx_anchor_generator.get('octave_base_scale')!r}) must be "
                             f"square_anchor_generator.scales[0] "
                             f"({square_anchor_generator['scales'][0]!r})")
        if list(approx_anchor_generator['strides']) != list(square_anchor_generator['strides']):
            raise ValueError(f"approx and square anchor generators need the same strides, got "
                             f"{approx_anchor_generator['strides']} and "
                             f"{square_anchor_generator['strides']}")
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.deform_groups = deform_groups
        self.loc_filter_thr = loc_filter_thr
        self.approx_anchor_generator = TASK_UTILS.build(approx_anchor_generator)
        self.square_anchor_generator = TASK_UTILS.build(square_anchor_generator)
        self.approxs_per_octave = self.approx_anchor_generator.num_base_priors[0]
        self.num_base_priors = self.square_anchor_generator.num_base_priors[0]
        if self.num_base_priors != 1:
            raise ValueError(f'square_anchor_generator must give one anchor per position '
                             f'(one scale, one ratio), got {self.num_base_priors}')
        self.reg_decoded_bbox = reg_decoded_bbox
        self.use_sigmoid_cls = loss_cls.get('use_sigmoid', False)
        self.cls_out_channels = num_classes if self.use_sigmoid_cls else num_classes + 1
        self.sampling = loss_cls['type'] not in self.SAMPLING_FREE_LOSSES
        self.ga_sampling = train_cfg is not None and 'ga_sampler' in train_cfg
        self.anchor_coder = TASK_UTILS.build(anchor_coder)
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.loss_loc = MODELS.build(loss_loc)
        self.loss_shape = MODELS.build(loss_shape)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        if train_cfg:
            self.assigner = TASK_UTILS.build(cfg_get(train_cfg, 'assigner'))
            sampler = cfg_get(train_cfg, 'sampler') if self.sampling else None
            self.sampler = TASK_UTILS.build(sampler or dict(type='PseudoSampler'))
            for key in ('ga_assigner', 'center_ratio', 'ignore_ratio'):
                if cfg_get(train_cfg, key) is None:
                    raise ValueError(f'{type(self).__name__} train_cfg needs {key} (guided '
                                     f'anchoring targets), got {dict(train_cfg)!r}')
            self.ga_assigner = TASK_UTILS.build(cfg_get(train_cfg, 'ga_assigner'))
            self.ga_sampler = TASK_UTILS.build(cfg_get(train_cfg, 'ga_sampler')
                                               if self.ga_sampling
                                               else dict(type='PseudoSampler'))
        self.fp16_enabled = False
        self._init_layers()
        init_with_masked_convs(self, init_cfg)
        self._init_level_units(with_cp, cp_use_reentrant)

    @property
    def prior_generator(self):
        """The square anchors (one per position): what the levels are counted by."""
        return self.square_anchor_generator

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.conv_loc = nn.Conv2d(self.in_channels, 1, 1)
        self.conv_shape = nn.Conv2d(self.in_channels, self.num_base_priors * 2, 1)
        self.feature_adaption = FeatureAdaption(self.in_channels, self.feat_channels,
                                                kernel_size=3, deform_groups=self.deform_groups)
        self.conv_cls = MaskedConv2d(self.feat_channels,
                                     self.num_base_priors * self.cls_out_channels, 1)
        self.conv_reg = MaskedConv2d(self.feat_channels, self.num_base_priors * 4, 1)

    def _test_mask(self, loc_pred):
        """At test, ``[B, H, W]``: positions kept by ``loc_filter_thr``; None in training."""
        return None if self.training else loc_pred.sigmoid()[:, 0] >= self.loc_filter_thr

    def forward_single(self, x):
        """``(cls_score, bbox_pred, shape_pred, loc_pred)`` of one level."""
        loc_pred = self.conv_loc(x)
        shape_pred = self.conv_shape(x)
        x = self.feature_adaption(x, shape_pred)
        mask = self._test_mask(loc_pred)
        return self.conv_cls(x, mask), self.conv_reg(x, mask), shape_pred, loc_pred

    # ---------------------------------------------------------------- anchors
    def get_sampled_approxs(self, featmap_sizes, img_metas, device='cpu'):
        """The approxes of each image (per level) and, per position, whether any of its
        approxes lies inside the image (``train_cfg.allowed_border``)."""
        approxs = self.approx_anchor_generator.grid_priors(featmap_sizes, device=device)
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        k = self.approxs_per_octave
        inside_flag_list = []
        for meta in img_metas:
            flags = self.approx_anchor_generator.valid_flags(featmap_sizes, meta['pad_shape'],
                                                             device=device)
            per_level = []
            for level_approxs, level_flags in zip(approxs, flags):
                inside = [anchor_inside_flags(level_approxs[i::k], level_flags[i::k],
                                              meta['img_shape'][:2], allowed_border)
                          for i in range(k)]
                per_level.append(torch.stack(inside, 0).sum(dim=0) > 0)
            inside_flag_list.append(per_level)
        return [approxs for _ in img_metas], inside_flag_list

    def get_anchors(self, featmap_sizes, shape_preds, loc_preds, img_metas, use_loc_filter=False,
                    device='cpu'):
        """``(squares per image, guided anchors per image, location masks per image)``, each
        a list over levels; with ``use_loc_filter`` only positions scoring at least
        ``loc_filter_thr`` have a guided anchor."""
        squares = self.square_anchor_generator.grid_priors(featmap_sizes, device=device)
        guided_anchors_list, loc_mask_list = [], []
        for img_id in range(len(img_metas)):
            anchors, masks = [], []
            for level, level_squares in enumerate(squares):
                guided, mask = self._get_guided_anchors_single(
                    level_squares, shape_preds[level][img_id], loc_preds[level][img_id],
                    use_loc_filter=use_loc_filter)
                anchors.append(guided)
                masks.append(mask)
            guided_anchors_list.append(anchors)
            loc_mask_list.append(masks)
        return [squares for _ in img_metas], guided_anchors_list, loc_mask_list

    def _get_guided_anchors_single(self, squares, shape_pred, loc_pred, use_loc_filter=False):
        """One level of one image: the squares reshaped by the (detached) shape deltas, and
        the mask of the positions kept."""
        loc_pred = loc_pred.sigmoid().detach()
        loc_mask = loc_pred >= (self.loc_filter_thr if use_loc_filter else 0.0)
        mask = loc_mask.permute(1, 2, 0).expand(-1, -1, self.num_base_priors).reshape(-1)
        squares = squares[mask]
        anchor_deltas = shape_pred.permute(1, 2, 0).reshape(-1, 2).detach()[mask]
        bbox_deltas = anchor_deltas.new_zeros(squares.size())
        bbox_deltas[:, 2:] = anchor_deltas
        return self.anchor_coder.decode(squares, bbox_deltas, wh_ratio_clip=1e-6), mask

    # ---------------------------------------------------------------- targets
    def ga_loc_targets(self, gt_bboxes_list, featmap_sizes):
        """Location targets per level ``[B, 1, H, W]``: each ground truth, on the level its
        size picks, marks its centre region (``center_ratio``) positive (target 1, weight 1),
        the rest of its ``ignore_ratio`` region ignored (weight 0), and that region on the
        neighbouring levels ignored too; everything else is negative with weight 0.1.
        Returns ``(targets, weights, avg_factor = all positions / 200)`` as mmdet."""
        anchor_scale = self.approx_anchor_generator.octave_base_scale
        strides = self.approx_anchor_generator.strides
        if any(s[0] != s[1] for s in strides):
            raise ValueError(f'guided anchoring needs square strides, got {strides}')
        strides = [s[0] for s in strides]
        r1 = (1 - cfg_get(self.train_cfg, 'center_ratio')) / 2
        r2 = (1 - cfg_get(self.train_cfg, 'ignore_ratio')) / 2
        num_imgs, num_levels = len(gt_bboxes_list), len(featmap_sizes)
        device = gt_bboxes_list[0].device
        targets = [torch.zeros(num_imgs, 1, h, w, device=device, dtype=torch.float32)
                   for h, w in featmap_sizes]
        weights = [torch.full_like(t, -1) for t in targets]
        ignore_maps = [torch.zeros_like(t) for t in targets]
        for img_id, gt_bboxes in enumerate(gt_bboxes_list):
            scale = torch.sqrt((gt_bboxes[:, 2] - gt_bboxes[:, 0]) *
                               (gt_bboxes[:, 3] - gt_bboxes[:, 1]))
            min_anchor_size = scale.new_full((1, ), float(anchor_scale * strides[0]))
            levels = torch.floor(torch.log2(scale) - torch.log2(min_anchor_size) + 0.5)
            levels = levels.clamp(min=0, max=num_levels - 1).long()
            for gt_id in range(gt_bboxes.size(0)):
                lvl = levels[gt_id].item()
                gt = gt_bboxes[gt_id, :4] / strides[lvl]
                ix1, iy1, ix2, iy2 = calc_region(gt, r2, featmap_sizes[lvl])
                cx1, cy1, cx2, cy2 = calc_region(gt, r1, featmap_sizes[lvl])
                targets[lvl][img_id, 0, cy1:cy2 + 1, cx1:cx2 + 1] = 1
                weights[lvl][img_id, 0, iy1:iy2 + 1, ix1:ix2 + 1] = 0
                weights[lvl][img_id, 0, cy1:cy2 + 1, cx1:cx2 + 1] = 1
                for near in (lvl - 1, lvl + 1):
                    if 0 <= near < num_levels:
                        gt = gt_bboxes[gt_id, :4] / strides[near]
                        ix1, iy1, ix2, iy2 = calc_region(gt, r2, featmap_sizes[near])
                        ignore_maps[near][img_id, 0, iy1:iy2 + 1, ix1:ix2 + 1] = 1
        for weight, ignore in zip(weights, ignore_maps):
            weight[(weight < 0) & (ignore > 0)] = 0
            weight[weight < 0] = 0.1
        avg_factor = sum(t.size(0) * t.size(-1) * t.size(-2) for t in targets) / 200
        return targets, weights, avg_factor

    def _ga_shape_target_single(self, flat_approxs, inside_flags, flat_squares, gt_bboxes,
                                gt_bboxes_ignore, img_meta, unmap_outputs=True):
        """The shape targets of one image: each square's assigned ground truth (by its
        approxes, ``ga_assigner``, sampled by ``ga_sampler``): ``(anchors, gts, weights,
        pos_inds, neg_inds)``."""
        if not inside_flags.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}); use allowed_border=-1')
        expand = inside_flags[:, None].expand(-1, self.approxs_per_octave).reshape(-1)
        approxs = flat_approxs[expand, :]
        squares = flat_squares[inside_flags, :]
        assign_result = self.ga_assigner.assign(approxs, squares, self.approxs_per_octave,
                                                gt_bboxes, gt_bboxes_ignore)
        sampling_result = self.ga_sampler.sample(assign_result, squares, gt_bboxes)
        bbox_anchors = torch.zeros_like(squares)
        bbox_gts = torch.zeros_like(squares)
        bbox_weights = torch.zeros_like(squares)
        pos_inds = sampling_result.pos_inds
        if len(pos_inds) > 0:
            bbox_anchors[pos_inds, :] = sampling_result.pos_bboxes
            bbox_gts[pos_inds, :] = sampling_result.pos_gt_bboxes.to(squares.dtype)
            bbox_weights[pos_inds, :] = 1.0
        if unmap_outputs:
            total = flat_squares.size(0)
            bbox_anchors = unmap(bbox_anchors, total, inside_flags)
            bbox_gts = unmap(bbox_gts, total, inside_flags)
            bbox_weights = unmap(bbox_weights, total, inside_flags)
        return bbox_anchors, bbox_gts, bbox_weights, pos_inds, sampling_result.neg_inds

    def ga_shape_targets(self, approx_list, inside_flag_list, square_list, gt_bboxes_list,
                         img_metas, gt_bboxes_ignore_list=None, unmap_outputs=True):
        """Per level ``(anchors, gts, weights)`` over the batch, and the positive / negative
        counts (at least 1 per image)."""
        num_imgs = len(img_metas)
        if not len(approx_list) == len(inside_flag_list) == len(square_list) == num_imgs:
            raise ValueError('approxes, inside flags and squares need one entry per image')
        num_level_squares = [s.size(0) for s in square_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        results = [self._ga_shape_target_single(
            torch.cat(approx_list[i]), torch.cat(inside_flag_list[i]), torch.cat(square_list[i]),
            gt_bboxes_list[i], gt_bboxes_ignore_list[i], img_metas[i], unmap_outputs)
            for i in range(num_imgs)]
        anchors, gts, weights, pos_inds, neg_inds = zip(*results)
        return (images_to_levels(anchors, num_level_squares),
                images_to_levels(gts, num_level_squares),
                images_to_levels(weights, num_level_squares),
                sum(max(i.numel(), 1) for i in pos_inds),
                sum(max(i.numel(), 1) for i in neg_inds))

    # ------------------------------------------------------------------ loss
    def loss_shape_single(self, shape_pred, bbox_anchors, bbox_gts, anchor_weights,
                          anchor_total_num):
        """Bounded IoU of the positive squares reshaped by the predicted deltas."""
        shape_pred = shape_pred.permute(0, 2, 3, 1).reshape(-1, 2)
        bbox_anchors = bbox_anchors.reshape(-1, 4)
        bbox_gts = bbox_gts.reshape(-1, 4)
        anchor_weights = anchor_weights.reshape(-1, 4)
        bbox_deltas = bbox_anchors.new_zeros(bbox_anchors.size())
        bbox_deltas[:, 2:] += shape_pred
        inds = torch.nonzero(anchor_weights[:, 0] > 0, as_tuple=False).squeeze(1)
        pred_anchors = self.anchor_coder.decode(bbox_anchors[inds], bbox_deltas[inds],
                                                wh_ratio_clip=1e-6)
        return self.loss_shape(pred_anchors, bbox_gts[inds], anchor_weights[inds],
                               avg_factor=anchor_total_num)

    def loss_loc_single(self, loc_pred, loc_target, loc_weight, loc_avg_factor):
        """``loss_loc`` of one level: the centre regions (target 1) are the one class's
        positives, label 0, the rest background, label 1 (mmdet 2.x's label convention).

        Fixed over mmdet 2.x, which passed the targets themselves as labels (mmdet 1.x's
        convention, where label 1 was the first class): its one-class focal loss took the
        centres as background and trained the location map inverted (high away from objects),
        against the paper and the test-time filter that keeps high-scoring positions."""
        labels = (loc_target.reshape(-1) == 0).long()
        return self.loss_loc(loc_pred.reshape(-1, 1), labels, loc_weight.reshape(-1),
                             avg_factor=loc_avg_factor)

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'shape_preds', 'loc_preds'))
    def loss(self, cls_scores, bbox_preds, shape_preds, loc_preds, gt_bboxes, gt_labels,
             img_metas, gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_shape, loss_loc)``, each a list over levels."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg, got '
                             f'{self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.approx_anchor_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generators '
                             f'have {self.approx_anchor_generator.num_levels} strides')
        device = cls_scores[0].device
        loc_targets, loc_weights, loc_avg_factor = self.ga_loc_targets(gt_bboxes, featmap_sizes)
        approxs_list, inside_flag_list = self.get_sampled_approxs(featmap_sizes, img_metas,
                                                                  device=device)
        squares_list, guided_anchors_list, _ = self.get_anchors(
            featmap_sizes, shape_preds, loc_preds, img_metas, device=device)
        (bbox_anchors_list, bbox_gts_list, anchor_weights_list, anchor_fg_num,
         anchor_bg_num) = self.ga_shape_targets(approxs_list, inside_flag_list, squares_list,
                                                gt_bboxes, img_metas)
        anchor_total_num = anchor_fg_num + anchor_bg_num if self.ga_sampling else anchor_fg_num
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, num_total_pos,
         num_total_neg) = self.get_targets(guided_anchors_list, inside_flag_list, gt_bboxes,
                                           img_metas, gt_bboxes_ignore_list=gt_bboxes_ignore,
                                           gt_labels_list=gt_labels,
                                           label_channels=label_channels)
        num_total_samples = num_total_pos + num_total_neg if self.sampling else num_total_pos
        num_level_anchors = [a.size(0) for a in guided_anchors_list[0]]
        all_anchors = images_to_levels([torch.cat(a) for a in guided_anchors_list],
                                       num_level_anchors)
        losses_cls, losses_bbox = [], []
        for args in zip(cls_scores, bbox_preds, all_anchors, labels_list, label_weights_list,
                        bbox_targets_list, bbox_weights_list):
            loss_cls, loss_bbox = self.loss_single(*args, num_total_samples=num_total_samples)
            losses_cls.append(loss_cls)
            losses_bbox.append(loss_bbox)
        losses_loc = [self.loss_loc_single(p, t, w, loc_avg_factor)
                      for p, t, w in zip(loc_preds, loc_targets, loc_weights)]
        losses_shape = [self.loss_shape_single(p, a, g, w, anchor_total_num)
                        for p, a, g, w in zip(shape_preds, bbox_anchors_list, bbox_gts_list,
                                              anchor_weights_list)]
        return dict(loss_cls=losses_cls, loss_bbox=losses_bbox, loss_shape=losses_shape,
                    loss_loc=losses_loc)

    # ------------------------------------------------------------- inference
    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'shape_preds', 'loc_preds'))
    def get_bboxes(self, cls_scores, bbox_preds, shape_preds, loc_preds, img_metas=None,
                   cfg=None, rescale=False, with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` (a GARPNHead: proposals
        ``[k, 5]``), from the guided anchors kept by the location filter (at test)."""
        if not len(cls_scores) == len(bbox_preds) == len(shape_preds) == len(loc_preds):
            raise ValueError('cls_scores, bbox_preds, shape_preds and loc_preds need one entry '
                             'per level')
        if img_metas is None or len(img_metas) != cls_scores[0].size(0):
            raise ValueError('get_bboxes needs one img_meta per image')
        if not with_nms:
            raise NotImplementedError(f'{type(self).__name__} boxes always go through NMS (as '
                                      'mmdet); with_nms=False is not supported')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        _, guided_anchors, loc_masks = self.get_anchors(
            featmap_sizes, shape_preds, loc_preds, img_metas, use_loc_filter=not self.training,
            device=cls_scores[0].device)
        results = []
        for i, meta in enumerate(img_metas):
            results.append(self._get_bboxes_single(
                [s[i].detach() for s in cls_scores], [b[i].detach() for b in bbox_preds],
                [a.detach() for a in guided_anchors[i]], loc_masks[i], meta['img_shape'],
                meta['scale_factor'], cfg, rescale))
        return results

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError(f'{type(self).__name__} does not support test-time '
                                  'augmentation (nor does mmdet)')

    def _get_bboxes_single(self, cls_scores, bbox_preds, mlvl_anchors, mlvl_masks, img_shape,
                           scale_factor, cfg, rescale=False):
        """mmdet's: per level the kept positions, their ``nms_pre`` best by top class score,
        decoded and clipped, divided by ``scale_factor`` when ``rescale``, then
        ``multiclass_nms`` (``score_thr``, ``nms``, ``max_per_img``)."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg to predict boxes')
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        mlvl_bboxes, mlvl_scores = [], []
        for cls_score, bbox_pred, anchors, mask in zip(cls_scores, bbox_preds, mlvl_anchors,
                                                       mlvl_masks):
            if mask.sum() == 0:
                continue
            cls_score = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels)
            scores = cls_score.sigmoid() if self.use_sigmoid_cls else cls_score.softmax(-1)
            scores = scores[mask, :]
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)[mask, :]
            if nms_pre > 0 and scores.shape[0] > nms_pre:
                fg = scores if self.use_sigmoid_cls else scores[:, :-1]
                _, topk = fg.max(dim=1)[0].topk(nms_pre)
                anchors, bbox_pred, scores = anchors[topk], bbox_pred[topk], scores[topk]
            mlvl_bboxes.append(self.bbox_coder.decode(anchors, bbox_pred, max_shape=img_shape))
            mlvl_scores.append(scores)
        if not mlvl_bboxes:
            return cls_scores[0].new_zeros(0, 5), cls_scores[0].new_zeros(0, dtype=torch.long)
        bboxes = torch.cat(mlvl_bboxes)
        if rescale:
            bboxes = bboxes / bboxes.new_tensor(scale_factor)
        scores = torch.cat(mlvl_scores)
        if self.use_sigmoid_cls:  # the background column multiclass_nms drops
            scores = torch.cat([scores, scores.new_zeros(scores.shape[0], 1)], dim=1)
        return multiclass_nms(bboxes, scores, cfg_get(cfg, 'score_thr'), cfg_get(cfg, 'nms'),
                              cfg_get(cfg, 'max_per_img'))
