"""mmdet 2.x ``DDODHead`` (Disentangled Dense Object Detector, Chen et al. 2021): ATSS-like
towers (the first conv of each a DCN with ``use_dcn``) and ``atss_cls`` / ``atss_reg`` /
``atss_iou`` predictions, but two assignments: the classification branch's and the
regression branch's, each a cost-based :class:`ATSSAssigner` (``alpha``) on the predicted
scores and boxes; each level's losses are re-weighted by how few positives it has had.
At test time the class scores are multiplied by the predicted IoU (score factors).

The per-level positive counts (``cls_num_pos_samples_per_level``) accumulate over the
whole training run and over both branches, as in mmdet (its ``reg_num_pos_samples_per_level``
is kept and, as in mmdet, unused); they are not in the state dict, so a resumed run starts
counting again, as mmdet's does. The memory planner's probe steps do not count (the counts
honour the probe's ``at_capacity``, as samplers do), so a planned run trains as an unplanned
one.

State-dict keys equal mmdet's. Checkpoint units: ``level{i}``, one per pyramid level."""
from functools import partial

import torch
import torch.nn as nn

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.utils import reduce_mean, unmap
from ...registry import MODELS, TASK_UTILS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses.iou_loss import aligned_overlaps
from ..utils import ConvModule, Scale, bias_init_with_prob, normal_init
from .anchor_head import AnchorHead
from .atss_head import _float_pred
from .level_units import LevelUnitsMixin

__all__ = ['DDODHead']


class _LevelPositives:
    """The running per-level positive counts. ``at_capacity`` is set by the memory planner's
    probe (:func:`~ckptzoo.core.bbox.samplers.set_sampling_at_capacity`): its steps leave the
    counts as they were."""

    at_capacity = False

    def __init__(self, num_levels):
        self.counts = [0. for _ in range(num_levels)]


