"""mmdet 2.x ``CornerHead`` (Law & Deng 2018, CornerNet): per feature level (one per hourglass
stack) a top-left and a bottom-right branch, each a ``BiCornerPool`` (two directional corner
poolings) feeding a heatmap, an embedding (``corner_emb_channels``) and an offset head. Keys as
mmdet's (``tl_pool.{i}.*``, ``tl_heat.{i}.{0,1}.conv.*``, ``tl_emb.*``, ``tl_off.*``, ``br_*``).

Training: gaussian corner heatmaps (GaussianFocalLoss on the sigmoid), associative embedding
pull / push losses, smooth-L1 sub-pixel offsets, each level against the same targets; the
losses ``det_loss``, ``off_loss``, ``pull_loss``, ``push_loss`` are lists over levels.
Decoding (last level): the ``corner_topk`` local maxima of each heatmap, every top-left with
every bottom-right of one class, embeddings closer than ``distance_threshold``, the box
inside the border; then NMS (soft-NMS in the configs).

Checkpoint units: ``level{i}``, one per feature level.
"""
from functools import partial
from math import ceil, log

import torch
import torch.nn as nn

from ...ops.corner_pool import CornerPool
from ...ops.nms import batched_nms
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointUnit
from ..utils import (ConvModule, bias_init_with_prob, gaussian_radius, gen_gaussian_target,
                     get_local_maximum, get_topk_from_heatmap, transpose_and_gather_feat)
from ..utils.gaussian_target import gather_feat
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['CornerHead', 'BiCornerPool']


class BiCornerPool(nn.Module):
    """Two directional corner poolings of two 3x3 ConvModules, summed, a 3x3 ConvModule (no
    activation), plus a 1x1 ConvModule of the input, ReLU, a 3x3 ConvModule."""

    def __init__(self, in_channels, directions, feat_channels=128, out_channels=128,
                 norm_cfg=dict(type='BN', requires_grad=True), init_cfg=None):
        super().__init__()
        self.direction1_conv = ConvModule(in_channels, feat_channels, 3, padding=1,
                                          norm_cfg=norm_cfg)
        self.direction2_conv = ConvModule(in_channels, feat_channels, 3, padding=1,
                                          norm_cfg=norm_cfg)
        self.aftpool_conv = ConvModule(feat_channels, out_channels, 3, padding=1,
                                       norm_cfg=norm_cfg, act_cfg=None)
        self.conv1 = ConvModule(in_channels, out_channels, 1, norm_cfg=norm_cfg, act_cfg=None)
        self.conv2 = ConvModule(in_channels, out_channels, 3, padding=1, norm_cfg=norm_cfg)
        self.direction1_pool = CornerPool(directions[0])
        self.direction2_pool = CornerPool(directions[1])
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        pooled = self.direction1_pool(self.direction1_conv(x)) + \
            self.direction2_pool(self.direction2_conv(x))
        return self.conv2(self.relu(self.aftpool_conv(pooled) + self.conv1(x)))


