"""mmdet 2.x ``SOLOHead`` (SOLO: Segmenting Objects by Locations, Wang et al. 2020).

Each pyramid level splits the image into ``num_grid x num_grid`` cells; a cell predicts the
class of the instance whose centre falls in it (``conv_cls``) and that instance's mask (one
channel of ``conv_mask_list[level]``). State-dict keys equal mmdet's (``mask_convs.0.conv``,
``cls_convs.0.gn``, ``conv_mask_list.2``, ``conv_cls``), so mmdet 2.x SOLO checkpoints load.

Checkpoint units: ``level{i}``, one per pyramid level (both towers and the level's
predictors); the level's index reaches ``forward_single`` through ``_level_function``.

Test time, memory: mmdet upsampled every cell's mask of every level to stride 4 in
``forward`` (3872 maps at a quarter of the padded image, ~1 GiB for 800x1344) and then
gathered the candidates again. Here ``forward`` keeps each level's maps at their own size
and ``get_results`` upsamples only the masks of the cells above ``score_thr``, in chunks of
at most ``MASK_MEM_LIMIT`` bytes of float maps (1 GiB, as ``paste_masks``' GPU limit): at
most ``nms_pre`` binary masks at stride 4 are held for the matrix NMS, then the kept
``max_per_img`` masks are resized to the image chunk by chunk. The values are mmdet's
(bilinear resizing is per map; with more than one chunk a maskness sum may round differently
in its last bit, a reduction's order following the batch's shape).
"""
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.post_processing import mask_matrix_nms
from ...core.utils import center_of_mass, generate_coordinate
from ...registry import MODELS
from ...utils.geometric import imrescale
from ..utils import ConvModule, apply_init_cfg
from .base_mask_head import BaseMaskHead
from .level_units import LevelUnitsMixin

__all__ = ['SOLOHead', 'MASK_MEM_LIMIT']

BYTES_PER_FLOAT = 4
MASK_MEM_LIMIT = 1024**3  # float mask maps of one chunk at test time (paste_masks' limit)
TEST_CFG_KEYS = ('nms_pre', 'score_thr', 'mask_thr', 'filter_thr', 'kernel', 'sigma',
                 'max_per_img')


def _trunc_cell(value, num_grid):
    """mmdet's ``floordiv(value, 1 / num_grid, rounding_mode='trunc')`` as an int."""
    return int(torch.div(value, 1. / num_grid, rounding_mode='trunc'))


