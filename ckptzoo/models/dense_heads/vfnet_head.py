"""mmdet 2.x ``VFNetHead`` (Zhang et al. 2021, VarifocalNet): FCOS-style towers predict the
distances to a box's sides; a deformable convolution samples the features at nine points of a
star on that box (its centre, the four side midpoints, the four corners) to refine the box
(a factor on each distance) and to give an IoU-aware classification score trained with the
:class:`VarifocalLoss`. Targets come from ATSS on anchors (``use_atss``) or FCOS's rules.

mmdet writes it as ``VFNetHead(ATSSHead, FCOSHead)`` built through ``AnchorFreeHead``'s
constructor; so does this class. State-dict keys equal mmdet's (``vfnet_reg_conv``,
``vfnet_reg_refine_dconv.weight``, ``scales_refine.0.scale``, ``vfnet_cls``, ...).
Checkpoint units: ``level{i}``, one per stride, each with that level's two ``Scale``, its
stride and its regression denominator."""
from functools import partial

import torch
import torch.nn as nn

from ...core.anchor import MlvlPointGenerator
from ...core.utils import reduce_mean
from ...ops.deform_conv import DeformConv2d
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..losses.iou_loss import aligned_overlaps
from ..utils import ConvModule, Scale
from .anchor_free_head import AnchorFreeHead
from .anchor_head import AnchorHead
from .atss_head import ATSSHead, ATSSTargetsMixin
from .fcos_head import INF, FCOSHead
from .level_units import LevelUnitsMixin

__all__ = ['VFNetHead']

BBOX_NORM_TYPES = ('reg_denom', 'stride')


