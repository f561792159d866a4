"""mmdet 2.x ``FoveaHead`` (Kong et al. 2019) and its ``FeatureAlign``: each box belongs to
the levels whose ``scale_ranges`` hold its sqrt-area; on those levels the points of its
central "fovea" (``sigma`` of its half sizes around the centre) are positives, the smaller
box winning where foveae overlap. Boxes are regressed as the log of the distances to the
sides in units of the level's ``base_edge_list`` edge. With ``with_deform`` the
classification branch sees the features through a deformable conv whose offsets come from
the predicted box (``FeatureAlign``).

State-dict keys equal mmdet's (``reg_convs``, ``conv_reg``, ``cls_convs``,
``feature_adaption.conv_offset`` / ``conv_adaption``, ``conv_cls``). Checkpoint units:
``level{i}``, one per stride."""
import torch
import torch.nn as nn

from ...ops import DeformConv2d
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from ..utils import ConvModule, apply_init_cfg
from .anchor_free_head import AnchorFreeHead

__all__ = ['FoveaHead', 'FeatureAlign']


class FeatureAlign(nn.Module):
    """``relu(deform_conv(x, offsets))`` with the offsets a bias-free 1x1 conv of the
    ``[B, 4, H, W]`` box shape; mmdet's (keys ``conv_offset.weight``,
    ``conv_adaption.weight``). ``conv_offset`` starts at zero (mmdet's dense heads zero every
    ``conv_offset`` after their init)."""

    def __init__(self, in_channels, out_channels, kernel_size=3, deform_groups=4,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.1,
                               override=dict(type='Normal', name='conv_adaption', std=0.01))):
        super().__init__()
        self.conv_offset = nn.Conv2d(4, deform_groups * kernel_size * kernel_size * 2, 1,
                                     bias=False)
        self.conv_adaption = DeformConv2d(in_channels, out_channels, kernel_size=kernel_size,
                                          padding=(kernel_size - 1) // 2,
                                          deform_groups=deform_groups)
        self.relu = nn.ReLU(inplace=True)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def forward(self, x, shape):
        return self.relu(self.conv_adaption(x, self.conv_offset(shape)))


