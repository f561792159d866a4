"""mmdet 2.x ``FCOSHead`` (Tian et al. 2019): per point, class scores, the distances to the
box's four sides and a centerness that down-weights points far from a box's centre. Targets:
a point is positive for the smallest box it lies in (with ``center_sampling``: in the box's
central region of ``center_sample_radius`` strides) whose largest distance falls in the
level's ``regress_ranges``.

State-dict keys equal mmdet's (``conv_centerness.weight``, ``scales.0.scale``, ...).
Checkpoint units: ``level{i}``, one per stride, each running that level's towers, predictions
and its own ``Scale`` (passed to ``forward_single`` through ``_level_function``)."""
from functools import partial

import torch
import torch.nn as nn

from ...core.utils import reduce_mean
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..utils import Scale
from .anchor_free_head import AnchorFreeHead
from .level_units import LevelUnitsMixin

__all__ = ['FCOSHead', 'INF']

INF = 1e8


@MODELS.register_module()
class FCOSHead(AnchorFreeHead):
    """Args (mmdet's; the rest are :class:`AnchorFreeHead`'s):
        regress_ranges (tuple[tuple[float, float]]): per level, the range of a positive
            point's largest distance to its box's sides.
        center_sampling (bool), center_sample_radius (float): positives only within
            ``radius * stride`` of the box's centre (and inside the box).
        norm_on_bbox (bool): distances in units of the level's stride, ``relu`` instead of
            ``exp`` on the predictions.
        centerness_on_reg (bool): centerness from the regression tower (else the
            classification one).
        loss_centerness (dict): a binary cross entropy on the centerness logits.
        norm_cfg (dict): the towers' norm, default GN with 32 groups.
    """

    def __init__(self, num_classes, in_channels,
                 regress_ranges=((-1, 64), (64, 128), (128, 256), (256, 512), (512, INF)),
                 center_sampling=False, center_sample_radius=1.5, norm_on_bbox=False,
                 centerness_on_reg=False,
                 loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                               loss_weight=1.0),
                 loss_bbox=dict(type='IoULoss', loss_weight=1.0),
                 loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True,
                                      loss_weight=1.0),
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='conv_cls', std=0.01,
                                             bias_prob=0.01)),
                 **kwargs):
        if not center_sample_radius > 0:
            raise ValueError(f'center_sample_radius must be > 0, got {center_sample_radius!r}')
        self.regress_ranges = regress_ranges
        self.center_sampling = center_sampling
        self.center_sample_radius = center_sample_radius
        self.norm_on_bbox = norm_on_bbox
        self.centerness_on_reg = centerness_on_reg
        super().__init__(num_classes, in_channels, loss_cls=loss_cls, loss_bbox=loss_bbox,
                         norm_cfg=norm_cfg, init_cfg=init_cfg, **kwargs)
        self.loss_centerness = MODELS.build(loss_centerness)

    def _init_layers(self):
        super()._init_layers()
        self.conv_centerness = nn.Conv2d(self.feat_channels, 1, 3, padding=1)
        self.scales = nn.ModuleList([Scale(1.0) for _ in self.strides])

    def _level_function(self, level):
        return partial(self.forward_single, scale=self.scales[level],
                       stride=self.strides[level])

    def forward(self, feats):
        """``(cls_scores, bbox_preds, centernesses)``, each a list over levels."""
        return LevelUnitsMixin.forward(self, feats)

    def forward_single(self, x, scale, stride):
        """``(cls_score, bbox_pred, centerness)`` of one level: distances are
        ``exp(scale * pred)``, or with ``norm_on_bbox`` ``relu(scale * pred)`` in strides (in
        pixels at test time). Distances from half-precision convs are made float32 (``exp``
        overflows in fp16); mmdet's ``.float()`` also turned a float64 model's into float32,
        ours keep float64."""
        cls_score, bbox_pred, cls_feat, reg_feat = super().forward_single(x)
        centerness = self.conv_centerness(reg_feat if self.centerness_on_reg else cls_feat)
        bbox_pred = scale(bbox_pred)
        if bbox_pred.dtype in (torch.float16, torch.bfloat16):
            bbox_pred = bbox_pred.float()
        if self.norm_on_bbox:
            bbox_pred = bbox_pred.clamp(min=0)
            if not self.training:
                bbox_pred = bbox_pred * stride
        else:
            bbox_pred = bbox_pred.exp()
        return cls_score, bbox_pred, centerness

    @force_fp32(apply_to=('cls_scores', 'bbox_preds', 'centernesses'))
    def loss(self, cls_scores, bbox_preds, centernesses, gt_bboxes, gt_labels, img_metas,
             gt_bboxes_ignore=None):
        """mmdet 2.x: focal loss over every point averaged over the positives of the whole
        (distributed) batch; IoU loss of the positives' decoded boxes weighted by their
        centerness targets (averaged over those targets' sum); centerness cross entropy."""
        if not len(cls_scores) == len(bbox_preds) == len(centernesses):
            raise ValueError(f'cls_scores, bbox_preds and centernesses need one entry per '
                             f'level, got {len(cls_scores)}, {len(bbox_preds)} and '
                             f'{len(centernesses)}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        points = self.prior_generator.grid_priors(featmap_sizes, dtype=bbox_preds[0].dtype,
                                                  device=bbox_preds[0].device)
        labels, bbox_targets = self.get_targets(points, gt_bboxes, gt_labels)
        num_imgs = cls_scores[0].size(0)
        flat_cls = torch.cat([c.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
                              for c in cls_scores])
        flat_reg = torch.cat([b.permute(0, 2, 3, 1).reshape(-1, 4) for b in bbox_preds])
        flat_ctr = torch.cat([c.permute(0, 2, 3, 1).reshape(-1) for c in centernesses])
        flat_labels = torch.cat(labels)
        flat_targets = torch.cat(bbox_targets)
        flat_points = torch.cat([p.repeat(num_imgs, 1) for p in points])

        pos_inds = ((flat_labels >= 0) & (flat_labels < self.num_classes)).nonzero().reshape(-1)
        num_pos = torch.tensor(len(pos_inds), dtype=torch.float, device=bbox_preds[0].device)
        num_pos = max(reduce_mean(num_pos), 1.0)
        loss_cls = self.loss_cls(flat_cls, flat_labels, avg_factor=num_pos)

        pos_reg = flat_reg[pos_inds]
        pos_ctr = flat_ctr[pos_inds]
        pos_targets = flat_targets[pos_inds]
        pos_ctr_targets = self.centerness_target(pos_targets)
        ctr_denorm = max(reduce_mean(pos_ctr_targets.sum().detach()), 1e-6)
        if len(pos_inds) > 0:
            pos_points = flat_points[pos_inds]
            loss_bbox = self.loss_bbox(self.bbox_coder.decode(pos_points, pos_reg),
                                       self.bbox_coder.decode(pos_points, pos_targets),
                                       weight=pos_ctr_targets, avg_factor=ctr_denorm)
            loss_centerness = self.loss_centerness(pos_ctr, pos_ctr_targets,
                                                   avg_factor=num_pos)
        else:  # zeros that keep the graph
            loss_bbox = pos_reg.sum()
            loss_centerness = pos_ctr.sum()
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox, loss_centerness=loss_centerness)

    def get_targets(self, points, gt_bboxes_list, gt_labels_list):
        """Per level, the labels (``num_classes`` for background) and distance targets
        (divided by the stride with ``norm_on_bbox``) of every image's points, images
        concatenated: ``(labels [per level], bbox_targets [per level])``."""
        if len(points) != len(self.regress_ranges):
            raise ValueError(f'{type(self).__name__} has {len(self.regress_ranges)} '
                             f'regress_ranges for {len(points)} levels')
        num_points = [p.size(0) for p in points]
        ranges = torch.cat([p.new_tensor(r)[None].expand_as(p)
                            for p, r in zip(points, self.regress_ranges)])
        radii = torch.cat([p.new_full((p.size(0), ), s * self.center_sample_radius)
                           for p, s in zip(points, self.strides)])
        concat_points = torch.cat(points)
        per_image = [self._get_target_single(b, l, concat_points, ranges, radii)
                     for b, l in zip(gt_bboxes_list, gt_labels_list)]
        labels = [lab.split(num_points) for lab, _ in per_image]
        targets = [t.split(num_points) for _, t in per_image]
        lvl_labels, lvl_targets = [], []
        for i in range(len(points)):
            lvl_labels.append(torch.cat([lab[i] for lab in labels]))
            t = torch.cat([t[i] for t in targets])
            lvl_targets.append(t / self.strides[i] if self.norm_on_bbox else t)
        return lvl_labels, lvl_targets

    def _get_target_single(self, gt_bboxes, gt_labels, points, regress_ranges, radii):
        """``(labels [P], bbox_targets [P, 4])`` of one image (``radii``: each point's
        centre-sampling radius in pixels)."""
        num_points, num_gts = points.size(0), gt_labels.size(0)
        if num_gts == 0:
            return (gt_labels.new_full((num_points, ), self.num_classes),
                    gt_bboxes.new_zeros((num_points, 4)))
        areas = ((gt_bboxes[:, 2] - gt_bboxes[:, 0]) *
                 (gt_bboxes[:, 3] - gt_bboxes[:, 1]))[None].repeat(num_points, 1)
        xs, ys = points[:, 0, None], points[:, 1, None]
        x1, y1, x2, y2 = gt_bboxes.unbind(-1)
        bbox_targets = torch.stack((xs - x1, ys - y1, x2 - xs, y2 - ys), -1)
        if self.center_sampling:
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            r = radii[:, None]
            inner = torch.stack((xs - torch.maximum(cx - r, x1), ys - torch.maximum(cy - r, y1),
                                 torch.minimum(cx + r, x2) - xs,
                                 torch.minimum(cy + r, y2) - ys), -1)
            inside = inner.min(-1)[0] > 0
        else:
            inside = bbox_targets.min(-1)[0] > 0
        max_dist = bbox_targets.max(-1)[0]
        in_range = (max_dist >= regress_ranges[:, None, 0]) & \
            (max_dist <= regress_ranges[:, None, 1])
        # the smallest box among those the point may regress
        areas[~(inside & in_range)] = INF
        min_area, min_inds = areas.min(dim=1)
        labels = gt_labels[min_inds]
        labels[min_area == INF] = self.num_classes
        return labels, bbox_targets[torch.arange(num_points, device=points.device), min_inds]

    def centerness_target(self, pos_bbox_targets):
        """``sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b))`` of positive points'
        distance targets."""
        lr = pos_bbox_targets[:, [0, 2]]
        tb = pos_bbox_targets[:, [1, 3]]
        if len(lr) == 0:
            return lr[..., 0]
        return torch.sqrt(lr.min(dim=-1)[0] / lr.max(dim=-1)[0] *
                          (tb.min(dim=-1)[0] / tb.max(dim=-1)[0]))