@MODELS.register_module()
class DDODHead(LevelUnitsMixin, AnchorHead):
    """DDOD head, mmdet 2.x arguments.

    Args:
        num_classes (int), in_channels (int): as :class:`AnchorHead`.
        stacked_convs (int): convs of each tower (default 4).
        conv_cfg, norm_cfg (dict | None): the tower convs (default GN, 32 groups).
        use_dcn (bool): the first conv of each tower is a DCN (default True).
        loss_iou (dict): the IoU branch's loss (default sigmoid CrossEntropyLoss).
        with_cp (bool): ``'full'`` checkpointing of every level (ours; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
        **kwargs: :class:`AnchorHead` arguments. ``train_cfg`` needs ``assigner`` (the
            classification branch's) and ``reg_assigner``.

    The weights are initialised as mmdet's ``DDODHead.init_weights`` does, whatever
    ``init_cfg`` says (mmdet ignored it too); a ``Pretrained`` init_cfg loads in
    ``init_weights``.
    """

    TRAIN_CFG_KEYS = AnchorHead.TRAIN_CFG_KEYS + ('reg_assigner', )

    def __init__(self, num_classes, in_channels, stacked_convs=4, conv_cfg=None, use_dcn=True,
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                 loss_iou=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        if isinstance(stacked_convs, bool) or not isinstance(stacked_convs, int) \
                or stacked_convs < 1:
            raise ValueError(f'DDODHead stacked_convs must be a positive int, got '
                             f'{stacked_convs!r}')
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.use_dcn = use_dcn
        init_cfg = kwargs.pop('init_cfg', None)
        super().__init__(num_classes, in_channels, init_cfg=None, **kwargs)
        self.init_cfg = init_cfg
        self._init_ddod_weights()
        if self.train_cfg:
            if cfg_get(self.train_cfg, 'reg_assigner') is None:
                raise ValueError("DDODHead train_cfg needs 'reg_assigner' (the regression "
                                 "branch's assigner) besides 'assigner'")
            self.cls_assigner = self.assigner
            self.reg_assigner = TASK_UTILS.build(cfg_get(self.train_cfg, 'reg_assigner'))
        self.loss_iou = MODELS.build(loss_iou)
        self._init_level_units(with_cp, cp_use_reentrant)

    def _build_sampler(self, sampler, loss_cls):
        kind = None if sampler is None else sampler.get('type')
        kind = getattr(kind, '__name__', str(kind)).split('.')[-1]
        if sampler is not None and kind != 'PseudoSampler':
            raise ValueError(f'DDODHead samples no anchors: leave train_cfg.sampler out or set '
                             f"dict(type='PseudoSampler') (mmdet ignored it), got {sampler!r}")
        return super()._build_sampler(None, loss_cls)

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            conv_cfg = dict(type='DCN', deform_groups=1) if i == 0 and self.use_dcn \
                else self.conv_cfg
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=conv_cfg, norm_cfg=self.norm_cfg))
        self.atss_cls = nn.Conv2d(self.feat_channels,
                                  self.num_base_priors * self.cls_out_channels, 3, padding=1)
        self.atss_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4, 3, padding=1)
        self.atss_iou = nn.Conv2d(self.feat_channels, self.num_base_priors * 1, 3, padding=1)
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.prior_generator.strides])
        self.level_positives = _LevelPositives(self.prior_generator.num_levels)
        self.cls_num_pos_samples_per_level = self.level_positives.counts
        self.reg_num_pos_samples_per_level = [0. for _ in self.prior_generator.strides]

    def _init_ddod_weights(self):
        """mmdet's ``DDODHead.init_weights``."""
        for m in list(self.cls_convs) + list(self.reg_convs):
            normal_init(m.conv, std=0.01)
        normal_init(self.atss_reg, std=0.01)
        normal_init(self.atss_iou, std=0.01)
        normal_init(self.atss_cls, std=0.01, bias=bias_init_with_prob(0.01))

    def _level_function(self, i):
        return partial(self.forward_single, scale=self.scales[i])

    def forward_single(self, x, scale):
        """``(cls_score [B, A*C, H, W], bbox_pred [B, A*4, H, W] deltas, iou_pred
        [B, A, H, W] logits)``."""
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        return (self.atss_cls(cls_feat), _float_pred(scale(self.atss_reg(reg_feat))),
                self.atss_iou(reg_feat))

    # ------------------------------------------------------------------ loss
    def loss_cls_single(self, cls_score, labels, label_weights, reweight_factor,
                        num_total_samples):
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels).contiguous()
        loss_cls = self.loss_cls(cls_score, labels.reshape(-1), label_weights.reshape(-1),
                                 avg_factor=num_total_samples)
        return reweight_factor * loss_cls,

    def loss_reg_single(self, anchors, bbox_pred, iou_pred, labels, label_weights,
                        bbox_targets, bbox_weights, reweight_factor, num_total_samples):
        """One level: the GIoU of the decoded boxes and the IoU branch's BCE against the
        (detached) IoU of those boxes, both over the positives, times the level's factor."""
        anchors = anchors.reshape(-1, 4)
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
        iou_pred = iou_pred.permute(0, 2, 3, 1).reshape(-1, )
        bbox_targets = bbox_targets.reshape(-1, 4)
        bbox_weights = bbox_weights.reshape(-1, 4)
        labels = labels.reshape(-1)
        label_weights = label_weights.reshape(-1)
        iou_targets = label_weights.new_zeros(labels.shape)
        iou_weights = label_weights.new_zeros(labels.shape)
        iou_weights[bbox_weights.sum(dim=1) > 0] = 1.
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        if len(pos_inds) > 0:
            pos_anchors = anchors[pos_inds]
            pos_decoded = self.bbox_coder.decode(pos_anchors, bbox_pred[pos_inds])
            pos_targets = self.bbox_coder.decode(pos_anchors, bbox_targets[pos_inds])
            loss_bbox = self.loss_bbox(pos_decoded, pos_targets, avg_factor=num_total_samples)
            iou_targets[pos_inds] = aligned_overlaps(pos_decoded.detach(), pos_targets).to(
                iou_targets.dtype)
            loss_iou = self.loss_iou(iou_pred, iou_targets, iou_weights,
                                     avg_factor=num_total_samples)
        else:
            loss_bbox = bbox_pred.sum() * 0
            loss_iou = iou_pred.sum() * 0
        return reweight_factor * loss_bbox, reweight_factor * loss_iou

    def calc_reweight_factor(self, labels_list):
        """Adds each level's positives to the running counts; the level with the fewest gets
        factor 2, the most 1, linearly between (the counts stay as they were while the
        planner's probe runs)."""
        counts = self.cls_num_pos_samples_per_level
        if self.level_positives.at_capacity:
            counts = list(counts)
        for i, labels in enumerate(labels_list):
            counts[i] += int(((labels >= 0) & (labels < self.num_classes)).sum())
        low, high = min(counts), max(counts)
        interval = 1. / (high - low + 1e-10)
        return [2. - (n - low) * interval for n in counts]

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'iou_preds'))
    def loss(self, cls_scores, bbox_preds, iou_preds, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_iou)``, each a list over levels, averaged over
        the positives of the (distributed) batch of their branch's assignment."""
        if not self.train_cfg:
            raise ValueError(f'{type(self).__name__}.loss needs train_cfg, got '
                             f'{self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if len(featmap_sizes) != self.prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the anchor generator '
                             f'has {self.prior_generator.num_levels} strides')
        device = cls_scores[0].device
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas, device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        common = self.process_predictions_and_anchors(anchor_list, valid_flag_list, cls_scores,
                                                      bbox_preds, img_metas, gt_bboxes_ignore)
        (anchor_list, valid_flag_list, num_level_anchors_list, cls_score_list, bbox_pred_list,
         gt_bboxes_ignore_list) = common
        kwargs = dict(gt_bboxes_ignore_list=gt_bboxes_ignore_list, gt_labels_list=gt_labels,
                      label_channels=label_channels)
        args = (anchor_list, valid_flag_list, num_level_anchors_list, cls_score_list,
                bbox_pred_list, gt_bboxes, img_metas)

        _, labels_list, label_weights_list, _, _, num_total_pos, _ = \
            self.get_cls_targets(*args, **kwargs)
        num_total_samples = max(reduce_mean(torch.tensor(
            num_total_pos, dtype=torch.float, device=device)).item(), 1.0)
        factors = self.calc_reweight_factor(labels_list)
        losses_cls = [self.loss_cls_single(*a, num_total_samples=num_total_samples)[0]
                      for a in zip(cls_scores, labels_list, label_weights_list, factors)]

        (reg_anchor_list, labels_list, label_weights_list, bbox_targets_list,
         bbox_weights_list, num_total_pos, _) = self.get_reg_targets(*args, **kwargs)
        num_total_samples = max(reduce_mean(torch.tensor(
            num_total_pos, dtype=torch.float, device=device)).item(), 1.0)
        factors = self.calc_reweight_factor(labels_list)
        outs = [self.loss_reg_single(*a, num_total_samples=num_total_samples) for a in zip(
            reg_anchor_list, bbox_preds, iou_preds, labels_list, label_weights_list,
            bbox_targets_list, bbox_weights_list, factors)]
        losses_bbox, losses_iou = zip(*outs)
        return dict(loss_cls=losses_cls, loss_bbox=list(losses_bbox),
                    loss_iou=list(losses_iou))

    # ---------------------------------------------------------------- targets
    def process_predictions_and_anchors(self, anchor_list, valid_flag_list, cls_scores,
                                        bbox_preds, img_metas, gt_bboxes_ignore_list):
        """Per image: the anchors, flags and predictions of all levels concatenated."""
        num_imgs = len(img_metas)
        if not (len(anchor_list) == len(valid_flag_list) == num_imgs):
            raise ValueError(f'anchors and valid flags need one entry per image ({num_imgs}), '
                             f'got {len(anchor_list)} and {len(valid_flag_list)}')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        scores = [s.permute(0, 2, 3, 1).reshape(num_imgs, -1,
                                                self.num_base_priors * self.cls_out_channels)
                  for s in cls_scores]
        preds = [p.permute(0, 2, 3, 1).reshape(num_imgs, -1, self.num_base_priors * 4)
                 for p in bbox_preds]
        return ([torch.cat(a) for a in anchor_list], [torch.cat(v) for v in valid_flag_list],
                [num_level_anchors] * num_imgs,
                [torch.cat([s[i] for s in scores]) for i in range(num_imgs)],
                [torch.cat([p[i] for p in preds]) for i in range(num_imgs)],
                gt_bboxes_ignore_list or [None] * num_imgs)

    def _get_targets(self, is_cls_assigner, anchor_list, valid_flag_list,
                     num_level_anchors_list, cls_score_list, bbox_pred_list, gt_bboxes_list,
                     img_metas, gt_bboxes_ignore_list=None, gt_labels_list=None,
                     label_channels=1, unmap_outputs=True):
        num_imgs = len(img_metas)
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_target_single(
            anchor_list[i], valid_flag_list[i], cls_score_list[i], bbox_pred_list[i],
            num_level_anchors_list[i], gt_bboxes_list[i], gt_bboxes_ignore_list[i],
            gt_labels_list[i], img_metas[i], label_channels=label_channels,
            unmap_outputs=unmap_outputs, is_cls_assigner=is_cls_assigner)
            for i in range(num_imgs)]
        anchors, labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds = \
            zip(*results)
        num_level_anchors = num_level_anchors_list[0]
        return tuple(images_to_levels(t, num_level_anchors) for t in
                     (anchors, labels, label_weights, bbox_targets, bbox_weights)) + (
            sum(max(inds.numel(), 1) for inds in pos_inds),
            sum(max(inds.numel(), 1) for inds in neg_inds))

    def get_cls_targets(self, *args, **kwargs):
        """The classification branch's targets (``train_cfg.assigner``), per level."""
        return self._get_targets(True, *args, **kwargs)

    def get_reg_targets(self, *args, **kwargs):
        """The regression branch's targets (``train_cfg.reg_assigner``), per level."""
        return self._get_targets(False, *args, **kwargs)

    def get_num_level_anchors_inside(self, num_level_anchors, inside_flags):
        return [int(flags.sum()) for flags in torch.split(inside_flags, num_level_anchors)]

    def _get_target_single(self, flat_anchors, valid_flags, cls_scores, bbox_preds,
                           num_level_anchors, gt_bboxes, gt_bboxes_ignore, gt_labels, img_meta,
                           label_channels=1, unmap_outputs=True, is_cls_assigner=True):
        """One image, one branch: ``(anchors, labels, label_weights, bbox_targets (deltas),
        bbox_weights, pos_inds, neg_inds)``; the assigner sees the predicted scores and the
        decoded predicted boxes of the inside anchors."""
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     allowed_border)
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}, allowed_border '
                             f'{allowed_border}); use allowed_border=-1 or smaller anchors')
        anchors = flat_anchors[inside]
        gt_bboxes = gt_bboxes.to(anchors.dtype)
        assigner = self.cls_assigner if is_cls_assigner else self.reg_assigner
        assign_result = assigner.assign(
            anchors, self.get_num_level_anchors_inside(num_level_anchors, inside), gt_bboxes,
            gt_bboxes_ignore, gt_labels, cls_scores[inside, :],
            self.bbox_coder.decode(anchors, bbox_preds[inside, :]))
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)

        num_valid = anchors.shape[0]
        bbox_targets = torch.zeros_like(anchors)
        bbox_weights = torch.zeros_like(anchors)
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            bbox_targets[pos_inds, :] = self.bbox_coder.encode(
                sampling_result.pos_bboxes, sampling_result.pos_gt_bboxes).to(anchors.dtype)
            bbox_weights[pos_inds, :] = 1.0
            if gt_labels is None:
                labels[pos_inds] = 0
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            pos_weight = cfg_get(self.train_cfg, 'pos_weight', -1)
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        if unmap_outputs:
            total = flat_anchors.size(0)
            anchors = unmap(anchors, total, inside)
            labels = unmap(labels, total, inside, fill=self.num_classes)
            label_weights = unmap(label_weights, total, inside)
            bbox_targets = unmap(bbox_targets, total, inside)
            bbox_weights = unmap(bbox_weights, total, inside)
        return (anchors, labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds)
