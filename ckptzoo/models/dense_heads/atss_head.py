"""mmdet 2.x ``ATSSHead`` (Zhang et al. 2020): RetinaNet's two towers (GroupNorm by default),
``atss_cls`` / ``atss_reg`` / ``atss_centerness`` predictions, one learnable ``Scale`` per
level on the box deltas; anchors assigned by :class:`ATSSAssigner`; the GIoU loss on decoded
boxes weighted by the centerness target, and the centerness BCE. Detections multiply the
class scores by the predicted centerness (``BaseDenseHead.get_bboxes`` score factors).

State-dict keys equal mmdet's (``cls_convs.0.conv.weight``, ``cls_convs.0.gn.weight``,
``atss_cls.bias``, ``scales.0.scale``, ...). Checkpoint units: ``level{i}``, one per pyramid
level (that level's towers, predictions and ``Scale``)."""
from functools import partial

import torch
import torch.nn as nn

from ...core.anchor import anchor_inside_flags, images_to_levels
from ...core.utils import reduce_mean, unmap
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, Scale
from .anchor_head import AnchorHead
from .level_units import LevelUnitsMixin

__all__ = ['ATSSHead', 'ATSSTargetsMixin']


def _float_pred(bbox_pred):
    """mmdet casts the scaled box prediction with ``.float()`` (fp16 training); here only a
    half type is promoted, so that a float64 run stays float64."""
    return bbox_pred.float() if bbox_pred.dtype in (torch.float16, torch.bfloat16) \
        else bbox_pred


class ATSSTargetsMixin:
    """The targets ATSS and GFL share (mmdet writes them out in both heads): anchors assigned
    per image by an assigner that takes the number of inside anchors per level
    (:class:`ATSSAssigner`), no sampling, and the positives' gt boxes themselves as box targets
    (both heads regress decoded boxes)."""

    def _build_sampler(self, sampler, loss_cls):
        kind = None if sampler is None else sampler.get('type')
        kind = getattr(kind, '__name__', str(kind)).split('.')[-1]
        if sampler is not None and kind != 'PseudoSampler':
            raise ValueError(f'{type(self).__name__} samples no anchors: leave '
                             f'train_cfg.sampler out or set dict(type=\'PseudoSampler\') (mmdet '
                             f'ignored it), got {sampler!r}')
        return super()._build_sampler(None, loss_cls)

    def get_num_level_anchors_inside(self, num_level_anchors, inside_flags):
        return [int(flags.sum()) for flags in torch.split(inside_flags, num_level_anchors)]

    def _get_target_single(self, flat_anchors, valid_flags, num_level_anchors, gt_bboxes,
                           gt_bboxes_ignore, gt_labels, img_meta, label_channels=1,
                           unmap_outputs=True):
        """One image: ``(anchors, labels, label_weights, bbox_targets (gt boxes),
        bbox_weights, pos_inds, neg_inds)`` as mmdet."""
        allowed_border = cfg_get(self.train_cfg, 'allowed_border', -1)
        inside = anchor_inside_flags(flat_anchors, valid_flags, img_meta['img_shape'][:2],
                                     allowed_border)
        if not inside.any():
            raise ValueError(f'no anchor lies inside image {img_meta.get("filename", "")!r} '
                             f'(img_shape {img_meta["img_shape"]}, allowed_border '
                             f'{allowed_border}); use allowed_border=-1 or smaller anchors')
        anchors = flat_anchors[inside]
        gt_bboxes = gt_bboxes.to(anchors.dtype)
        assign_result = self.assigner.assign(
            anchors, self.get_num_level_anchors_inside(num_level_anchors, inside), gt_bboxes,
            gt_bboxes_ignore, gt_labels)
        sampling_result = self.sampler.sample(assign_result, anchors, gt_bboxes)

        num_valid = anchors.shape[0]
        bbox_targets = torch.zeros_like(anchors)
        bbox_weights = torch.zeros_like(anchors)
        labels = anchors.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = anchors.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            bbox_targets[pos_inds, :] = sampling_result.pos_gt_bboxes.to(bbox_targets.dtype)
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

    def get_targets(self, anchor_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, label_channels=1,
                    unmap_outputs=True):
        """mmdet's: ``AnchorHead.get_targets`` with the anchors per level first:
        ``(anchors, labels, label_weights, bbox_targets, bbox_weights, num_total_pos,
        num_total_neg)``, each of the first five a list over levels of ``[B, A_l, ...]``."""
        num_imgs = len(img_metas)
        if not (len(anchor_list) == len(valid_flag_list) == len(gt_bboxes_list) == num_imgs):
            raise ValueError(f'anchors, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(anchor_list)}, {len(valid_flag_list)}, '
                             f'{len(gt_bboxes_list)}')
        num_level_anchors = [a.size(0) for a in anchor_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._get_target_single(
            torch.cat(anchor_list[i]), torch.cat(valid_flag_list[i]), num_level_anchors,
            gt_bboxes_list[i], gt_bboxes_ignore_list[i], gt_labels_list[i], img_metas[i],
            label_channels=label_channels, unmap_outputs=unmap_outputs)
            for i in range(num_imgs)]
        anchors, labels, label_weights, bbox_targets, bbox_weights, pos_inds, neg_inds = \
            zip(*results)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        num_total_neg = sum(max(inds.numel(), 1) for inds in neg_inds)
        return tuple(images_to_levels(t, num_level_anchors) for t in
                     (anchors, labels, label_weights, bbox_targets, bbox_weights)) + \
            (num_total_pos, num_total_neg)