def _float(t):
    """mmdet's ``.float()`` on the distances (``exp`` overflows in half precision); a float64
    model stays float64 here."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


class _AnchorFreeInit(LevelUnitsMixin):
    """Ends ``AnchorFreeHead.__init__``'s ``super().__init__()`` at ``nn.Module``: in
    VFNetHead's method order (ATSSHead's bases and FCOSHead's merged) ``AnchorHead`` comes
    after ``AnchorFreeHead``, whose constructor must not run it (mmdet's order reaches
    ``BaseDenseHead`` there)."""

    def __init__(self):
        nn.Module.__init__(self)


@MODELS.register_module()
class VFNetHead(ATSSHead, FCOSHead, _AnchorFreeInit):
    """Args (mmdet 2.x's; the rest are :class:`AnchorFreeHead`'s: feat_channels,
    stacked_convs, strides, dcn_on_last_conv, conv_bias, conv_cfg, train_cfg, test_cfg,
    with_cp, ...):
        regress_ranges, center_sampling, center_sample_radius: FCOS's (``use_atss=False``);
            the last range's end also sets the last level's ``reg_denom`` (twice the one
            before).
        sync_num_pos (bool): average the classification loss over the positives of all
            processes.
        gradient_mul (float): the share of the gradient the initial boxes receive through the
            deformable convs' offsets.
        bbox_norm_type (str): ``'reg_denom'`` or ``'stride'``: what ``exp(pred)`` is scaled by.
        use_vfl (bool): :class:`VarifocalLoss` (``loss_cls``) on IoU targets, else the focal
            loss ``loss_cls_fl`` on labels.
        loss_bbox, loss_bbox_refine (dict): the initial and refined boxes' losses.
        use_atss (bool): ATSS targets on ``anchor_generator``'s anchors (whose
            ``center_offset`` also places the points), else FCOS targets at cell centres.
        reg_decoded_bbox (bool): kept as mmdet (the losses always compare decoded boxes).
    """

    def __init__(self, num_classes, in_channels,
                 regress_ranges=((-1, 64), (64, 128), (128, 256), (256, 512), (512, INF)),
                 center_sampling=False, center_sample_radius=1.5, sync_num_pos=True,
                 gradient_mul=0.1, bbox_norm_type='reg_denom',
                 loss_cls_fl=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                                  loss_weight=1.0),
                 use_vfl=True,
                 loss_cls=dict(type='VarifocalLoss', use_sigmoid=True, alpha=0.75, gamma=2.0,
                               iou_weighted=True, loss_weight=1.0),
                 loss_bbox=dict(type='GIoULoss', loss_weight=1.5),
                 loss_bbox_refine=dict(type='GIoULoss', loss_weight=2.0),
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True), use_atss=True,
                 reg_decoded_bbox=True,
                 anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                       scales_per_octave=1, center_offset=0.0,
                                       strides=[8, 16, 32, 64, 128]),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='vfnet_cls', std=0.01,
                                             bias_prob=0.01)),
                 **kwargs):
        if bbox_norm_type not in BBOX_NORM_TYPES:
            raise ValueError(f'VFNetHead bbox_norm_type must be one of '
                             f'{", ".join(map(repr, BBOX_NORM_TYPES))}, got {bbox_norm_type!r}')
        if not center_sample_radius > 0:
            raise ValueError(f'center_sample_radius must be > 0, got {center_sample_radius!r}')
        self.num_dconv_points = 9
        self.dcn_kernel, self.dcn_pad = 3, 1
        # the 3x3 kernel's regular grid as (y, x) pairs, row-major
        base = torch.arange(-1., 2., dtype=torch.float64, device='cpu')
        self.dcn_base_offset = torch.stack([base.repeat_interleave(3), base.repeat(3)],
                                           dim=1).reshape(1, -1, 1, 1)
        AnchorFreeHead.__init__(self, num_classes, in_channels, norm_cfg=norm_cfg,
                                init_cfg=init_cfg, **kwargs)
        if len(regress_ranges) != len(self.strides) or len(regress_ranges) < 2:
            raise ValueError(f'VFNetHead needs one regress range per stride '
                             f'({len(self.strides)}), two levels at least (the last '
                             f'reg_denom is twice the one before), got {len(regress_ranges)}')
        self.regress_ranges = regress_ranges
        self.reg_denoms = [r[-1] for r in regress_ranges]
        self.reg_denoms[-1] = self.reg_denoms[-2] * 2
        self.center_sampling = center_sampling
        self.center_sample_radius = center_sample_radius
        self.norm_on_bbox = False  # FCOS's targets in pixels
        self.sync_num_pos = sync_num_pos
        self.bbox_norm_type = bbox_norm_type
        self.gradient_mul = gradient_mul
        self.use_vfl = use_vfl
        self.loss_cls = MODELS.build(loss_cls if use_vfl else loss_cls_fl)
        self.loss_bbox = MODELS.build(loss_bbox)
        self.loss_bbox_refine = MODELS.build(loss_bbox_refine)
        self.use_atss = use_atss
        self.reg_decoded_bbox = reg_decoded_bbox
        self.use_sigmoid_cls = loss_cls.get('use_sigmoid', False)
        self.anchor_center_offset = anchor_generator['center_offset']
        self.sampling = False
        if self.train_cfg:
            if isinstance(self.train_cfg, dict):
                check_keys(self.train_cfg, AnchorHead.TRAIN_CFG_KEYS, 'train_cfg',
                           owner='VFNetHead')
            self.assigner = TASK_UTILS.build(cfg_get(self.train_cfg, 'assigner'))
            self.sampler = ATSSTargetsMixin._build_sampler(
                self, cfg_get(self.train_cfg, 'sampler'), loss_cls)
        self.atss_prior_generator = TASK_UTILS.build(anchor_generator)
        self.fcos_prior_generator = MlvlPointGenerator(
            anchor_generator['strides'], self.anchor_center_offset if use_atss else 0.5)
        self.prior_generator = self.fcos_prior_generator
        self.num_base_priors = self.prior_generator.num_base_priors[0]
        self._init_level_units(kwargs.get('with_cp', False),
                               kwargs.get('cp_use_reentrant', False))

    def _init_layers(self):
        AnchorFreeHead._init_cls_convs(self)
        AnchorFreeHead._init_reg_convs(self)
        self.relu = nn.ReLU(inplace=True)
        self.vfnet_reg_conv = ConvModule(self.feat_channels, self.feat_channels, 3, stride=1,
                                         padding=1, conv_cfg=self.conv_cfg,
                                         norm_cfg=self.norm_cfg, bias=self.conv_bias)
        self.vfnet_reg = nn.Conv2d(self.feat_channels, 4, 3, padding=1)
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.strides])
        self.vfnet_reg_refine_dconv = DeformConv2d(self.feat_channels, self.feat_channels,
                                                   self.dcn_kernel, 1, padding=self.dcn_pad)
        self.vfnet_reg_refine = nn.Conv2d(self.feat_channels, 4, 3, padding=1)
        self.scales_refine = nn.ModuleList([Scale(1.0) for _ in self.strides])
        self.vfnet_cls_dconv = DeformConv2d(self.feat_channels, self.feat_channels,
                                            self.dcn_kernel, 1, padding=self.dcn_pad)
        self.vfnet_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)

    def _level_function(self, level):
        return partial(self.forward_single, scale=self.scales[level],
                       scale_refine=self.scales_refine[level], stride=self.strides[level],
                       reg_denom=self.reg_denoms[level])

    def forward(self, feats):
        """Training: ``(cls_scores, bbox_preds, bbox_preds_refine)``; eval: ``(cls_scores,
        bbox_preds_refine)``; each a list over levels."""
        return LevelUnitsMixin.forward(self, feats)

    def forward_single(self, x, scale, scale_refine, stride, reg_denom):
        cls_feat = reg_feat = x
        for layer in self.cls_convs:
            cls_feat = layer(cls_feat)
        for layer in self.reg_convs:
            reg_feat = layer(reg_feat)
        reg_feat_init = self.vfnet_reg_conv(reg_feat)
        norm = reg_denom if self.bbox_norm_type == 'reg_denom' else stride
        bbox_pred = _float(scale(self.vfnet_reg(reg_feat_init))).exp() * norm
        dcn_offset = self.star_dcn_offset(bbox_pred, self.gradient_mul,
                                          stride).to(reg_feat.dtype)
        reg_feat = self.relu(self.vfnet_reg_refine_dconv(reg_feat, dcn_offset))
        bbox_pred_refine = _float(scale_refine(self.vfnet_reg_refine(reg_feat))).exp()
        bbox_pred_refine = bbox_pred_refine * bbox_pred.detach()
        cls_feat = self.relu(self.vfnet_cls_dconv(cls_feat, dcn_offset))
        cls_score = self.vfnet_cls(cls_feat)
        if self.training:
            return cls_score, bbox_pred, bbox_pred_refine
        return cls_score, bbox_pred_refine

    def star_dcn_offset(self, bbox_pred, gradient_mul, stride):
        """The offsets moving the 3x3 kernel's points onto the star of the box ``bbox_pred``
        (distances ``l, t, r, b`` in pixels, here in strides): rows ``-t, 0, +b``, columns
        ``-l, 0, +r``; only ``gradient_mul`` of the gradient reaches ``bbox_pred``."""
        dcn_base_offset = self.dcn_base_offset.type_as(bbox_pred)
        pred = ((1 - gradient_mul) * bbox_pred.detach() + gradient_mul * bbox_pred) / stride
        x1, y1, x2, y2 = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
        n, _, h, w = bbox_pred.size()
        offset = bbox_pred.new_zeros(n, 2 * self.num_dconv_points, h, w)
        # (y, x) of the points: top-left, top, top-right, left, centre, right, bottom-left, ...
        for channel, value in ((0, -1.0 * y1), (1, -1.0 * x1), (2, -1.0 * y1), (4, -1.0 * y1),
                               (5, x2), (7, -1.0 * x1), (11, x2), (12, y2), (13, -1.0 * x1),
                               (14, y2), (16, y2), (17, x2)):
            offset[:, channel] = value
        return offset - dcn_base_offset

    # ------------------------------------------------------------------ loss
    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'bbox_preds_refine'))
    def loss(self, cls_scores, bbox_preds, bbox_preds_refine, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_bbox, loss_bbox_rf)``: the (varifocal) classification loss
        over every point, averaged over the positives; the GIoU losses of the initial and
        refined boxes weighted by their IoU with the target (averaged over its sum)."""
        if not len(cls_scores) == len(bbox_preds) == len(bbox_preds_refine):
            raise ValueError(f'cls_scores, bbox_preds and bbox_preds_refine need one entry per '
                             f'level, got {len(cls_scores)}, {len(bbox_preds)} and '
                             f'{len(bbox_preds_refine)}')
        if self.use_atss and not self.train_cfg:
            raise ValueError(f'VFNetHead.loss needs train_cfg (assigner, ...), got '
                             f'{self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        all_level_points = self.fcos_prior_generator.grid_priors(
            featmap_sizes, bbox_preds[0].dtype, bbox_preds[0].device)
        labels, label_weights, bbox_targets, bbox_weights = self.get_targets(
            cls_scores, all_level_points, gt_bboxes, gt_labels, img_metas, gt_bboxes_ignore)
        num_imgs = cls_scores[0].size(0)
        flat_cls = torch.cat([c.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
                              for c in cls_scores])
        flat_reg = torch.cat([b.permute(0, 2, 3, 1).reshape(-1, 4) for b in bbox_preds])
        flat_reg_rf = torch.cat([b.permute(0, 2, 3, 1).reshape(-1, 4)
                                 for b in bbox_preds_refine])
        flat_labels = torch.cat(labels)
        flat_targets = torch.cat(bbox_targets)
        flat_points = torch.cat([p.repeat(num_imgs, 1) for p in all_level_points])
        pos_inds = torch.where((flat_labels >= 0) & (flat_labels < self.num_classes))[0]
        num_pos = len(pos_inds)
        pos_reg, pos_reg_rf = flat_reg[pos_inds], flat_reg_rf[pos_inds]
        pos_labels = flat_labels[pos_inds]
        if self.sync_num_pos:
            num_pos_avg = max(reduce_mean(pos_inds.new_tensor(num_pos).float()).item(), 1.0)
        else:
            num_pos_avg = num_pos
        pos_points = flat_points[pos_inds]
        pos_decoded = self.bbox_coder.decode(pos_points, pos_reg)
        pos_decoded_targets = self.bbox_coder.decode(pos_points, flat_targets[pos_inds])
        iou_targets_ini = aligned_overlaps(pos_decoded,
                                           pos_decoded_targets.detach()).clamp(min=1e-6)
        bbox_weights_ini = iou_targets_ini.clone().detach()
        bbox_avg_factor_ini = reduce_mean(bbox_weights_ini.sum()).clamp_(min=1).item()
        pos_decoded_rf = self.bbox_coder.decode(pos_points, pos_reg_rf)
        iou_targets_rf = aligned_overlaps(pos_decoded_rf,
                                          pos_decoded_targets.detach()).clamp(min=1e-6)
        bbox_weights_rf = iou_targets_rf.clone().detach()
        bbox_avg_factor_rf = reduce_mean(bbox_weights_rf.sum()).clamp_(min=1).item()
        cls_iou_targets = torch.zeros_like(flat_cls) if self.use_vfl else None
        if num_pos > 0:
            loss_bbox = self.loss_bbox(pos_decoded, pos_decoded_targets.detach(),
                                       weight=bbox_weights_ini, avg_factor=bbox_avg_factor_ini)
            loss_bbox_refine = self.loss_bbox_refine(
                pos_decoded_rf, pos_decoded_targets.detach(), weight=bbox_weights_rf,
                avg_factor=bbox_avg_factor_rf)
            if self.use_vfl:
                cls_iou_targets[pos_inds, pos_labels] = iou_targets_rf.clone().detach()
        else:
            loss_bbox = pos_reg.sum() * 0
            loss_bbox_refine = pos_reg_rf.sum() * 0
        if self.use_vfl:
            loss_cls = self.loss_cls(flat_cls, cls_iou_targets, avg_factor=num_pos_avg)
        else:
            loss_cls = self.loss_cls(flat_cls, flat_labels, weight=label_weights,
                                     avg_factor=num_pos_avg)
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox, loss_bbox_rf=loss_bbox_refine)

    # --------------------------------------------------------------- targets
    def get_targets(self, cls_scores, mlvl_points, gt_bboxes, gt_labels, img_metas,
                    gt_bboxes_ignore):
        """``(labels [per level], label_weights, bbox_targets [per level, distances],
        bbox_weights)`` over the batch, from ATSS (``use_atss``) or FCOS (weights None)."""
        if self.use_atss:
            return self.get_atss_targets(cls_scores, mlvl_points, gt_bboxes, gt_labels,
                                         img_metas, gt_bboxes_ignore)
        labels, bbox_targets = FCOSHead.get_targets(self, mlvl_points, gt_bboxes, gt_labels)
        return labels, None, bbox_targets, None

    def _get_target_single(self, *args, **kwargs):
        if self.use_atss:
            return ATSSTargetsMixin._get_target_single(self, *args, **kwargs)
        return FCOSHead._get_target_single(self, *args, **kwargs)

    def get_anchors(self, featmap_sizes, img_metas, device='cpu'):
        """ATSS's anchors (``atss_prior_generator``) and each image's valid flags."""
        anchors = self.atss_prior_generator.grid_priors(featmap_sizes, device=device)
        valid_flag_list = [self.atss_prior_generator.valid_flags(
            featmap_sizes, meta['pad_shape'], device=device) for meta in img_metas]
        return [anchors for _ in img_metas], valid_flag_list

    def get_atss_targets(self, cls_scores, mlvl_points, gt_bboxes, gt_labels, img_metas,
                         gt_bboxes_ignore=None):
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        if not len(featmap_sizes) == self.atss_prior_generator.num_levels == \
                self.fcos_prior_generator.num_levels:
            raise ValueError(f'got {len(featmap_sizes)} feature levels, the head has '
                             f'{self.fcos_prior_generator.num_levels} strides')
        anchor_list, valid_flag_list = self.get_anchors(featmap_sizes, img_metas,
                                                        cls_scores[0].device)
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        (_, labels_list, label_weights_list, bbox_targets_list, bbox_weights_list, _,
         _) = ATSSTargetsMixin.get_targets(
            self, anchor_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels,
            label_channels=label_channels, unmap_outputs=True)
        bbox_targets_list = self.transform_bbox_targets(
            [t.reshape(-1, 4) for t in bbox_targets_list], mlvl_points, len(img_metas))
        labels_list = [labels.reshape(-1) for labels in labels_list]
        label_weights = torch.cat([w.reshape(-1) for w in label_weights_list])
        bbox_weights = torch.cat([w.reshape(-1) for w in bbox_weights_list])
        return labels_list, label_weights, bbox_targets_list, bbox_weights

    def transform_bbox_targets(self, decoded_bboxes, mlvl_points, num_imgs):
        """Per level, the target boxes as distances from the points."""
        if len(decoded_bboxes) != len(mlvl_points):
            raise ValueError(f'{len(decoded_bboxes)} levels of boxes for {len(mlvl_points)} '
                             'levels of points')
        return [self.bbox_coder.encode(points.repeat(num_imgs, 1), boxes)
                for points, boxes in zip(mlvl_points, decoded_bboxes)]