@MODELS.register_module()
class CornerHead(LevelUnitsMixin, BaseDenseHead):
    """Args (mmdet's):
        num_classes (int), in_channels (int): classes; channels of each level's input.
        num_feat_levels (int): levels (hourglass stacks; 2).
        corner_emb_channels (int): embedding channels (0: no embedding branch).
        train_cfg: unused. test_cfg (dict): ``corner_topk``, ``local_maximum_kernel``,
            ``distance_threshold``, ``score_thr`` (unused, as mmdet), ``max_per_img``,
            ``nms`` (or the deprecated ``nms_cfg``).
        loss_heatmap, loss_embedding, loss_offset (dict | None).
        init_cfg: must be None (mmdet refuses one).
        with_cp (bool): ``'full'`` on every level (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    def __init__(self, num_classes, in_channels, num_feat_levels=2, corner_emb_channels=1,
                 train_cfg=None, test_cfg=None,
                 loss_heatmap=dict(type='GaussianFocalLoss', alpha=2.0, gamma=4.0,
                                   loss_weight=1),
                 loss_embedding=dict(type='AssociativeEmbeddingLoss', pull_weight=0.25,
                                     push_weight=0.25),
                 loss_offset=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1),
                 init_cfg=None, with_cp=False, cp_use_reentrant=False):
        super().__init__()
        if init_cfg is not None:
            raise ValueError(f'{type(self).__name__} takes no init_cfg (as mmdet), got '
                             f'{init_cfg!r}')
        if not (isinstance(num_feat_levels, int) and num_feat_levels >= 1):
            raise ValueError(f'num_feat_levels must be a positive int, got {num_feat_levels!r}')
        if not isinstance(with_cp, bool):
            raise TypeError(f'{type(self).__name__} with_cp must be a bool, got {with_cp!r}')
        self.num_classes = num_classes
        self.in_channels = in_channels
        self.corner_emb_channels = corner_emb_channels
        self.with_corner_emb = corner_emb_channels > 0
        self.corner_offset_channels = 2
        self.num_feat_levels = num_feat_levels
        self.loss_heatmap = MODELS.build(loss_heatmap) if loss_heatmap is not None else None
        self.loss_embedding = MODELS.build(loss_embedding) \
            if loss_embedding is not None else None
        self.loss_offset = MODELS.build(loss_offset) if loss_offset is not None else None
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self._init_layers()
        self._init_weights()
        # the levels are not a prior generator's: the units are set here
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)
                            for _ in range(num_feat_levels)]

    def _make_layers(self, out_channels, in_channels=256, feat_channels=256):
        return nn.Sequential(ConvModule(in_channels, feat_channels, 3, padding=1),
                             ConvModule(feat_channels, out_channels, 1, norm_cfg=None,
                                        act_cfg=None))

    def _init_corner_kpt_layers(self):
        names = ('tl_pool', 'br_pool', 'tl_heat', 'br_heat', 'tl_off', 'br_off')
        for name in names:
            setattr(self, name, nn.ModuleList())
        for _ in range(self.num_feat_levels):
            self.tl_pool.append(BiCornerPool(self.in_channels, ['top', 'left'],
                                             out_channels=self.in_channels))
            self.br_pool.append(BiCornerPool(self.in_channels, ['bottom', 'right'],
                                             out_channels=self.in_channels))
            for name, out in (('tl_heat', self.num_classes), ('br_heat', self.num_classes),
                              ('tl_off', self.corner_offset_channels),
                              ('br_off', self.corner_offset_channels)):
                getattr(self, name).append(self._make_layers(out, self.in_channels))

    def _init_corner_emb_layers(self):
        self.tl_emb, self.br_emb = nn.ModuleList(), nn.ModuleList()
        for _ in range(self.num_feat_levels):
            self.tl_emb.append(self._make_layers(self.corner_emb_channels, self.in_channels))
            self.br_emb.append(self._make_layers(self.corner_emb_channels, self.in_channels))

    def _init_layers(self):
        self._init_corner_kpt_layers()
        if self.with_corner_emb:
            self._init_corner_emb_layers()

    def _init_weights(self):
        """mmdet's: the last conv of each head PyTorch's default init, the heatmaps' bias for a
        prior of 0.1 (the ConvModules before keep their Kaiming init)."""
        bias = bias_init_with_prob(0.1)
        names = ['tl_heat', 'br_heat', 'tl_off', 'br_off']
        names += ['tl_emb', 'br_emb'] if self.with_corner_emb else []
        for i in range(self.num_feat_levels):
            for name in names:
                conv = getattr(self, name)[i][-1].conv
                conv.reset_parameters()
                if name.endswith('heat'):
                    conv.bias.data.fill_(bias)

    def _level_function(self, level):
        return partial(self.forward_single, lvl_ind=level)

    def forward(self, feats):
        if len(feats) != self.num_feat_levels:
            raise ValueError(f'{type(self).__name__} expects {self.num_feat_levels} levels '
                             f'(num_feat_levels), got {len(feats)}')
        return super().forward(feats)

    def forward_single(self, x, lvl_ind, return_pool=False):
        """``[tl_heat, br_heat, tl_emb, br_emb, tl_off, br_off]`` (embeddings None without the
        branch), and with ``return_pool`` the two pooled features."""
        tl_pool = self.tl_pool[lvl_ind](x)
        br_pool = self.br_pool[lvl_ind](x)
        tl_heat = self.tl_heat[lvl_ind](tl_pool)
        br_heat = self.br_heat[lvl_ind](br_pool)
        tl_emb = br_emb = None
        if self.with_corner_emb:
            tl_emb = self.tl_emb[lvl_ind](tl_pool)
            br_emb = self.br_emb[lvl_ind](br_pool)
        result = [tl_heat, br_heat, tl_emb, br_emb, self.tl_off[lvl_ind](tl_pool),
                  self.br_off[lvl_ind](br_pool)]
        if return_pool:
            result += [tl_pool, br_pool]
        return result

    # ------------------------------------------------------------------ targets and loss
    def get_targets(self, gt_bboxes, gt_labels, feat_shape, img_shape, with_corner_emb=False,
                    with_guiding_shift=False, with_centripetal_shift=False):
        """Corner targets on the ``feat_shape`` grid of an ``img_shape`` input: heatmaps and
        offsets of both corners, and as asked the corner matches (embedding), the guiding
        shifts and the log centripetal shifts (CentripetalNet)."""
        batch_size, _, height, width = feat_shape
        img_h, img_w = img_shape[:2]
        width_ratio = float(width / img_w)
        height_ratio = float(height / img_h)
        ref = gt_bboxes[-1]
        tl_heat = ref.new_zeros([batch_size, self.num_classes, height, width])
        br_heat = ref.new_zeros([batch_size, self.num_classes, height, width])
        tl_off = ref.new_zeros([batch_size, 2, height, width])
        br_off = ref.new_zeros([batch_size, 2, height, width])
        match = []
        if with_guiding_shift:
            tl_guide = ref.new_zeros([batch_size, 2, height, width])
            br_guide = ref.new_zeros([batch_size, 2, height, width])
        if with_centripetal_shift:
            tl_cent = ref.new_zeros([batch_size, 2, height, width])
            br_cent = ref.new_zeros([batch_size, 2, height, width])
        for b in range(batch_size):
            corner_match = []
            for j in range(len(gt_labels[b])):
                left, top, right, bottom = gt_bboxes[b][j]
                center_x = (left + right) / 2.0
                center_y = (top + bottom) / 2.0
                label = gt_labels[b][j]
                s_left, s_right = left * width_ratio, right * width_ratio
                s_top, s_bottom = top * height_ratio, bottom * height_ratio
                s_cx, s_cy = center_x * width_ratio, center_y * height_ratio
                left_idx = int(min(s_left, width - 1))
                right_idx = int(min(s_right, width - 1))
                top_idx = int(min(s_top, height - 1))
                bottom_idx = int(min(s_bottom, height - 1))
                radius = gaussian_radius((ceil(s_bottom - s_top), ceil(s_right - s_left)),
                                         min_overlap=0.3)
                radius = max(0, int(radius))
                tl_heat[b, label] = gen_gaussian_target(tl_heat[b, label],
                                                        [left_idx, top_idx], radius)
                br_heat[b, label] = gen_gaussian_target(br_heat[b, label],
                                                        [right_idx, bottom_idx], radius)
                tl_off[b, 0, top_idx, left_idx] = s_left - left_idx
                tl_off[b, 1, top_idx, left_idx] = s_top - top_idx
                br_off[b, 0, bottom_idx, right_idx] = s_right - right_idx
                br_off[b, 1, bottom_idx, right_idx] = s_bottom - bottom_idx
                if with_corner_emb:
                    corner_match.append([[top_idx, left_idx], [bottom_idx, right_idx]])
                if with_guiding_shift:
                    tl_guide[b, 0, top_idx, left_idx] = s_cx - left_idx
                    tl_guide[b, 1, top_idx, left_idx] = s_cy - top_idx
                    br_guide[b, 0, bottom_idx, right_idx] = right_idx - s_cx
                    br_guide[b, 1, bottom_idx, right_idx] = bottom_idx - s_cy
                if with_centripetal_shift:
                    tl_cent[b, 0, top_idx, left_idx] = log(s_cx - s_left)
                    tl_cent[b, 1, top_idx, left_idx] = log(s_cy - s_top)
                    br_cent[b, 0, bottom_idx, right_idx] = log(s_right - s_cx)
                    br_cent[b, 1, bottom_idx, right_idx] = log(s_bottom - s_cy)
            if with_corner_emb:
                match.append(corner_match)
        result = dict(topleft_heatmap=tl_heat, topleft_offset=tl_off,
                      bottomright_heatmap=br_heat, bottomright_offset=br_off)
        if with_corner_emb:
            result.update(corner_embedding=match)
        if with_guiding_shift:
            result.update(topleft_guiding_shift=tl_guide, bottomright_guiding_shift=br_guide)
        if with_centripetal_shift:
            result.update(topleft_centripetal_shift=tl_cent,
                          bottomright_centripetal_shift=br_cent)
        return result

    @force_fp32()
    def loss(self, tl_heats, br_heats, tl_embs, br_embs, tl_offs, br_offs, gt_bboxes,
             gt_labels, img_metas, gt_bboxes_ignore=None):
        """``dict(det_loss, off_loss[, pull_loss, push_loss])``, each a list over levels."""
        targets = self.get_targets(gt_bboxes, gt_labels, tl_heats[-1].shape,
                                   img_metas[0]['pad_shape'],
                                   with_corner_emb=self.with_corner_emb)
        det, pull, push, off = zip(*[
            self.loss_single(*outs, targets) for outs in
            zip(tl_heats, br_heats, tl_embs, br_embs, tl_offs, br_offs)])
        losses = dict(det_loss=list(det), off_loss=list(off))
        if self.with_corner_emb:
            losses.update(pull_loss=list(pull), push_loss=list(push))
        return losses

    def _heat_and_offset_losses(self, tl_hmp, br_hmp, tl_off, br_off, targets):
        gt_tl_hmp, gt_br_hmp = targets['topleft_heatmap'], targets['bottomright_heatmap']
        det_loss = (self.loss_heatmap(tl_hmp.sigmoid(), gt_tl_hmp,
                                      avg_factor=max(1, gt_tl_hmp.eq(1).sum()))
                    + self.loss_heatmap(br_hmp.sigmoid(), gt_br_hmp,
                                        avg_factor=max(1, gt_br_hmp.eq(1).sum()))) / 2.0
        tl_mask = gt_tl_hmp.eq(1).sum(1).gt(0).unsqueeze(1).type_as(gt_tl_hmp)
        br_mask = gt_br_hmp.eq(1).sum(1).gt(0).unsqueeze(1).type_as(gt_br_hmp)
        off_loss = (self.loss_offset(tl_off, targets['topleft_offset'], tl_mask,
                                     avg_factor=max(1, tl_mask.sum()))
                    + self.loss_offset(br_off, targets['bottomright_offset'], br_mask,
                                       avg_factor=max(1, br_mask.sum()))) / 2.0
        return det_loss, off_loss, tl_mask, br_mask

    def loss_single(self, tl_hmp, br_hmp, tl_emb, br_emb, tl_off, br_off, targets):
        """One level: ``(det_loss, pull_loss, push_loss, off_loss)``."""
        det_loss, off_loss, _, _ = self._heat_and_offset_losses(tl_hmp, br_hmp, tl_off,
                                                                br_off, targets)
        pull_loss = push_loss = None
        if self.with_corner_emb and self.loss_embedding is not None:
            pull_loss, push_loss = self.loss_embedding(tl_emb, br_emb,
                                                       targets['corner_embedding'])
        return det_loss, pull_loss, push_loss, off_loss

    # ------------------------------------------------------------------ inference
    @force_fp32()
    def get_bboxes(self, tl_heats, br_heats, tl_embs, br_embs, tl_offs, br_offs, img_metas,
                   rescale=False, with_nms=True):
        """Per image ``(det_bboxes [k, 5], det_labels [k])`` from the last level."""
        if not tl_heats[-1].shape[0] == br_heats[-1].shape[0] == len(img_metas):
            raise ValueError(f'{len(img_metas)} img_metas for a batch of '
                             f'{tl_heats[-1].shape[0]}')
        return [self._get_bboxes_single(
            tl_heats[-1][i:i + 1], br_heats[-1][i:i + 1], tl_offs[-1][i:i + 1],
            br_offs[-1][i:i + 1], img_metas[i], tl_emb=tl_embs[-1][i:i + 1],
            br_emb=br_embs[-1][i:i + 1], rescale=rescale, with_nms=with_nms)
            for i in range(len(img_metas))]

    def _get_bboxes_single(self, tl_heat, br_heat, tl_off, br_off, img_meta, tl_emb=None,
                           br_emb=None, tl_centripetal_shift=None, br_centripetal_shift=None,
                           rescale=False, with_nms=True):
        if isinstance(img_meta, (list, tuple)):
            img_meta = img_meta[0]
        bboxes, scores, clses = self.decode_heatmap(
            tl_heat=tl_heat.sigmoid(), br_heat=br_heat.sigmoid(), tl_off=tl_off,
            br_off=br_off, tl_emb=tl_emb, br_emb=br_emb,
            tl_centripetal_shift=tl_centripetal_shift,
            br_centripetal_shift=br_centripetal_shift, img_meta=img_meta,
            k=cfg_get(self.test_cfg, 'corner_topk', 100),
            kernel=cfg_get(self.test_cfg, 'local_maximum_kernel', 3),
            distance_threshold=cfg_get(self.test_cfg, 'distance_threshold', 0.5))
        if rescale:
            bboxes /= bboxes.new_tensor(img_meta['scale_factor'])
        detections = torch.cat([bboxes.view([-1, 4]), scores.view(-1).unsqueeze(-1)], -1)
        keep = detections[:, -1] > -0.1
        detections, labels = detections[keep], clses.view(-1)[keep]
        if with_nms:
            detections, labels = self._bboxes_nms(detections, labels, self.test_cfg)
        return detections, labels

    def _bboxes_nms(self, bboxes, labels, cfg):
        """Class-wise NMS of ``test_cfg.nms`` (or the deprecated ``nms_cfg``), then
        ``max_per_img``."""
        nms_cfg = cfg_get(cfg, 'nms', None) or cfg_get(cfg, 'nms_cfg', None)
        if nms_cfg is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg.nms, got {cfg!r}')
        if labels.numel() > 0:
            max_num = cfg_get(cfg, 'max_per_img')
            bboxes, keep = batched_nms(bboxes[:, :4], bboxes[:, -1].contiguous(), labels,
                                       nms_cfg)
            if max_num > 0:
                bboxes = bboxes[:max_num]
                labels = labels[keep][:max_num]
        return bboxes, labels

    def decode_heatmap(self, tl_heat, br_heat, tl_off, br_off, tl_emb=None, br_emb=None,
                       tl_centripetal_shift=None, br_centripetal_shift=None, img_meta=None,
                       k=100, kernel=3, distance_threshold=0.5, num_dets=1000):
        """``(bboxes [B, num_dets, 4], scores [B, num_dets, 1], classes [B, num_dets, 1])``
        in ``pad_shape`` pixels less the ``border``; pairs that do not match (classes,
        embedding distance or, with centripetal shifts, central region, an empty box) score
        -1. Either the embeddings or the centripetal shifts are given."""
        with_embedding = tl_emb is not None and br_emb is not None
        with_centripetal = tl_centripetal_shift is not None and br_centripetal_shift is not None
        if with_embedding + with_centripetal != 1:
            raise ValueError('decode_heatmap takes the embeddings or the centripetal shifts')
        batch, _, height, width = tl_heat.size()
        inp_h, inp_w = img_meta['pad_shape'][:2]
        tl_heat = get_local_maximum(tl_heat, kernel=kernel)
        br_heat = get_local_maximum(br_heat, kernel=kernel)
        tl_scores, tl_inds, tl_clses, tl_ys, tl_xs = get_topk_from_heatmap(tl_heat, k=k)
        br_scores, br_inds, br_clses, br_ys, br_xs = get_topk_from_heatmap(br_heat, k=k)
        # every top-left (rows) with every bottom-right (columns)
        tl_ys = tl_ys.view(batch, k, 1).repeat(1, 1, k)
        tl_xs = tl_xs.view(batch, k, 1).repeat(1, 1, k)
        br_ys = br_ys.view(batch, 1, k).repeat(1, k, 1)
        br_xs = br_xs.view(batch, 1, k).repeat(1, k, 1)
        tl_off = transpose_and_gather_feat(tl_off, tl_inds).view(batch, k, 1, 2)
        br_off = transpose_and_gather_feat(br_off, br_inds).view(batch, 1, k, 2)
        tl_xs = tl_xs + tl_off[..., 0]
        tl_ys = tl_ys + tl_off[..., 1]
        br_xs = br_xs + br_off[..., 0]
        br_ys = br_ys + br_off[..., 1]
        if with_centripetal:
            tl_shift = transpose_and_gather_feat(tl_centripetal_shift, tl_inds).view(
                batch, k, 1, 2).exp()
            br_shift = transpose_and_gather_feat(br_centripetal_shift, br_inds).view(
                batch, 1, k, 2).exp()
            tl_ctxs, tl_ctys = tl_xs + tl_shift[..., 0], tl_ys + tl_shift[..., 1]
            br_ctxs, br_ctys = br_xs - br_shift[..., 0], br_ys - br_shift[..., 1]
        sx, sy = inp_w / width, inp_h / height
        tl_xs, tl_ys, br_xs, br_ys = tl_xs * sx, tl_ys * sy, br_xs * sx, br_ys * sy
        x_off = y_off = 0
        if 'border' in img_meta:
            x_off, y_off = img_meta['border'][2], img_meta['border'][0]
        tl_xs, tl_ys, br_xs, br_ys = tl_xs - x_off, tl_ys - y_off, br_xs - x_off, br_ys - y_off
        zeros = tl_xs.new_zeros(*tl_xs.size())
        tl_xs = torch.where(tl_xs > 0.0, tl_xs, zeros)
        tl_ys = torch.where(tl_ys > 0.0, tl_ys, zeros)
        br_xs = torch.where(br_xs > 0.0, br_xs, zeros)
        br_ys = torch.where(br_ys > 0.0, br_ys, zeros)
        bboxes = torch.stack((tl_xs, tl_ys, br_xs, br_ys), dim=3)
        area_bboxes = ((br_xs - tl_xs) * (br_ys - tl_ys)).abs()
        if with_centripetal:
            ct = [(c * s - o) for c, s, o in ((tl_ctxs, sx, x_off), (tl_ctys, sy, y_off),
                                              (br_ctxs, sx, x_off), (br_ctys, sy, y_off))]
            ct = [c * c.gt(0.0).type_as(c) for c in ct]
            ct_bboxes = torch.stack(ct, dim=3)
            area_ct = ((ct[2] - ct[0]) * (ct[3] - ct[1])).abs()
            # the central region: 1/2.1 of the box (large boxes) or 1/2.4 around its centre
            mu = torch.ones_like(area_bboxes) / 2.4
            mu[area_bboxes > 3500] = 1 / 2.1
            cx = (bboxes[..., 0] + bboxes[..., 2]) / 2
            cy = (bboxes[..., 1] + bboxes[..., 3]) / 2
            half_w = mu * (bboxes[..., 2] - bboxes[..., 0]) / 2
            half_h = mu * (bboxes[..., 3] - bboxes[..., 1]) / 2
            rcentral = torch.stack((cx - half_w, cy - half_h, cx + half_w, cy + half_h), 3)
            area_rcentral = ((rcentral[..., 2] - rcentral[..., 0])
                             * (rcentral[..., 3] - rcentral[..., 1])).abs()
            dists = area_ct / area_rcentral
            outside = [(ct_bboxes[..., i] <= rcentral[..., j])
                       | (ct_bboxes[..., i] >= rcentral[..., j + 2])
                       for i, j in ((0, 0), (1, 1), (2, 0), (3, 1))]
        if with_embedding:
            tl_emb = transpose_and_gather_feat(tl_emb, tl_inds).view(batch, k, 1)
            br_emb = transpose_and_gather_feat(br_emb, br_inds).view(batch, 1, k)
            dists = torch.abs(tl_emb - br_emb)
        scores = (tl_scores.view(batch, k, 1).repeat(1, 1, k)
                  + br_scores.view(batch, 1, k).repeat(1, k, 1)) / 2
        tl_clses = tl_clses.view(batch, k, 1).repeat(1, 1, k)
        br_clses = br_clses.view(batch, 1, k).repeat(1, k, 1)
        negative = -1 * torch.ones_like(scores)
        for bad in (tl_clses != br_clses, br_xs <= tl_xs, br_ys <= tl_ys,
                    dists > distance_threshold):
            scores = torch.where(bad, negative, scores)
        if with_centripetal:
            for bad in outside:
                scores[bad] = -1
        # at most k * k pairs exist (mmdet's topk failed below num_dets of them)
        scores, inds = torch.topk(scores.view(batch, -1), min(num_dets, k * k))
        bboxes = gather_feat(bboxes.view(batch, -1, 4), inds)
        clses = gather_feat(tl_clses.contiguous().view(batch, -1, 1), inds).float()
        return bboxes, scores.unsqueeze(2), clses
