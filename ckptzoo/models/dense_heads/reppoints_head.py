"""mmdet 2.x ``RepPointsHead`` (Yang et al. 2019): each location predicts a set of
``num_points`` points in two steps. The initial points (offsets from the location, or a grid
on a regressed box with ``use_grid_points``) steer two deformable convolutions, which classify
the set and refine its points. A set becomes a box by ``transform_method``: ``'moment'``
(mean +- std scaled by a learnt ``moment_transfer``), ``'minmax'`` or ``'partial_minmax'``
(the first four points only).

Training assigns the initial points with ``train_cfg.init.assigner`` (a ``PointAssigner`` on
the locations, or a ``MaxIoUAssigner`` on boxes of ``point_base_scale`` strides) and the
refined ones with ``train_cfg.refine.assigner`` on the boxes of the initial points.

State-dict keys equal mmdet's. Checkpoint units: ``level{i}``, one per point stride.
"""
import torch
import torch.nn as nn

from ...core.anchor import MlvlPointGenerator, images_to_levels
from ...core.bbox.assigners import PointAssigner
from ...core.utils import unmap
from ...ops.deform_conv import DeformConv2d
from ...registry import MODELS, TASK_UTILS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule
from .anchor_free_head import AnchorFreeHead

__all__ = ['RepPointsHead']

TRANSFORM_METHODS = ('moment', 'minmax', 'partial_minmax')