@MODELS.register_module()
class FoveaHead(AnchorFreeHead):
    """Args (mmdet's; the rest are :class:`AnchorFreeHead`'s):
        base_edge_list (tuple[int]): per level, the unit of the regressed distances.
        scale_ranges (tuple[tuple[float, float]]): per level, the sqrt-areas it takes.
        sigma (float): the fovea's size, a fraction of the box's half width / height.
        with_deform (bool): align the classification features to the predicted box with a
            deformable conv (then ``in_channels`` must equal ``feat_channels``, as in mmdet).
        deform_groups (int): the FeatureAlign's deformable groups.

    Where a batch has no positive, ``loss_bbox`` is a zero connected to the box branch (mmdet
    returns a constant, so that branch gets no gradient at all and a distributed run without
    ``find_unused_parameters`` fails); its value is the same.
    """

    def __init__(self, num_classes, in_channels, base_edge_list=(16, 32, 64, 128, 256),
                 scale_ranges=((8, 32), (16, 64), (32, 128), (64, 256), (128, 512)),
                 sigma=0.4, with_deform=False, deform_groups=4,
                 init_cfg=dict(type='Normal', layer='Conv2d', std=0.01,
                               override=dict(type='Normal', name='conv_cls', std=0.01,
                                             bias_prob=0.01)),
                 **kwargs):
        self.base_edge_list = base_edge_list
        self.scale_ranges = scale_ranges
        self.sigma = sigma
        self.with_deform = with_deform
        self.deform_groups = deform_groups
        super().__init__(num_classes, in_channels, init_cfg=init_cfg, **kwargs)
        n = self.prior_generator.num_levels
        if not len(base_edge_list) == len(scale_ranges) == n:
            raise ValueError(f'FoveaHead needs one base_edge_list entry and one scale_ranges '
                             f'entry per stride ({n}), got {len(base_edge_list)} and '
                             f'{len(scale_ranges)}')
        if with_deform and in_channels != self.feat_channels:
            raise ValueError(f'FoveaHead with_deform aligns the input features with '
                             f'feat_channels={self.feat_channels} channels, got '
                             f'in_channels={in_channels}')

    def _init_layers(self):
        self._init_reg_convs()
        self.conv_reg = nn.Conv2d(self.feat_channels, 4, 3, padding=1)
        if not self.with_deform:
            self._init_cls_convs()
            self.conv_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)
            return
        wide = self.feat_channels * 4
        self.cls_convs = nn.ModuleList([
            ConvModule(self.feat_channels, wide, 3, stride=1, padding=1,
                       conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg,
                       bias=self.norm_cfg is None),
            ConvModule(wide, wide, 1, stride=1, padding=0, conv_cfg=self.conv_cfg,
                       norm_cfg=self.norm_cfg, bias=self.norm_cfg is None)])
        self.feature_adaption = FeatureAlign(self.feat_channels, self.feat_channels,
                                             kernel_size=3, deform_groups=self.deform_groups)
        self.conv_cls = nn.Conv2d(wide, self.cls_out_channels, 3, padding=1)

    def forward_single(self, x):
        """``(cls_score, bbox_pred)`` of one level, ``bbox_pred`` the log distances."""
        reg_feat = x
        for layer in self.reg_convs:
            reg_feat = layer(reg_feat)
        bbox_pred = self.conv_reg(reg_feat)
        cls_feat = self.feature_adaption(x, bbox_pred.exp()) if self.with_deform else x
        for layer in self.cls_convs:
            cls_feat = layer(cls_feat)
        return self.conv_cls(cls_feat), bbox_pred

    def loss(self, cls_scores, bbox_preds, gt_bbox_list, gt_label_list, img_metas,
             gt_bboxes_ignore=None):
        """mmdet 2.x: focal loss over every point averaged over (positives + images); the box
        loss over the positives' log distances."""
        if len(cls_scores) != len(bbox_preds):
            raise ValueError(f'cls_scores and bbox_preds need one entry per level, got '
                             f'{len(cls_scores)} and {len(bbox_preds)}')
        featmap_sizes = [f.size()[-2:] for f in cls_scores]
        points = self.prior_generator.grid_priors(featmap_sizes, dtype=bbox_preds[0].dtype,
                                                  device=bbox_preds[0].device)
        num_imgs = cls_scores[0].size(0)
        flat_cls = torch.cat([c.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
                              for c in cls_scores])
        flat_reg = torch.cat([b.permute(0, 2, 3, 1).reshape(-1, 4) for b in bbox_preds])
        labels, targets = self.get_targets(gt_bbox_list, gt_label_list, featmap_sizes, points)
        pos_inds = ((labels >= 0) & (labels < self.num_classes)).nonzero().view(-1)
        num_pos = len(pos_inds)
        loss_cls = self.loss_cls(flat_cls, labels, avg_factor=num_pos + num_imgs)
        if num_pos > 0:
            pos_targets = targets[pos_inds]
            loss_bbox = self.loss_bbox(flat_reg[pos_inds], pos_targets,
                                       pos_targets.new_zeros(pos_targets.size()) + 1.0,
                                       avg_factor=num_pos)
        else:
            loss_bbox = flat_reg.sum() * 0
        return dict(loss_cls=loss_cls, loss_bbox=loss_bbox)

    def get_targets(self, gt_bbox_list, gt_label_list, featmap_sizes, points):
        """``(labels [N], log-distance targets [N, 4])`` over every point of the batch, level
        by level and, within a level, image by image (the flattened predictions' order)."""
        per_image = [self._get_target_single(b, l, featmap_sizes, points)
                     for b, l in zip(gt_bbox_list, gt_label_list)]
        labels = torch.cat([torch.cat([img[0][lvl].flatten() for img in per_image])
                            for lvl in range(len(points))])
        targets = torch.cat([torch.cat([img[1][lvl].reshape(-1, 4) for img in per_image])
                             for lvl in range(len(points))])
        return labels, targets

    def _get_target_single(self, gt_bboxes_raw, gt_labels_raw, featmap_size_list, point_list):
        """One image's per-level ``[H, W]`` labels and ``[H, W, 4]`` log-distance targets
        (1 before the log where no box is: those points are negatives)."""
        gt_areas = torch.sqrt((gt_bboxes_raw[:, 2] - gt_bboxes_raw[:, 0]) *
                              (gt_bboxes_raw[:, 3] - gt_bboxes_raw[:, 1]))
        label_list, target_list = [], []
        for base_len, (lower, upper), stride, size, points in zip(
                self.base_edge_list, self.scale_ranges, self.strides, featmap_size_list,
                point_list):
            h, w = size
            points = points.view(h, w, 2)
            x, y = points[..., 0], points[..., 1]
            labels = gt_labels_raw.new_full((h, w), self.num_classes)
            targets = gt_bboxes_raw.new_ones((h, w, 4))
            hit = ((gt_areas >= lower) & (gt_areas <= upper)).nonzero().flatten()
            if len(hit) == 0:
                label_list.append(labels)
                target_list.append(torch.log(targets))
                continue
            hit = hit[torch.sort(-gt_areas[hit])[1]]  # largest first: smaller ones win
            boxes = gt_bboxes_raw[hit, :] / stride
            half_w = 0.5 * (boxes[:, 2] - boxes[:, 0])
            half_h = 0.5 * (boxes[:, 3] - boxes[:, 1])
            left = torch.ceil(boxes[:, 0] + (1 - self.sigma) * half_w - 0.5).long().clamp(
                0, w - 1)
            right = torch.floor(boxes[:, 0] + (1 + self.sigma) * half_w - 0.5).long().clamp(
                0, w - 1)
            top = torch.ceil(boxes[:, 1] + (1 - self.sigma) * half_h - 0.5).long().clamp(
                0, h - 1)
            down = torch.floor(boxes[:, 1] + (1 + self.sigma) * half_h - 0.5).long().clamp(
                0, h - 1)
            for x1, y1, x2, y2, label, (gx1, gy1, gx2, gy2) in zip(
                    left.tolist(), top.tolist(), right.tolist(), down.tolist(),
                    gt_labels_raw[hit], gt_bboxes_raw[hit, :]):
                rows, cols = slice(y1, y2 + 1), slice(x1, x2 + 1)
                labels[rows, cols] = label
                targets[rows, cols, 0] = (x[rows, cols] - gx1) / base_len
                targets[rows, cols, 1] = (y[rows, cols] - gy1) / base_len
                targets[rows, cols, 2] = (gx2 - x[rows, cols]) / base_len
                targets[rows, cols, 3] = (gy2 - y[rows, cols]) / base_len
            label_list.append(labels)
            target_list.append(torch.log(targets.clamp(min=1. / 16, max=16.)))
        return label_list, target_list

    def _get_bboxes_single(self, cls_score_list, bbox_pred_list, score_factor_list, mlvl_priors,
                           img_meta, cfg, rescale=False, with_nms=True, **kwargs):
        """As :class:`BaseDenseHead`'s, each level's boxes decoded with its base edge:
        ``point -+ base_len * exp(pred)``, clipped to ``[0, W - 1] x [0, H - 1]`` (mmdet's)."""
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError('FoveaHead needs test_cfg (nms_pre, score_thr, nms, max_per_img) '
                             'to predict boxes')
        img_shape = img_meta['img_shape']
        nms_pre = cfg_get(cfg, 'nms_pre', -1)
        score_thr = cfg_get(cfg, 'score_thr', 0)
        mlvl_bboxes, mlvl_scores, mlvl_labels = [], [], []
        for cls_score, bbox_pred, base_len, priors in zip(cls_score_list, bbox_pred_list,
                                                          self.base_edge_list, mlvl_priors):
            bbox_pred = bbox_pred.permute(1, 2, 0).reshape(-1, 4)
            scores = cls_score.permute(1, 2, 0).reshape(-1, self.cls_out_channels).sigmoid()
            valid = scores > score_thr
            idxs = torch.nonzero(valid, as_tuple=False)
            scores, order = scores[valid].sort(descending=True)
            if nms_pre is not None and nms_pre > 0:
                scores, order = scores[:nms_pre], order[:nms_pre]
            keep, labels = idxs[order].unbind(dim=1)
            mlvl_bboxes.append(self._bbox_decode(priors[keep], bbox_pred[keep], base_len,
                                                 img_shape))
            mlvl_scores.append(scores)
            mlvl_labels.append(labels)
        return self._bbox_post_process(mlvl_scores, mlvl_labels, mlvl_bboxes,
                                       img_meta['scale_factor'], cfg, rescale, with_nms)

    def _bbox_decode(self, priors, bbox_pred, base_len, max_shape):
        dist = bbox_pred.exp()
        x, y = priors[:, 0], priors[:, 1]
        w_max, h_max = max_shape[1] - 1, max_shape[0] - 1
        return torch.stack([(x - base_len * dist[:, 0]).clamp(min=0, max=w_max),
                            (y - base_len * dist[:, 1]).clamp(min=0, max=h_max),
                            (x + base_len * dist[:, 2]).clamp(min=0, max=w_max),
                            (y + base_len * dist[:, 3]).clamp(min=0, max=h_max)], -1)