@MODELS.register_module()
class ATSSHead(LevelUnitsMixin, ATSSTargetsMixin, AnchorHead):
    """ATSS head, mmdet 2.x arguments.

    Args:
        num_classes (int), in_channels (int), feat_channels (int): as :class:`AnchorHead`.
        pred_kernel_size (int): kernel of the three prediction convs (default 3).
        stacked_convs (int): convs of each tower (default 4).
        conv_cfg, norm_cfg (dict | None): the tower convs (default GN, 32 groups).
        reg_decoded_bbox (bool): must be True (the default): the loss compares decoded boxes
            with the gt boxes and the centerness target is computed from those.
        loss_centerness (dict): default sigmoid CrossEntropyLoss.
        init_cfg (dict): Normal(std=0.01) convs, ``atss_cls`` bias at prior 0.01.
        with_cp (bool): ``'full'`` checkpointing of every level (ours; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
        **kwargs: :class:`AnchorHead` arguments (anchor_generator, bbox_coder, loss_cls,
            loss_bbox, train_cfg, test_cfg).

    ``train_cfg.sampler``, if given, must be ``PseudoSampler`` (mmdet ignored any sampler).
    """

    def __init__(self, num_classes, in_channels, pred_kernel_size=3, stacked_convs=4,
                 conv_cfg=None, norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                 reg_decoded_bbox=True,
                 loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True,
                                      loss_weight=1.0),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='atss_cls', std=0.01,
                                             bias_prob=0.01)),
                 with_cp=False, cp_use_reentrant=False, **kwargs):
        if isinstance(pred_kernel_size, bool) or not isinstance(pred_kernel_size, int) \
                or pred_kernel_size < 1 or pred_kernel_size % 2 == 0:
            raise ValueError(f'{type(self).__name__} pred_kernel_size must be a positive odd '
                             f'int, got {pred_kernel_size!r}')
        if isinstance(stacked_convs, bool) or not isinstance(stacked_convs, int) \
                or stacked_convs < 0:
            raise ValueError(f'{type(self).__name__} stacked_convs must be a non-negative '
                             f'int, got {stacked_convs!r}')
        self._check_reg_decoded_bbox(reg_decoded_bbox)
        self.pred_kernel_size = pred_kernel_size
        self.stacked_convs = stacked_convs
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        super().__init__(num_classes, in_channels, reg_decoded_bbox=reg_decoded_bbox,
                         init_cfg=init_cfg, **kwargs)
        self.loss_centerness = MODELS.build(loss_centerness)
        self._init_level_units(with_cp, cp_use_reentrant)

    def _check_reg_decoded_bbox(self, reg_decoded_bbox):
        if reg_decoded_bbox is not True:
            raise ValueError(f'{type(self).__name__} regresses decoded boxes: reg_decoded_bbox '
                             f'must be True, got {reg_decoded_bbox!r}')

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        pad = self.pred_kernel_size // 2
        self.atss_cls = nn.Conv2d(self.feat_channels, self.num_anchors * self.cls_out_channels,
                                  self.pred_kernel_size, padding=pad)
        self.atss_reg = nn.Conv2d(self.feat_channels, self.num_base_priors * 4,
                                  self.pred_kernel_size, padding=pad)
        self.atss_centerness = nn.Conv2d(self.feat_channels, self.num_base_priors * 1,
                                         self.pred_kernel_size, padding=pad)
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.prior_generator.strides])

    def _level_function(self, i):
        return partial(self.forward_single, scale=self.scales[i])

    def forward_single(self, x, scale):
        """``(cls_score [B, A*C, H, W], bbox_pred [B, A*4, H, W] (deltas times the level's
        scale, no exp as in ATSS), centerness [B, A, H, W])``."""
        cls_feat = reg_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            reg_feat = conv(reg_feat)
        cls_score = self.atss_cls(cls_feat)
        bbox_pred = _float_pred(scale(self.atss_reg(reg_feat)))
        return cls_score, bbox_pred, self.atss_centerness(reg_feat)

    def centerness_target(self, anchors, gts):
        """FCOS centerness of each anchor centre in its gt box:
        ``sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b))`` (positives only: their centres
        lie inside the box)."""
        cx = (anchors[:, 2] + anchors[:, 0]) / 2
        cy = (anchors[:, 3] + anchors[:, 1]) / 2
        left_right = torch.stack([cx - gts[:, 0], gts[:, 2] - cx], dim=1)
        top_bottom = torch.stack([cy - gts[:, 1], gts[:, 3] - cy], dim=1)
        return torch.sqrt((left_right.min(dim=-1)[0] / left_right.max(dim=-1)[0])
                          * (top_bottom.min(dim=-1)[0] / top_bottom.max(dim=-1)[0]))

    # ------------------------------------------------------------------ loss
    def loss_single(self, anchors, cls_score, bbox_pred, centerness, labels, label_weights,
                    bbox_targets, num_total_samples):
        """One level: ``(loss_cls, loss_bbox (not yet normalised), loss_centerness, sum of
        the centerness targets)``."""
        anchors = anchors.reshape(-1, 4)
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels).contiguous()
        bbox_pred = bbox_pred.permute(0, 2, 3, 1).reshape(-1, 4)
        centerness = centerness.permute(0, 2, 3, 1).reshape(-1)
        bbox_targets = bbox_targets.reshape(-1, 4)
        labels = labels.reshape(-1)
        label_weights = label_weights.reshape(-1)
        loss_cls = self.loss_cls(cls_score, labels, label_weights, avg_factor=num_total_samples)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().squeeze(1)
        if len(pos_inds) > 0:
            pos_targets = bbox_targets[pos_inds]
            pos_anchors = anchors[pos_inds]
            centerness_targets = self.centerness_target(pos_anchors, pos_targets)
            pos_decoded = self.bbox_coder.decode(pos_anchors, bbox_pred[pos_inds])
            loss_bbox = self.loss_bbox(pos_decoded, pos_targets, weight=centerness_targets,
                                       avg_factor=1.0)
            loss_centerness = self.loss_centerness(centerness[pos_inds], centerness_targets,
                                                   avg_factor=num_total_samples)
        else:
            loss_bbox = bbox_pred.sum() * 0
            loss_centerness = centerness.sum() * 0
            centerness_targets = bbox_targets.new_tensor(0.)
        return loss_cls, loss_bbox, loss_centerness, centerness_targets.sum()

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'centernesses'))
    def loss(self, cls_scores, bbox_preds, centernesses, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_centerness)``, each a list over levels. The class
        and centerness losses are averaged over the positives of the whole (distributed)
        batch, the box loss over the sum of the positives' centerness targets."""
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
        (anchor_list, labels_list, label_weights_list, bbox_targets_list, _, num_total_pos,
         _) = self.get_targets(anchor_list, valid_flag_list, gt_bboxes, img_metas,
                               gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
                               label_channels=label_channels)
        num_total_samples = max(reduce_mean(torch.tensor(
            num_total_pos, dtype=torch.float, device=device)).item(), 1.0)
        outs = [self.loss_single(*args, num_total_samples=num_total_samples) for args in zip(
            anchor_list, cls_scores, bbox_preds, centernesses, labels_list,
            label_weights_list, bbox_targets_list)]
        losses_cls, losses_bbox, losses_centerness, bbox_avg_factor = zip(*outs)
        bbox_avg_factor = reduce_mean(sum(bbox_avg_factor)).clamp_(min=1).item()
        return dict(loss_cls=list(losses_cls),
                    loss_bbox=[loss / bbox_avg_factor for loss in losses_bbox],
                    loss_centerness=list(losses_centerness))