@MODELS.register_module()
class RepPointsHead(AnchorFreeHead):
    """Args (mmdet 2.x's):
        num_classes (int), in_channels (int).
        point_feat_channels (int): channels of the points' convs.
        num_points (int): points per set, an odd square (the deformable kernel's size).
        gradient_mul (float): the share of the gradient the initial points receive through
            the deformable convs' offsets.
        point_strides (list[int]): one per input level.
        point_base_scale (int): the box of a location is ``point_base_scale`` strides wide;
            losses are divided by ``point_base_scale * stride``.
        loss_cls, loss_bbox_init, loss_bbox_refine (dict): loss configs.
        use_grid_points (bool): predict a box (4 numbers) and use the grid of points on it.
        center_init (bool): initial points at the location (else a grid on a box of
            ``point_base_scale``).
        transform_method (str): ``'moment'``, ``'minmax'`` or ``'partial_minmax'``.
        moment_mul (float): the share of the gradient ``moment_transfer`` receives.
        init_cfg (dict): applied at construction.
        **kwargs: :class:`AnchorFreeHead` arguments (feat_channels, stacked_convs, conv_cfg,
            norm_cfg, train_cfg, test_cfg, with_cp, ...). Its ``strides`` are unused (the
            points' strides are ``point_strides``), as in mmdet.

    ``train_cfg``: ``init`` and ``refine``, each with ``assigner``, ``pos_weight`` (and the
    unused ``allowed_border``, ``debug``), plus ``sampler`` for a loss other than FocalLoss.
    mmdet ignored a sampler given with FocalLoss; it fails here, as :class:`AnchorHead`.
    Bad ``num_points`` / ``transform_method`` fail at construction (mmdet: assertions, or the
    first forward).
    """

    TRAIN_CFG_KEYS = ('init', 'refine', 'sampler')
    STAGE_CFG_KEYS = ('assigner', 'allowed_border', 'pos_weight', 'debug')
    TEST_CFG_KEYS = ('nms_pre', 'min_bbox_size', 'score_thr', 'nms', 'max_per_img')

    def __init__(self, num_classes, in_channels, point_feat_channels=256, num_points=9,
                 gradient_mul=0.1, point_strides=[8, 16, 32, 64, 128], point_base_scale=4,
                 loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                               loss_weight=1.0),
                 loss_bbox_init=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=0.5),
                 loss_bbox_refine=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=1.0),
                 use_grid_points=False, center_init=True, transform_method='moment',
                 moment_mul=0.01,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='reppoints_cls_out',
                                             std=0.01, bias_prob=0.01)),
                 **kwargs):
        kernel = int(round(num_points ** 0.5)) if isinstance(num_points, int) else 0
        if isinstance(num_points, bool) or kernel * kernel != num_points or kernel % 2 != 1:
            raise ValueError(f'RepPointsHead num_points must be an odd square (9, 25, ...): '
                             f'the points are a deformable kernel, got {num_points!r}')
        if transform_method not in TRANSFORM_METHODS:
            allowed = ', '.join(map(repr, TRANSFORM_METHODS))
            raise ValueError(f'RepPointsHead transform_method must be one of {allowed}, got '
                             f'{transform_method!r}')
        self.num_points = num_points
        self.point_feat_channels = point_feat_channels
        self.use_grid_points = use_grid_points
        self.center_init = center_init
        self.dcn_kernel = kernel
        self.dcn_pad = (kernel - 1) // 2
        # the kernel's regular grid as (y, x) pairs, row-major: the offsets are relative to it
        base = torch.arange(-self.dcn_pad, self.dcn_pad + 1, dtype=torch.float64,
                            device='cpu')
        self.dcn_base_offset = torch.stack(
            [base.repeat_interleave(kernel), base.repeat(kernel)], dim=1).reshape(1, -1, 1, 1)
        super().__init__(num_classes, in_channels, loss_cls=loss_cls, init_cfg=init_cfg,
                         **kwargs)
        train_cfg, test_cfg = self.train_cfg, self.test_cfg
        if isinstance(test_cfg, dict):
            check_keys(test_cfg, self.TEST_CFG_KEYS, 'test_cfg', owner='RepPointsHead')
        self.gradient_mul = gradient_mul
        self.point_base_scale = point_base_scale
        self.point_strides = point_strides
        self.prior_generator = MlvlPointGenerator(point_strides, offset=0.)
        self.sampling = loss_cls['type'] not in ['FocalLoss']
        if train_cfg:
            self._build_train_parts(train_cfg)
        self.transform_method = transform_method
        if transform_method == 'moment':
            self.moment_transfer = nn.Parameter(torch.zeros(2), requires_grad=True)
            self.moment_mul = moment_mul
        self.loss_bbox_init = MODELS.build(loss_bbox_init)
        self.loss_bbox_refine = MODELS.build(loss_bbox_refine)
        # the levels follow point_strides (AnchorFreeHead made them for its strides)
        self._init_level_units(kwargs.get('with_cp', False),
                               kwargs.get('cp_use_reentrant', False))

    def _build_train_parts(self, train_cfg):
        if isinstance(train_cfg, dict):
            check_keys(train_cfg, self.TRAIN_CFG_KEYS, 'train_cfg', owner='RepPointsHead')
        for stage in ('init', 'refine'):
            stage_cfg = cfg_get(train_cfg, stage)
            if stage_cfg is None or cfg_get(stage_cfg, 'assigner') is None:
                raise ValueError(f'RepPointsHead train_cfg.{stage} needs an assigner, got '
                                 f'{stage_cfg!r}')
            check_keys(stage_cfg, self.STAGE_CFG_KEYS, f'train_cfg.{stage}',
                       owner='RepPointsHead')
        self.init_assigner = TASK_UTILS.build(cfg_get(cfg_get(train_cfg, 'init'), 'assigner'))
        self.refine_assigner = TASK_UTILS.build(
            cfg_get(cfg_get(train_cfg, 'refine'), 'assigner'))
        sampler = cfg_get(train_cfg, 'sampler')
        if sampler is not None and not self.sampling and sampler.get('type') != 'PseudoSampler':
            raise NotImplementedError(
                f"RepPointsHead with loss_cls FocalLoss samples no points: leave "
                f"train_cfg.sampler out (mmdet 2.x ignored it), got {sampler!r}")
        self.sampler = TASK_UTILS.build(sampler if self.sampling and sampler is not None
                                        else dict(type='PseudoSampler'))

    def _init_layers(self):
        self.relu = nn.ReLU(inplace=True)
        self.cls_convs = nn.ModuleList()
        self.reg_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            chn = self.in_channels if i == 0 else self.feat_channels
            for convs in (self.cls_convs, self.reg_convs):
                convs.append(ConvModule(chn, self.feat_channels, 3, stride=1, padding=1,
                                        conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg))
        pts_out_dim = 4 if self.use_grid_points else 2 * self.num_points
        self.reppoints_cls_conv = DeformConv2d(self.feat_channels, self.point_feat_channels,
                                               self.dcn_kernel, 1, self.dcn_pad)
        self.reppoints_cls_out = nn.Conv2d(self.point_feat_channels, self.cls_out_channels,
                                           1, 1, 0)
        self.reppoints_pts_init_conv = nn.Conv2d(self.feat_channels, self.point_feat_channels,
                                                 3, 1, 1)
        self.reppoints_pts_init_out = nn.Conv2d(self.point_feat_channels, pts_out_dim, 1, 1, 0)
        self.reppoints_pts_refine_conv = DeformConv2d(self.feat_channels,
                                                      self.point_feat_channels,
                                                      self.dcn_kernel, 1, self.dcn_pad)
        self.reppoints_pts_refine_out = nn.Conv2d(self.point_feat_channels, pts_out_dim,
                                                  1, 1, 0)

    # ------------------------------------------------------------ point sets
    def points2bbox(self, pts, y_first=True):
        """Point sets ``[N, 2 * num_points, ...]`` (``y, x`` pairs when ``y_first``) to boxes
        ``[N, 4, ...]`` (x1, y1, x2, y2) by ``transform_method``."""
        pts = pts.view(pts.shape[0], -1, 2, *pts.shape[2:])
        pts_y = pts[:, :, 0, ...] if y_first else pts[:, :, 1, ...]
        pts_x = pts[:, :, 1, ...] if y_first else pts[:, :, 0, ...]
        if self.transform_method == 'moment':
            mean_y = pts_y.mean(dim=1, keepdim=True)
            mean_x = pts_x.mean(dim=1, keepdim=True)
            std_y = torch.std(pts_y - mean_y, dim=1, keepdim=True)
            std_x = torch.std(pts_x - mean_x, dim=1, keepdim=True)
            # moment_transfer learns at moment_mul of the rate of the other parameters
            transfer = self.moment_transfer * self.moment_mul + \
                self.moment_transfer.detach() * (1 - self.moment_mul)
            half_w = std_x * torch.exp(transfer[0])
            half_h = std_y * torch.exp(transfer[1])
            return torch.cat([mean_x - half_w, mean_y - half_h, mean_x + half_w,
                              mean_y + half_h], dim=1)
        if self.transform_method == 'partial_minmax':
            pts_y, pts_x = pts_y[:, :4, ...], pts_x[:, :4, ...]
        return torch.cat([pts_x.min(dim=1, keepdim=True)[0], pts_y.min(dim=1, keepdim=True)[0],
                          pts_x.max(dim=1, keepdim=True)[0], pts_y.max(dim=1, keepdim=True)[0]],
                         dim=1)

    def gen_grid_from_reg(self, reg, previous_boxes):
        """The box ``reg`` regresses from ``previous_boxes`` (centre shift in box sizes, log
        size ratio) and the ``dcn_kernel x dcn_kernel`` grid of points on it (``y, x``
        pairs, row-major): ``(grid_yx [B, 2 * num_points, H, W], box [B, 4, H, W])``."""
        b, _, h, w = reg.shape
        centre = (previous_boxes[:, :2, ...] + previous_boxes[:, 2:, ...]) / 2.
        size = (previous_boxes[:, 2:, ...] - previous_boxes[:, :2, ...]).clamp(min=1e-6)
        topleft = centre + size * reg[:, :2, ...] - 0.5 * size * torch.exp(reg[:, 2:, ...])
        wh = size * torch.exp(reg[:, 2:, ...])
        left, top = topleft[:, [0], ...], topleft[:, [1], ...]
        width, height = wh[:, [0], ...], wh[:, [1], ...]
        k = self.dcn_kernel
        steps = torch.linspace(0., 1., k).view(1, k, 1, 1).type_as(reg)
        grid_x = (left + width * steps).unsqueeze(1).repeat(1, k, 1, 1, 1).view(b, -1, h, w)
        grid_y = (top + height * steps).unsqueeze(2).repeat(1, 1, k, 1, 1).view(b, -1, h, w)
        grid_yx = torch.stack([grid_y, grid_x], dim=2).view(b, -1, h, w)
        return grid_yx, torch.cat([left, top, left + width, top + height], 1)

    def forward(self, feats):
        """Training: ``(cls_outs, pts_outs_init, pts_outs_refine)``; eval: ``(cls_outs,
        bbox_outs)`` (the refined sets as boxes, in strides from the location); each a list
        over levels."""
        return super(AnchorFreeHead, self).forward(feats)

    def forward_single(self, x):
        dcn_base_offset = self.dcn_base_offset.type_as(x)
        points_init = 0
        if self.use_grid_points or not self.center_init:
            scale = self.point_base_scale / 2
            points_init = dcn_base_offset / dcn_base_offset.max() * scale
            bbox_init = x.new_tensor([-scale, -scale, scale, scale]).view(1, 4, 1, 1)
        cls_feat = pts_feat = x
        for conv in self.cls_convs:
            cls_feat = conv(cls_feat)
        for conv in self.reg_convs:
            pts_feat = conv(pts_feat)
        pts_out_init = self.reppoints_pts_init_out(
            self.relu(self.reppoints_pts_init_conv(pts_feat)))
        if self.use_grid_points:
            pts_out_init, bbox_out_init = self.gen_grid_from_reg(pts_out_init,
                                                                 bbox_init.detach())
        else:
            pts_out_init = pts_out_init + points_init
        # the deformable convs pass only gradient_mul of their gradient to the initial points
        pts_grad_mul = (1 - self.gradient_mul) * pts_out_init.detach() + \
            self.gradient_mul * pts_out_init
        dcn_offset = pts_grad_mul - dcn_base_offset
        cls_out = self.reppoints_cls_out(self.relu(self.reppoints_cls_conv(cls_feat,
                                                                           dcn_offset)))
        pts_out_refine = self.reppoints_pts_refine_out(
            self.relu(self.reppoints_pts_refine_conv(pts_feat, dcn_offset)))
        if self.use_grid_points:
            pts_out_refine, _ = self.gen_grid_from_reg(pts_out_refine, bbox_out_init.detach())
        else:
            pts_out_refine = pts_out_refine + pts_out_init.detach()
        if self.training:
            return cls_out, pts_out_init, pts_out_refine
        return cls_out, self.points2bbox(pts_out_refine)

    def get_points(self, featmap_sizes, img_metas, device):
        """Per image, per level, the points ``(x, y, stride_w, stride_h)`` (cells' top-left
        corners) and their valid flags (on the padded image)."""
        points = self.prior_generator.grid_priors(featmap_sizes, device=device,
                                                  with_stride=True)
        points_list = [[p.clone() for p in points] for _ in img_metas]
        valid_flag_list = [self.prior_generator.valid_flags(featmap_sizes, meta['pad_shape'],
                                                            device) for meta in img_metas]
        return points_list, valid_flag_list

    def centers_to_bboxes(self, point_list):
        """Per image, per level, the boxes ``point_base_scale`` strides wide centred on the
        points (the initial stage's candidates for a ``MaxIoUAssigner``)."""
        bbox_list = []
        for points in point_list:
            boxes = []
            for i_lvl, stride in enumerate(self.point_strides):
                scale = self.point_base_scale * stride * 0.5
                shift = torch.tensor([-scale, -scale, scale, scale]).view(1, 4).type_as(
                    points[0])
                boxes.append(torch.cat([points[i_lvl][:, :2]] * 2, dim=1) + shift)
            bbox_list.append(boxes)
        return bbox_list

    def offset_to_pts(self, center_list, pred_list):
        """Per level ``[B, HW, 2 * num_points]`` image coordinates (``x, y`` pairs) of the
        predicted sets (``y, x`` offsets in strides)."""
        pts_list = []
        for i_lvl, stride in enumerate(self.point_strides):
            pts_lvl = []
            for i_img, centers in enumerate(center_list):
                pts_center = centers[i_lvl][:, :2].repeat(1, self.num_points)
                yx = pred_list[i_lvl][i_img].permute(1, 2, 0).view(-1, 2 * self.num_points)
                xy = torch.stack([yx[..., 1::2], yx[..., 0::2]], -1).view(yx.shape[0], -1)
                pts_lvl.append(xy * stride + pts_center)
            pts_list.append(torch.stack(pts_lvl, 0))
        return pts_list

    # --------------------------------------------------------------- targets
    def _point_target_single(self, flat_proposals, valid_flags, gt_bboxes, gt_bboxes_ignore,
                             gt_labels, stage='init', unmap_outputs=True):
        if not valid_flags.any():
            raise ValueError('RepPointsHead: no point lies on the padded image (pad_shape '
                             'smaller than one stride?)')
        proposals = flat_proposals[valid_flags, :]
        stage_cfg = cfg_get(self.train_cfg, stage)
        assigner = self.init_assigner if stage == 'init' else self.refine_assigner
        pos_weight = cfg_get(stage_cfg, 'pos_weight', -1)
        assign_result = assigner.assign(proposals, gt_bboxes, gt_bboxes_ignore,
                                        None if self.sampling else gt_labels)
        sampling_result = self.sampler.sample(assign_result, proposals, gt_bboxes)
        num_valid = proposals.shape[0]
        bbox_gt = proposals.new_zeros([num_valid, 4])
        pos_proposals = torch.zeros_like(proposals)
        proposals_weights = proposals.new_zeros([num_valid, 4])
        labels = proposals.new_full((num_valid, ), self.num_classes, dtype=torch.long)
        label_weights = proposals.new_zeros(num_valid, dtype=torch.float)
        pos_inds, neg_inds = sampling_result.pos_inds, sampling_result.neg_inds
        if len(pos_inds) > 0:
            bbox_gt[pos_inds, :] = sampling_result.pos_gt_bboxes.to(bbox_gt.dtype)
            pos_proposals[pos_inds, :] = proposals[pos_inds, :]
            proposals_weights[pos_inds, :] = 1.0
            if gt_labels is None:
                labels[pos_inds] = 0  # one foreground class
            else:
                labels[pos_inds] = gt_labels[sampling_result.pos_assigned_gt_inds].long()
            label_weights[pos_inds] = 1.0 if pos_weight <= 0 else pos_weight
        if len(neg_inds) > 0:
            label_weights[neg_inds] = 1.0
        if unmap_outputs:
            total = flat_proposals.size(0)
            labels = unmap(labels, total, valid_flags)
            label_weights = unmap(label_weights, total, valid_flags)
            bbox_gt = unmap(bbox_gt, total, valid_flags)
            pos_proposals = unmap(pos_proposals, total, valid_flags)
            proposals_weights = unmap(proposals_weights, total, valid_flags)
        return (labels, label_weights, bbox_gt, pos_proposals, proposals_weights, pos_inds,
                neg_inds)

    def get_targets(self, proposals_list, valid_flag_list, gt_bboxes_list, img_metas,
                    gt_bboxes_ignore_list=None, gt_labels_list=None, stage='init',
                    label_channels=1, unmap_outputs=True):
        """Targets of one stage (``'init'`` or ``'refine'``) for the per-image, per-level
        candidates ``proposals_list`` (points or boxes): per level ``labels, label_weights,
        bbox_gt, proposals, proposal_weights`` over the batch, then the positive and negative
        counts (each image counts at least 1). ``proposals_list`` is not changed (mmdet
        concatenated its levels in place)."""
        if stage not in ('init', 'refine'):
            raise ValueError(f"stage must be 'init' or 'refine', got {stage!r}")
        num_imgs = len(img_metas)
        if not (len(proposals_list) == len(valid_flag_list) == len(gt_bboxes_list)
                == num_imgs):
            raise ValueError(f'proposals, valid flags and gt_bboxes need one entry per image '
                             f'({num_imgs}), got {len(proposals_list)}, '
                             f'{len(valid_flag_list)}, {len(gt_bboxes_list)}')
        num_level_proposals = [p.size(0) for p in proposals_list[0]]
        gt_bboxes_ignore_list = gt_bboxes_ignore_list or [None] * num_imgs
        gt_labels_list = gt_labels_list if gt_labels_list is not None else [None] * num_imgs
        results = [self._point_target_single(
            torch.cat(proposals_list[i]), torch.cat(valid_flag_list[i]), gt_bboxes_list[i],
            gt_bboxes_ignore_list[i], gt_labels_list[i], stage=stage,
            unmap_outputs=unmap_outputs) for i in range(num_imgs)]
        *per_image, pos_inds, neg_inds = zip(*results)
        num_total_pos = sum(max(inds.numel(), 1) for inds in pos_inds)
        num_total_neg = sum(max(inds.numel(), 1) for inds in neg_inds)
        return tuple(images_to_levels(list(t), num_level_proposals) for t in per_image) + \
            (num_total_pos, num_total_neg)

    # ------------------------------------------------------------------ loss
    def loss_single(self, cls_score, pts_pred_init, pts_pred_refine, labels, label_weights,
                    bbox_gt_init, bbox_weights_init, bbox_gt_refine, bbox_weights_refine,
                    stride, num_total_samples_init, num_total_samples_refine):
        cls_score = cls_score.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
        loss_cls = self.loss_cls(cls_score.contiguous(), labels.reshape(-1),
                                 label_weights.reshape(-1), avg_factor=num_total_samples_refine)
        bbox_pred_init = self.points2bbox(pts_pred_init.reshape(-1, 2 * self.num_points),
                                          y_first=False)
        bbox_pred_refine = self.points2bbox(pts_pred_refine.reshape(-1, 2 * self.num_points),
                                            y_first=False)
        normalize_term = self.point_base_scale * stride
        loss_pts_init = self.loss_bbox_init(
            bbox_pred_init / normalize_term, bbox_gt_init.reshape(-1, 4) / normalize_term,
            bbox_weights_init.reshape(-1, 4), avg_factor=num_total_samples_init)
        loss_pts_refine = self.loss_bbox_refine(
            bbox_pred_refine / normalize_term, bbox_gt_refine.reshape(-1, 4) / normalize_term,
            bbox_weights_refine.reshape(-1, 4), avg_factor=num_total_samples_refine)
        return loss_cls, loss_pts_init, loss_pts_refine

    @force_fp32(apply_to=('cls_scores', 'pts_preds_init', 'pts_preds_refine'))
    def loss(self, cls_scores, pts_preds_init, pts_preds_refine, gt_bboxes, gt_labels,
             img_metas, gt_bboxes_ignore=None):
        """``dict(loss_cls, loss_pts_init, loss_pts_refine)``, each a list over levels. Under
        fp16 the losses are computed in fp32 (mmdet computed them in fp16)."""
        if not self.train_cfg:
            raise ValueError(f'RepPointsHead.loss needs train_cfg (init, refine), got '
                             f'{self.train_cfg!r}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        device = cls_scores[0].device
        label_channels = self.cls_out_channels if self.use_sigmoid_cls else 1
        center_list, valid_flag_list = self.get_points(featmap_sizes, img_metas, device)
        pts_coordinate_preds_init = self.offset_to_pts(center_list, pts_preds_init)
        candidate_list = center_list if isinstance(self.init_assigner, PointAssigner) \
            else self.centers_to_bboxes(center_list)
        (*_, bbox_gt_list_init, _, bbox_weights_list_init, num_total_pos_init,
         num_total_neg_init) = self.get_targets(
            candidate_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels, stage='init',
            label_channels=label_channels)
        num_total_samples_init = num_total_pos_init + num_total_neg_init if self.sampling \
            else num_total_pos_init
        # the refinement's candidates: the boxes of the initial sets
        pts_coordinate_preds_refine = self.offset_to_pts(center_list, pts_preds_refine)
        with torch.no_grad():
            shifts = [self.points2bbox(p.detach()) * stride
                      for p, stride in zip(pts_preds_init, self.point_strides)]
        bbox_list = [[torch.cat([center[i_lvl][:, :2]] * 2, dim=1) +
                      shifts[i_lvl][i_img].permute(1, 2, 0).reshape(-1, 4)
                      for i_lvl in range(len(shifts))]
                     for i_img, center in enumerate(center_list)]
        (labels_list, label_weights_list, bbox_gt_list_refine, _, bbox_weights_list_refine,
         num_total_pos_refine, num_total_neg_refine) = self.get_targets(
            bbox_list, valid_flag_list, gt_bboxes, img_metas,
            gt_bboxes_ignore_list=gt_bboxes_ignore, gt_labels_list=gt_labels, stage='refine',
            label_channels=label_channels)
        num_total_samples_refine = num_total_pos_refine + num_total_neg_refine \
            if self.sampling else num_total_pos_refine
        losses = [self.loss_single(*args, num_total_samples_init=num_total_samples_init,
                                   num_total_samples_refine=num_total_samples_refine)
                  for args in zip(cls_scores, pts_coordinate_preds_init,
                                  pts_coordinate_preds_refine, labels_list, label_weights_list,
                                  bbox_gt_list_init, bbox_weights_list_init,
                                  bbox_gt_list_refine, bbox_weights_list_refine,
                                  self.point_strides)]
        losses_cls, losses_pts_init, losses_pts_refine = map(list, zip(*losses))
        return dict(loss_cls=losses_cls, loss_pts_init=losses_pts_init,
                    loss_pts_refine=losses_pts_refine)

    # ------------------------------------------------------------- inference
    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """As :class:`BaseDenseHead`'s, the boxes decoded from each level's points and
        stride (:meth:`_bbox_decode`)."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('RepPointsHead needs test_cfg (nms_pre, score_thr, nms, '
                             'max_per_img) to predict boxes')
        img_shape = img_meta['img_shape']
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels = [], [], []
        for cls_score, bbox_pred, priors, stride in zip(cls_score_list, bbox_pred_list,
                                                        mlvl_priors, self.point_strides):
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
            mlvl_bboxes.append(self._bbox_decode(priors[keep], bbox_pred[keep], stride,
                                                 img_shape))
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes,
                                       img_meta['scale_factor'], cfg, rescale, with_nms)

    def _bbox_decode(self, points, bbox_pred, stride, max_shape):
        """Boxes ``bbox_pred`` (in strides from the points) in pixels, clipped to
        ``max_shape``."""
        boxes = bbox_pred * stride + torch.cat([points[:, :2], points[:, :2]], dim=1)
        x1 = boxes[:, 0].clamp(min=0, max=max_shape[1])
        y1 = boxes[:, 1].clamp(min=0, max=max_shape[0])
        x2 = boxes[:, 2].clamp(min=0, max=max_shape[1])
        y2 = boxes[:, 3].clamp(min=0, max=max_shape[0])
        return torch.stack([x1, y1, x2, y2], dim=-1)