def _chunks(num, bytes_per_item):
    """Index chunks of ``range(num)`` of at most ``MASK_MEM_LIMIT`` bytes each (>= 1 item)."""
    size = max(1, int(MASK_MEM_LIMIT // max(bytes_per_item, 1)))
    return [slice(i, min(i + size, num)) for i in range(0, num, size)]


@MODELS.register_module()
class SOLOHead(LevelUnitsMixin, BaseMaskHead):
    """Args (mmdet's): ``num_classes``, ``in_channels``, ``feat_channels``, ``stacked_convs``,
    ``strides`` (per level: a mask must cover more pixels than this at stride 4 to be kept),
    ``scale_ranges`` (per level, the ``sqrt(box area)`` range of its instances),
    ``pos_scale`` (the centre region, a fraction of the half box), ``num_grids``,
    ``cls_down_index`` (the class tower's conv before which features go to the grid size),
    ``loss_mask``, ``loss_cls``, ``norm_cfg``, ``train_cfg``, ``test_cfg``, ``init_cfg``.
    Ours: ``with_cp`` ('full' checkpointing of every level; default False),
    ``cp_use_reentrant``.

    ``get_results(rescale=False)`` returns masks at the input image's size (``img_shape``);
    mmdet ignored ``rescale`` and always resized to ``ori_shape``."""

    def __init__(self, num_classes, in_channels, feat_channels=256, stacked_convs=4,
                 strides=(4, 8, 16, 32, 64),
                 scale_ranges=((8, 32), (16, 64), (32, 128), (64, 256), (128, 512)),
                 pos_scale=0.2, num_grids=[40, 36, 24, 16, 12], cls_down_index=0,
                 loss_mask=None, loss_cls=None,
                 norm_cfg=dict(type='GN', num_groups=32, requires_grad=True),
                 train_cfg=None, test_cfg=None,
                 init_cfg=[dict(type='Normal', layer='Conv2d', std=0.01),
                           dict(type='Normal', std=0.01, bias_prob=0.01,
                                override=dict(name='conv_mask_list')),
                           dict(type='Normal', std=0.01, bias_prob=0.01,
                                override=dict(name='conv_cls'))],
                 with_cp=False, cp_use_reentrant=False):
        super().__init__()
        name = type(self).__name__
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'{name} num_classes must be a positive int, got {num_classes!r}')
        if not (isinstance(stacked_convs, int) and stacked_convs >= 1):
            raise ValueError(f'{name} stacked_convs must be an int >= 1, got {stacked_convs!r}')
        if not len(strides) == len(scale_ranges) == len(num_grids):
            raise ValueError(f'{name} needs one stride, scale range and grid per level, got '
                             f'{len(strides)} strides, {len(scale_ranges)} scale_ranges and '
                             f'{len(num_grids)} num_grids')
        if len(strides) < 2:
            raise ValueError(f'{name} needs at least 2 levels (the first is resized to the '
                             f'second), got {len(strides)}')
        if not 0 <= cls_down_index < stacked_convs:
            raise ValueError(f'{name} cls_down_index must index one of the {stacked_convs} '
                             f'stacked convs, got {cls_down_index!r}')
        for key, cfg in (('loss_mask', loss_mask), ('loss_cls', loss_cls)):
            if not isinstance(cfg, dict):
                raise ValueError(f'{name} needs a {key} config dict, got {cfg!r}')
        self.num_classes = num_classes
        self.cls_out_channels = num_classes
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.stacked_convs = stacked_convs
        self.strides = strides
        self.num_grids = num_grids
        self.num_levels = len(strides)
        self.scale_ranges = scale_ranges
        self.pos_scale = pos_scale
        self.cls_down_index = cls_down_index
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_mask = MODELS.build(loss_mask)
        self.norm_cfg = norm_cfg
        self.init_cfg = init_cfg
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.fp16_enabled = False
        self._init_layers()
        # no zeroing of deformable convs' conv_offset afterwards: mmdet's mask heads are not
        # BaseDenseHeads, so their offset convs keep the Normal(0, 0.01) init of init_cfg
        apply_init_cfg(self, init_cfg)
        self._init_level_units(with_cp, cp_use_reentrant, num_levels=self.num_levels)

    def _tower_conv(self, in_channels, conv_cfg=None, **kwargs):
        return ConvModule(in_channels, self.feat_channels, 3, stride=1, padding=1,
                          conv_cfg=conv_cfg, norm_cfg=self.norm_cfg, **kwargs)

    def _init_layers(self):
        self.mask_convs = nn.ModuleList()
        self.cls_convs = nn.ModuleList()
        for i in range(self.stacked_convs):
            self.mask_convs.append(self._tower_conv(
                self.in_channels + 2 if i == 0 else self.feat_channels))
            self.cls_convs.append(self._tower_conv(
                self.in_channels if i == 0 else self.feat_channels))
        self.conv_mask_list = nn.ModuleList(
            nn.Conv2d(self.feat_channels, num_grid**2, 1) for num_grid in self.num_grids)
        self.conv_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)

    # ------------------------------------------------------------------------------ forward
    @staticmethod
    def resize_feats(feats):
        """The first level down to the second's size, the last up to the one before's."""
        out = list(feats)
        out[0] = F.interpolate(feats[0], size=feats[1].shape[-2:], mode='bilinear',
                               align_corners=False)
        out[-1] = F.interpolate(feats[-1], size=feats[-2].shape[-2:], mode='bilinear',
                                align_corners=False)
        return out

    @staticmethod
    def _with_coords(x):
        # mmdet's float32 coordinates, then x's dtype (as torch.cat would promote them)
        return torch.cat([x, generate_coordinate(x.size(), x.device).to(x.dtype)], 1)

    def _level_function(self, level):
        return partial(self.forward_single, level=level)

    def _cls_branch(self, x, level):
        cls_feat = x
        for j, layer in enumerate(self.cls_convs):
            if j == self.cls_down_index:
                cls_feat = F.interpolate(cls_feat, size=self.num_grids[level], mode='bilinear')
            cls_feat = layer(cls_feat)
        return self.conv_cls(cls_feat)

    def forward_single(self, x, level):
        """``(mask_pred (B, G*G, 2h, 2w), cls_pred (B, C, G, G))`` logits of one level."""
        mask_feat = self._with_coords(x)
        for layer in self.mask_convs:
            mask_feat = layer(mask_feat)
        mask_feat = F.interpolate(mask_feat, scale_factor=2, mode='bilinear')
        return self.conv_mask_list[level](mask_feat), self._cls_branch(x, level)

    @staticmethod
    def _local_max(cls_pred):
        """Sigmoid scores, zero where a 2x2 neighbour is higher (mmdet's point NMS)."""
        cls_pred = cls_pred.sigmoid()
        local_max = F.max_pool2d(cls_pred, 2, stride=1, padding=1)
        return cls_pred * (local_max[:, :, :-1, :-1] == cls_pred)

    def _check_levels(self, feats):
        if len(feats) != self.num_levels:
            raise ValueError(f'{type(self).__name__} expects {self.num_levels} levels (one per '
                             f'stride), got {len(feats)}')

    def forward(self, feats):
        """Training: per-level logits ``(mask_preds, cls_preds)``. Test: the masks'
        sigmoid at each level's own size (mmdet upsampled them all here, see the module
        docstring) and the class scores after the local-maximum filter (mmdet's)."""
        self._check_levels(feats)
        mask_preds, cls_preds = super().forward(self.resize_feats(feats))
        if not self.training:
            mask_preds = [m.sigmoid() for m in mask_preds]
            cls_preds = [self._local_max(c) for c in cls_preds]
        return mask_preds, cls_preds

    # ------------------------------------------------------------------------------ targets
    def _grid_region(self, gt_mask, box, upsampled_size, num_grid):
        """The cells ``(top, down, left, right)`` (inclusive) of one instance: its centre
        of mass's cell, grown by one cell at most, within the centre region."""
        pos_w_range = 0.5 * (box[2] - box[0]) * self.pos_scale
        pos_h_range = 0.5 * (box[3] - box[1]) * self.pos_scale
        center_h, center_w = center_of_mass(gt_mask)
        up_h, up_w = upsampled_size
        coord_w = _trunc_cell(center_w / up_w, num_grid)
        coord_h = _trunc_cell(center_h / up_h, num_grid)
        top_box = max(0, _trunc_cell((center_h - pos_h_range) / up_h, num_grid))
        down_box = min(num_grid - 1, _trunc_cell((center_h + pos_h_range) / up_h, num_grid))
        left_box = max(0, _trunc_cell((center_w - pos_w_range) / up_w, num_grid))
        right_box = min(num_grid - 1, _trunc_cell((center_w + pos_w_range) / up_w, num_grid))
        return (max(top_box, coord_h - 1), min(down_box, coord_h + 1),
                max(coord_w - 1, left_box), min(right_box, coord_w + 1))

    @staticmethod
    def _rescaled_mask(gt_mask, index, scale, featmap_size, cache):
        """Instance ``index``'s gt mask resized by ``scale`` (cv2, as mmcv.imrescale; mmdet:
        "F.interpolate is different from cv2") into a zero map of ``featmap_size`` (cached
        per instance and scale)."""
        key = (index, scale, tuple(featmap_size))
        if key not in cache:
            small = imrescale(np.uint8(gt_mask.cpu().numpy()), scale)
            target = torch.zeros(tuple(featmap_size), dtype=torch.uint8, device=gt_mask.device)
            h, w = min(small.shape[0], target.shape[0]), min(small.shape[1], target.shape[1])
            target[:h, :w] = torch.from_numpy(np.ascontiguousarray(small[:h, :w])).to(
                gt_mask.device)
            cache[key] = target
        return cache[key]

    def _assign_single(self, gt_bboxes, gt_labels, gt_masks, featmap_size_of, upsampled_size,
                       scale_of):
        """Per level ``(labels (G, G), hits)``, ``hits`` the ``(cell index, target mask)`` of
        each positive cell in mmdet's order (instances in order, cells row by row; a later
        instance overwrites an earlier one's label, and both hits stay)."""
        device = gt_labels.device
        gt_areas = torch.sqrt((gt_bboxes[:, 2] - gt_bboxes[:, 0]) *
                              (gt_bboxes[:, 3] - gt_bboxes[:, 1]))
        cache, out = {}, []
        for level, ((lower, upper), num_grid) in enumerate(zip(self.scale_ranges,
                                                                self.num_grids)):
            labels = torch.full((num_grid, num_grid), self.num_classes, dtype=torch.int64,
                                device=device)
            hits = []
            gt_inds = ((gt_areas >= lower) & (gt_areas <= upper)).nonzero().flatten()
            for k in gt_inds.tolist():
                gt_mask = gt_masks[k]
                if not gt_mask.sum() > 0:
                    continue
                top, down, left, right = self._grid_region(gt_mask, gt_bboxes[k],
                                                           upsampled_size, num_grid)
                labels[top:down + 1, left:right + 1] = gt_labels[k]
                target = self._rescaled_mask(gt_mask, k, scale_of(level),
                                             featmap_size_of(level), cache)
                hits += [(int(i * num_grid + j), target) for i in range(top, down + 1)
                         for j in range(left, right + 1)]
            out.append((labels, hits))
        return out

    def _get_targets_single(self, gt_bboxes, gt_labels, gt_masks, featmap_sizes=None):
        """mmdet's: per level the positive cells' mask targets ``(num_pos, h, w)`` (cell
        order), the labels ``(G, G)`` (background ``num_classes``) and the positive cells
        ``(G*G,)`` bool. Only the positives' targets are built (mmdet filled a
        ``(G*G, h, w)`` map per level first)."""
        upsampled_size = (featmap_sizes[0][0] * 4, featmap_sizes[0][1] * 4)
        assigned = self._assign_single(
            gt_bboxes, gt_labels, gt_masks, lambda lvl: featmap_sizes[lvl], upsampled_size,
            lambda lvl: 1. / (self.strides[lvl] / 2))
        mlvl_targets, mlvl_labels, mlvl_pos_masks = [], [], []
        for (labels, hits), num_grid, size in zip(assigned, self.num_grids, featmap_sizes):
            by_cell = dict(hits)  # the last instance of a cell wins, as mmdet's overwrite
            pos_mask = torch.zeros(num_grid**2, dtype=torch.bool, device=gt_labels.device)
            cells = sorted(by_cell)
            pos_mask[cells] = True
            mlvl_targets.append(torch.stack([by_cell[c] for c in cells]) if cells else
                                torch.zeros((0, *size), dtype=torch.uint8,
                                            device=gt_labels.device))
            mlvl_labels.append(labels)
            mlvl_pos_masks.append(pos_mask)
        return mlvl_targets, mlvl_labels, mlvl_pos_masks

    def _targets(self, gt_bboxes, gt_labels, gt_masks, featmap_sizes):
        if gt_bboxes is None:
            raise ValueError(f'{type(self).__name__} needs gt_bboxes (their sizes pick the '
                             'levels); the pipeline must collect them')
        per_img = [self._get_targets_single(b, lab, m, featmap_sizes)
                   for b, lab, m in zip(gt_bboxes, gt_labels, gt_masks)]
        return tuple(list(x) for x in zip(*per_img))

    def _loss_cls(self, mlvl_cls_preds, labels, num_pos):
        """Focal loss over every cell, levels first then images, mmdet's order."""
        flat_labels = torch.cat([labels[img][lvl].flatten() for lvl in range(self.num_levels)
                                 for img in range(len(labels))])
        flat_preds = torch.cat([p.permute(0, 2, 3, 1).reshape(-1, self.cls_out_channels)
                                for p in mlvl_cls_preds])
        return self.loss_cls(flat_preds, flat_labels, avg_factor=num_pos + 1)

    def loss(self, mlvl_mask_preds, mlvl_cls_preds, gt_labels, gt_masks, img_metas,
             gt_bboxes=None, **kwargs):
        """``dict(loss_mask, loss_cls)``: the dice loss of the positive cells' masks summed
        over the positives (their count; the mean of zeros without any) and the focal
        loss averaged over positives + 1."""
        featmap_sizes = [p.size()[-2:] for p in mlvl_mask_preds]
        targets, labels, pos_masks = self._targets(gt_bboxes, gt_labels, gt_masks,
                                                   featmap_sizes)
        num_pos = sum(pos_masks[img][lvl].sum() for lvl in range(self.num_levels)
                      for img in range(len(gt_labels)))
        loss_mask = []
        for lvl in range(self.num_levels):
            pred = torch.cat([mlvl_mask_preds[lvl][img, pos_masks[img][lvl]]
                              for img in range(len(gt_labels))])
            if pred.size(0) == 0:
                loss_mask.append(pred.sum().unsqueeze(0))
                continue
            target = torch.cat([targets[img][lvl] for img in range(len(gt_labels))])
            loss_mask.append(self.loss_mask(pred, target, reduction_override='none'))
        loss_mask = torch.cat(loss_mask)
        loss_mask = loss_mask.sum() / num_pos if num_pos > 0 else loss_mask.mean()
        return dict(loss_mask=loss_mask, loss_cls=self._loss_cls(mlvl_cls_preds, labels,
                                                                 num_pos))

    # ------------------------------------------------------------------------------ results
    def _test_cfg(self, cfg):
        cfg = self.test_cfg if cfg is None else cfg
        if cfg is None:
            raise ValueError(f'{type(self).__name__} needs a test_cfg with {TEST_CFG_KEYS}')
        get = cfg.get if hasattr(cfg, 'get') else partial(getattr, cfg)
        missing = [k for k in TEST_CFG_KEYS if get(k, None) is None]
        if missing:
            raise KeyError(f'{type(self).__name__} test_cfg lacks {missing}')
        return {k: get(k, None) for k in TEST_CFG_KEYS}

    def _point_strides(self, like):
        """Each cell's level stride, levels concatenated."""
        return torch.cat([like.new_full((g * g, ), float(s), dtype=torch.float32)
                          for g, s in zip(self.num_grids, self.strides)])

    def _level_of(self, points):
        """Level index and channel within the level of flat cell indices."""
        ends = points.new_tensor(self.num_grids).pow(2).cumsum(0)
        level = torch.bucketize(points, ends, right=True)
        starts = torch.cat([ends.new_zeros(1), ends[:-1]])
        return level, points - starts[level]

    @staticmethod
    def _resize(maps, size):
        """``(k, h, w)`` maps bilinearly to ``size`` (mmdet's test-time upsampling)."""
        if tuple(maps.shape[-2:]) == tuple(size):
            return maps
        return F.interpolate(maps.unsqueeze(0), size=size, mode='bilinear')[0]

    def _gather_levels(self, points, per_level, size, like):
        """Stack the maps ``per_level(level, channels)`` (at ``size``) of flat cells."""
        level, channel = self._level_of(points)
        out = like.new_empty((len(points), *size))
        for lvl in level.unique().tolist():
            sel = (level == lvl).nonzero().flatten()
            out[sel] = per_level(lvl, channel[sel])
        return out

    def get_results(self, mlvl_mask_preds, mlvl_cls_scores, img_metas, rescale=True,
                    cfg=None, **kwargs):
        """Per image ``dict(scores (k,), labels (k,), masks (k, H, W) bool)``, ``H, W`` the
        ``ori_shape`` with ``rescale``, else the ``img_shape``."""
        cfg = self._test_cfg(cfg)
        featmap_size = tuple(mlvl_mask_preds[0].shape[-2:])
        results = []
        for img_id, meta in enumerate(img_metas):
            cls_scores = torch.cat([s[img_id].permute(1, 2, 0).reshape(-1, self.num_classes)
                                    for s in mlvl_cls_scores])

            def mask_fn(points, img_id=img_id):
                return self._gather_levels(
                    points, lambda lvl, ch: self._resize(mlvl_mask_preds[lvl][img_id, ch],
                                                         featmap_size),
                    featmap_size, mlvl_mask_preds[0])
            results.append(self._results_single(cls_scores, mask_fn, featmap_size, 4, meta,
                                                cfg, rescale))
        return results

    def _empty(self, like, shape):
        return dict(scores=like.new_zeros(0), labels=like.new_zeros(0, dtype=torch.long),
                    masks=like.new_zeros((0, *shape), dtype=torch.bool))

    def _results_single(self, cls_scores, mask_fn, featmap_size, mask_stride, img_meta, cfg,
                        rescale):
        """mmdet's ``_get_results_single`` on the cells: score threshold, masks at
        ``featmap_size`` (``mask_fn(cells)``, probabilities) above ``mask_thr`` that cover
        more pixels than their level's stride, score times maskness, matrix NMS, masks
        resized to the image, chunked (module docstring)."""
        h, w = img_meta['img_shape'][:2]
        out_shape = tuple(img_meta['ori_shape'][:2]) if rescale else (h, w)
        score_mask = cls_scores > cfg['score_thr']
        scores = cls_scores[score_mask]
        if len(scores) == 0:
            return self._empty(cls_scores, out_shape)
        inds = score_mask.nonzero()
        points, labels = inds[:, 0], inds[:, 1]
        strides = self._point_strides(cls_scores)[points]
        fh, fw = featmap_size
        sums, products = [], []
        for chunk in _chunks(len(points), fh * fw * (BYTES_PER_FLOAT * 3 + 1)):
            probs = mask_fn(points[chunk])
            masks = probs > cfg['mask_thr']
            sums.append(masks.sum((1, 2)).float())
            products.append((probs * masks).sum((1, 2)))
        sum_masks, products = torch.cat(sums), torch.cat(products)
        keep = sum_masks > strides
        if keep.sum() == 0:
            return self._empty(cls_scores, out_shape)
        points, labels, sum_masks = points[keep], labels[keep], sum_masks[keep]
        scores = scores[keep] * (products[keep] / sum_masks)
        # the matrix NMS's own top nms_pre, taken first so only those masks are held
        order = torch.sort(scores, descending=True)[1]
        if 0 < cfg['nms_pre'] < len(order):
            order = order[:cfg['nms_pre']]
        points, labels, scores, sum_masks = points[order], labels[order], scores[order], \
            sum_masks[order]
        masks = torch.cat([mask_fn(points[c]) > cfg['mask_thr']
                           for c in _chunks(len(points), fh * fw * (BYTES_PER_FLOAT * 2 + 1))])
        scores, labels, _, keep_inds = mask_matrix_nms(
            masks, labels, scores, mask_area=sum_masks, nms_pre=cfg['nms_pre'],
            max_num=cfg['max_per_img'], kernel=cfg['kernel'], sigma=cfg['sigma'],
            filter_thr=cfg['filter_thr'])
        if len(keep_inds) == 0:
            return self._empty(cls_scores, out_shape)
        del masks
        points = points[keep_inds]
        up_size = (fh * mask_stride, fw * mask_stride)
        per_mask = (fh * fw + up_size[0] * up_size[1] + 2 * out_shape[0] * out_shape[1]) * \
            BYTES_PER_FLOAT
        out = []
        for chunk in _chunks(len(points), per_mask):
            probs = F.interpolate(mask_fn(points[chunk]).unsqueeze(0), size=up_size,
                                  mode='bilinear')[:, :, :h, :w]
            if rescale:
                probs = F.interpolate(probs, size=out_shape, mode='bilinear')
            out.append(probs.squeeze(0) > cfg['mask_thr'])
        return dict(scores=scores, labels=labels, masks=torch.cat(out))
