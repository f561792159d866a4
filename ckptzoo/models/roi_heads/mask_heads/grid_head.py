"""mmdet 2.x ``GridHead`` (Grid R-CNN, Lu et al. 2019, and Grid R-CNN Plus): locates a box by
``grid_points`` points (a 3x3 grid by default) on heatmaps rather than by regressing deltas.

The RoI features go through ``num_convs`` convs (the first of stride 2), one
``point_feat_channels`` group per point; each point's features are fused with its 4-neighbours'
twice (first- and second-order, 5x5 depth-wise + 1x1 transitions), and two grouped deconvs
upsample them to a heatmap per point, of half the RoI's ``4 * roi_feat_size`` map (each point
sees the sub-region where it can lie). Training supervises the fused and (while training) the
unfused heatmaps with ``loss_grid``; at test the points vote for the box edges
(:meth:`get_bboxes`). Keys ``convs.{i}``, ``deconv1``, ``norm1``, ``deconv2``,
``forder_trans``, ``sorder_trans`` as mmdet.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ....registry import MODELS
from ....utils.cfg_get import cfg_get
from ...utils import ConvModule, apply_init_cfg

__all__ = ['GridHead']

_DEFAULT_INIT = [dict(type='Kaiming', layer=['Conv2d', 'Linear']),
                 dict(type='Normal', layer='ConvTranspose2d', std=0.001,
                      override=dict(type='Normal', name='deconv2', std=0.001,
                                    bias=-np.log(0.99 / 0.01)))]


def _transition(channels):
    """A point-to-point feature transition: 5x5 depth-wise conv, then 1x1 conv."""
    return nn.Sequential(nn.Conv2d(channels, channels, 5, stride=1, padding=2, groups=channels),
                         nn.Conv2d(channels, channels, 1))


@MODELS.register_module()
class GridHead(nn.Module):
    """Args as mmdet 2.x: ``grid_points`` (a square >= 4), ``num_convs``, ``roi_feat_size``
    (an int: square RoIs only), ``in_channels``, ``conv_kernel_size``,
    ``point_feat_channels`` (per point), ``deconv_kernel_size``, ``class_agnostic``
    (accepted, unused as in mmdet), ``loss_grid`` (sigmoid cross-entropy, weight 15),
    ``conv_cfg``, ``norm_cfg`` (GN, 36 groups), ``init_cfg`` (mmdet's default)."""

    def __init__(self, grid_points=9, num_convs=8, roi_feat_size=14, in_channels=256,
                 conv_kernel_size=3, point_feat_channels=64, deconv_kernel_size=4,
                 class_agnostic=False,
                 loss_grid=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=15),
                 conv_cfg=None, norm_cfg=dict(type='GN', num_groups=36),
                 init_cfg=_DEFAULT_INIT):
        super().__init__()
        if not isinstance(grid_points, int) or grid_points < 4:
            raise ValueError(f'GridHead grid_points must be an int >= 4, got {grid_points!r}')
        self.grid_size = int(np.sqrt(grid_points))
        if self.grid_size * self.grid_size != grid_points:
            raise ValueError(f'GridHead grid_points must be a square number, got {grid_points}')
        if not isinstance(roi_feat_size, int):
            raise ValueError(f'GridHead roi_feat_size must be an int (square RoIs only), got '
                             f'{roi_feat_size!r}')
        self.grid_points = grid_points
        self.num_convs = num_convs
        self.roi_feat_size = roi_feat_size
        self.in_channels = in_channels
        self.conv_kernel_size = conv_kernel_size
        self.point_feat_channels = point_feat_channels
        self.conv_out_channels = point_feat_channels * grid_points
        self.class_agnostic = class_agnostic
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        if isinstance(norm_cfg, dict) and norm_cfg['type'] == 'GN' \
                and self.conv_out_channels % norm_cfg['num_groups']:
            raise ValueError(f'GridHead point_feat_channels * grid_points '
                             f'({self.conv_out_channels}) must divide into the GN num_groups '
                             f'({norm_cfg["num_groups"]})')
        self.test_mode = False  # set by GridRoIHead at test, as mmdet (forward reads training)
        self.whole_map_size = roi_feat_size * 4  # the heatmaps are half of it
        self.sub_regions = self.calc_sub_regions()
        self.convs = nn.Sequential(*(
            ConvModule(in_channels if i == 0 else self.conv_out_channels,
                       self.conv_out_channels, conv_kernel_size, stride=2 if i == 0 else 1,
                       padding=(conv_kernel_size - 1) // 2, conv_cfg=conv_cfg,
                       norm_cfg=norm_cfg, bias=True) for i in range(num_convs)))
        deconv = dict(kernel_size=deconv_kernel_size, stride=2,
                      padding=(deconv_kernel_size - 2) // 2, groups=grid_points)
        self.deconv1 = nn.ConvTranspose2d(self.conv_out_channels, self.conv_out_channels,
                                          **deconv)
        self.norm1 = nn.GroupNorm(grid_points, self.conv_out_channels)
        self.deconv2 = nn.ConvTranspose2d(self.conv_out_channels, grid_points, **deconv)
        # each point's 4-neighbours (left, up, down, right), point i at column i // size
        size = self.grid_size
        self.neighbor_points = []
        for i in range(size):
            for j in range(size):
                neighbors = []
                if i > 0:
                    neighbors.append((i - 1) * size + j)
                if j > 0:
                    neighbors.append(i * size + j - 1)
                if j < size - 1:
                    neighbors.append(i * size + j + 1)
                if i < size - 1:
                    neighbors.append((i + 1) * size + j)
                self.neighbor_points.append(tuple(neighbors))
        self.num_edges = sum(len(p) for p in self.neighbor_points)
        self.forder_trans = nn.ModuleList(
            nn.ModuleList(_transition(point_feat_channels) for _ in nbrs)
            for nbrs in self.neighbor_points)
        self.sorder_trans = nn.ModuleList(
            nn.ModuleList(_transition(point_feat_channels) for _ in nbrs)
            for nbrs in self.neighbor_points)
        self.loss_grid = MODELS.build(loss_grid)
        self.init_cfg = init_cfg
        apply_init_cfg(self, init_cfg)

    def init_weights(self):
        """Initialised at construction from ``init_cfg``; nothing to load."""

    def _heatmap(self, x):
        return self.deconv2(F.relu(self.norm1(self.deconv1(x)), inplace=True))

    def forward(self, x):
        """``x [n, C, s, s]`` -> ``dict(fused, unfused)``, each ``[n, grid_points, 2s, 2s]``
        logits; ``unfused`` is ``fused`` outside training."""
        if not (x.shape[-1] == x.shape[-2] == self.roi_feat_size):
            raise ValueError(f'GridHead takes [n, C, {self.roi_feat_size}, '
                             f'{self.roi_feat_size}] RoI features, got {tuple(x.shape)}')
        x = self.convs(x)
        c = self.point_feat_channels
        parts = [x[:, i * c:(i + 1) * c] for i in range(self.grid_points)]
        x_fo = []
        for i, points in enumerate(self.neighbor_points):
            fo = parts[i]
            for j, p in enumerate(points):
                fo = fo + self.forder_trans[i][j](parts[p])
            x_fo.append(fo)
        x_so = []
        for i, points in enumerate(self.neighbor_points):
            so = parts[i]
            for j, p in enumerate(points):
                so = so + self.sorder_trans[i][j](x_fo[p])
            x_so.append(so)
        heatmap = self._heatmap(torch.cat(x_so, dim=1))
        heatmap_unfused = self._heatmap(x) if self.training else heatmap
        return dict(fused=heatmap, unfused=heatmap_unfused)

    def calc_sub_regions(self):
        """Each point's ``(x1, y1, x2, y2)`` window of half the whole map (Grid R-CNN Plus);
        half is ``whole // 4 * 2``, as the original."""
        half = self.whole_map_size // 4 * 2
        regions = []
        for i in range(self.grid_points):
            starts = []
            for idx in (i // self.grid_size, i % self.grid_size):
                if idx == 0:
                    starts.append(0)
                elif idx == self.grid_size - 1:
                    starts.append(half)
                else:
                    ratio = idx / (self.grid_size - 1) - 0.25
                    starts.append(max(int(ratio * self.whole_map_size), 0))
            regions.append((starts[0], starts[1], starts[0] + half, starts[1] + half))
        return regions

    def _factors(self):
        """Per point, the weight of the ground truth's x1 (y1) in its x (y)."""
        return [(1 - (j // self.grid_size) / (self.grid_size - 1),
                 1 - (j % self.grid_size) / (self.grid_size - 1))
                for j in range(self.grid_points)]

    def get_targets(self, sampling_results, rcnn_train_cfg):
        """Heatmap targets ``[n_pos, grid_points, half, half]`` of all images' positives: a
        disc of ``pos_radius`` around each ground-truth point in the proposal's box doubled
        (none for a box at most ``grid_size`` wide or high), cut to the point's sub-region.
        On the CPU as mmdet, for its float arithmetic."""
        pos_bboxes = torch.cat([r.pos_bboxes for r in sampling_results]).cpu()
        pos_gt = torch.cat([r.pos_gt_bboxes for r in sampling_results]).cpu()
        if pos_bboxes.shape != pos_gt.shape:
            raise ValueError(f'positives {tuple(pos_bboxes.shape)} and their ground truths '
                             f'{tuple(pos_gt.shape)} differ')
        w0 = pos_bboxes[:, 2] - pos_bboxes[:, 0]
        h0 = pos_bboxes[:, 3] - pos_bboxes[:, 1]
        x1, y1 = pos_bboxes[:, 0] - w0 / 2, pos_bboxes[:, 1] - h0 / 2
        x2, y2 = pos_bboxes[:, 2] + w0 / 2, pos_bboxes[:, 3] + h0 / 2
        ws, hs = x2 - x1, y2 - y1
        size = self.whole_map_size
        n = pos_bboxes.shape[0]
        radius = cfg_get(rcnn_train_cfg, 'pos_radius')
        keep = (ws > self.grid_size) & (hs > self.grid_size)
        cxs, cys = [], []
        for fx, fy in self._factors():
            gx = fx * pos_gt[:, 0] + (1 - fx) * pos_gt[:, 2]
            gy = fy * pos_gt[:, 1] + (1 - fy) * pos_gt[:, 3]
            cxs.append(((gx - x1) / ws * size).long())  # int(): toward zero
            cys.append(((gy - y1) / hs * size).long())
        cx = torch.stack(cxs, 1)[:, :, None, None]
        cy = torch.stack(cys, 1)[:, :, None, None]
        coords = torch.arange(size)
        dist2 = (coords[None, None, None, :] - cx) ** 2 + (coords[None, None, :, None] - cy) ** 2
        targets = ((dist2 <= radius ** 2) & keep[:, None, None, None]).float()
        targets = targets.reshape(n, self.grid_points, size, size)
        sub = [targets[:, [i], y_1:y_2, x_1:x_2]
               for i, (x_1, y_1, x_2, y_2) in enumerate(self.sub_regions)]
        return torch.cat(sub, dim=1).to(sampling_results[0].pos_bboxes.device)

    def loss(self, grid_pred, grid_targets):
        """``loss_grid``: the fused and the unfused heatmaps' losses, summed."""
        loss_fused = self.loss_grid(grid_pred['fused'], grid_targets)
        loss_unfused = self.loss_grid(grid_pred['unfused'], grid_targets)
        return dict(loss_grid=loss_fused + loss_unfused)

    def get_bboxes(self, det_bboxes, grid_pred, img_metas):
        """The boxes ``det_bboxes [n, 5]`` refined by the grid: each point's heatmap peak,
        mapped into the box doubled, and each edge the score-weighted mean of its points;
        clipped to the image, scores kept. On the CPU, as mmdet. mmdet's clip (``clamp_`` on an
        indexed copy) changes nothing; here the boxes are clipped, as it means to."""
        if det_bboxes.shape[0] != grid_pred.shape[0]:
            raise ValueError(f'{det_bboxes.shape[0]} boxes but {grid_pred.shape[0]} heatmaps')
        det_bboxes = det_bboxes.cpu()
        cls_scores, det_bboxes = det_bboxes[:, [4]], det_bboxes[:, :4]
        grid_pred = grid_pred.sigmoid().cpu()
        R, c, h, w = grid_pred.shape
        half = self.whole_map_size // 4 * 2
        if not (h == w == half and c == self.grid_points):
            raise ValueError(f'heatmaps must be [n, {self.grid_points}, {half}, {half}], got '
                             f'{tuple(grid_pred.shape)}')
        pred_scores, pos = grid_pred.view(R * c, h * w).max(dim=1)
        xs, ys = pos % w, pos // w
        for i in range(self.grid_points):
            xs[i::self.grid_points] += self.sub_regions[i][0]
            ys[i::self.grid_points] += self.sub_regions[i][1]
        pred_scores, xs, ys = (t.view(R, c) for t in (pred_scores, xs, ys))
        widths = (det_bboxes[:, 2] - det_bboxes[:, 0]).unsqueeze(-1)
        heights = (det_bboxes[:, 3] - det_bboxes[:, 1]).unsqueeze(-1)
        abs_xs = (xs.float() + 0.5) / w * widths + (det_bboxes[:, 0, None] - widths / 2)
        abs_ys = (ys.float() + 0.5) / h * heights + (det_bboxes[:, 1, None] - heights / 2)
        size = self.grid_size
        edges = ((abs_xs, list(range(size))),  # x1: the first column
                 (abs_ys, [i * size for i in range(size)]),  # y1: the first row
                 (abs_xs, [self.grid_points - size + i for i in range(size)]),
                 (abs_ys, [(i + 1) * size - 1 for i in range(size)]))
        voted = [(coord[:, inds] * pred_scores[:, inds]).sum(dim=1, keepdim=True)
                 / pred_scores[:, inds].sum(dim=1, keepdim=True) for coord, inds in edges]
        bbox_res = torch.cat(voted + [cls_scores], dim=1)
        img_shape = img_metas[0]['img_shape']
        bbox_res[:, [0, 2]] = bbox_res[:, [0, 2]].clamp(min=0, max=img_shape[1])
        bbox_res[:, [1, 3]] = bbox_res[:, [1, 3]].clamp(min=0, max=img_shape[0])
        return bbox_res
