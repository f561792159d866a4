"""mmdet 2.x ``CenterNetHead`` (Zhou et al. 2019, Objects as Points): on one feature map, three
branches (3x3 conv, ReLU, 1x1 conv): a per-class centre heatmap (sigmoided in ``forward``), the
box size and the sub-pixel centre offset. Keys ``heatmap_head.{0,2}``, ``wh_head.{0,2}``,
``offset_head.{0,2}`` as mmdet's.

Training: a gaussian at each object's centre (``gaussian_radius`` with min overlap 0.3) under
GaussianFocalLoss divided by the number of centres; L1 size and offset losses at the centres
(divided by twice that). Decoding: the ``topk`` local maxima of the heatmap (max pool of
``local_maximum_kernel``), no NMS unless asked (``with_nms``).

Checkpoint unit: ``level0`` (CenterNet has one level; a second one is refused).
"""
import torch
import torch.nn as nn

from ...ops.nms import batched_nms
from ...registry import MODELS, check_keys
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointUnit
from ..utils import (bias_init_with_prob, gaussian_radius, gen_gaussian_target,
                     get_local_maximum, get_topk_from_heatmap, normal_init,
                     transpose_and_gather_feat)
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['CenterNetHead']


@MODELS.register_module()
class CenterNetHead(LevelUnitsMixin, BaseDenseHead):
    """Args (mmdet's):
        in_channel (int): channels of the input feature map.
        feat_channel (int): channels of each branch's 3x3 conv.
        num_classes (int): object classes.
        loss_center_heatmap, loss_wh, loss_offset (dict): GaussianFocalLoss, L1Loss (0.1),
            L1Loss (1.0) by default.
        train_cfg: unused (kept for the detector).
        test_cfg (dict): ``topk``, ``local_maximum_kernel``, ``max_per_img``, and ``nms`` for
            ``with_nms`` (or ``nms_cfg`` in aug test).
        init_cfg: mmdet's own init (heatmap bias for prior 0.1; N(0, 0.001) size / offset).
        with_cp (bool): ``'full'`` on the level (not an mmdet argument; default False).
        cp_use_reentrant (bool): torch's reentrant checkpoint.
    """

    TEST_CFG_KEYS = ('topk', 'local_maximum_kernel', 'max_per_img', 'nms', 'nms_cfg')

    def __init__(self, in_channel, feat_channel, num_classes,
                 loss_center_heatmap=dict(type='GaussianFocalLoss', loss_weight=1.0),
                 loss_wh=dict(type='L1Loss', loss_weight=0.1),
                 loss_offset=dict(type='L1Loss', loss_weight=1.0),
                 train_cfg=None, test_cfg=None, init_cfg=None, with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        if isinstance(test_cfg, dict):
            check_keys(test_cfg, self.TEST_CFG_KEYS, 'test_cfg', owner='CenterNetHead')
        if not isinstance(with_cp, bool):
            raise TypeError(f'CenterNetHead with_cp must be a bool, got {with_cp!r}')
        self.num_classes = num_classes
        self.heatmap_head = self._build_head(in_channel, feat_channel, num_classes)
        self.wh_head = self._build_head(in_channel, feat_channel, 2)
        self.offset_head = self._build_head(in_channel, feat_channel, 2)
        self.loss_center_heatmap = MODELS.build(loss_center_heatmap)
        self.loss_wh = MODELS.build(loss_wh)
        self.loss_offset = MODELS.build(loss_offset)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self._init_weights()
        # one level, no prior generator: the level unit is set here (LevelUnitsMixin's
        # _init_level_units counts the prior generator's levels)
        self.level_units = [CheckpointUnit.from_flag(with_cp, cp_use_reentrant)]

    @staticmethod
    def _build_head(in_channel, feat_channel, out_channel):
        return nn.Sequential(nn.Conv2d(in_channel, feat_channel, kernel_size=3, padding=1),
                             nn.ReLU(inplace=True),
                             nn.Conv2d(feat_channel, out_channel, kernel_size=1))

    def _init_weights(self):
        self.heatmap_head[-1].bias.data.fill_(bias_init_with_prob(0.1))
        for head in (self.wh_head, self.offset_head):
            for m in head.modules():
                if isinstance(m, nn.Conv2d):
                    normal_init(m, std=0.001)

    def forward_single(self, feat):
        """``(heatmap sigmoid [B, C, H, W], wh [B, 2, H, W], offset [B, 2, H, W])``."""
        return self.heatmap_head(feat).sigmoid(), self.wh_head(feat), self.offset_head(feat)

    @staticmethod
    def _one_level(*preds):
        if not all(len(p) == 1 for p in preds):
            raise ValueError(f'CenterNetHead takes one feature level, got '
                             f'{[len(p) for p in preds]}')
        return [p[0] for p in preds]

    @force_fp32(apply_to=('center_heatmap_preds', 'wh_preds', 'offset_preds'))
    def loss(self, center_heatmap_preds, wh_preds, offset_preds, gt_bboxes, gt_labels,
             img_metas, gt_bboxes_ignore=None):
        """``dict(loss_center_heatmap, loss_wh, loss_offset)``."""
        heatmap, wh, offset = self._one_level(center_heatmap_preds, wh_preds, offset_preds)
        targets, avg_factor = self.get_targets(gt_bboxes, gt_labels, heatmap.shape,
                                               img_metas[0]['pad_shape'])
        weight = targets['wh_offset_target_weight']
        return dict(
            loss_center_heatmap=self.loss_center_heatmap(
                heatmap, targets['center_heatmap_target'], avg_factor=avg_factor),
            loss_wh=self.loss_wh(wh, targets['wh_target'], weight, avg_factor=avg_factor * 2),
            loss_offset=self.loss_offset(offset, targets['offset_target'], weight,
                                         avg_factor=avg_factor * 2))

    def get_targets(self, gt_bboxes, gt_labels, feat_shape, img_shape):
        """Batch targets on the ``feat_shape`` grid of an ``img_shape`` (h, w) input:
        ``(dict(center_heatmap_target, wh_target, offset_target, wh_offset_target_weight),
        avg_factor)``, the latter the number of heatmap ones (at least 1)."""
        img_h, img_w = img_shape[:2]
        bs, _, feat_h, feat_w = feat_shape
        width_ratio = float(feat_w / img_w)
        height_ratio = float(feat_h / img_h)
        ref = gt_bboxes[-1]
        heatmap = ref.new_zeros([bs, self.num_classes, feat_h, feat_w])
        wh_target = ref.new_zeros([bs, 2, feat_h, feat_w])
        offset_target = ref.new_zeros([bs, 2, feat_h, feat_w])
        weight = ref.new_zeros([bs, 2, feat_h, feat_w])
        for b in range(bs):
            boxes, labels = gt_bboxes[b], gt_labels[b]
            cx = (boxes[:, [0]] + boxes[:, [2]]) * width_ratio / 2
            cy = (boxes[:, [1]] + boxes[:, [3]]) * height_ratio / 2
            for j, ct in enumerate(torch.cat((cx, cy), dim=1)):
                ctx_int, cty_int = ct.int()
                ctx, cty = ct
                box_h = (boxes[j][3] - boxes[j][1]) * height_ratio
                box_w = (boxes[j][2] - boxes[j][0]) * width_ratio
                radius = max(0, int(gaussian_radius([box_h, box_w], min_overlap=0.3)))
                gen_gaussian_target(heatmap[b, labels[j]], [ctx_int, cty_int], radius)
                wh_target[b, 0, cty_int, ctx_int] = box_w
                wh_target[b, 1, cty_int, ctx_int] = box_h
                offset_target[b, 0, cty_int, ctx_int] = ctx - ctx_int
                offset_target[b, 1, cty_int, ctx_int] = cty - cty_int
                weight[b, :, cty_int, ctx_int] = 1
        avg_factor = max(1, heatmap.eq(1).sum())
        return dict(center_heatmap_target=heatmap, wh_target=wh_target,
                    offset_target=offset_target, wh_offset_target_weight=weight), avg_factor

    @force_fp32(apply_to=('center_heatmap_preds', 'wh_preds', 'offset_preds'))
    def get_bboxes(self, center_heatmap_preds, wh_preds, offset_preds, img_metas,
                   rescale=True, with_nms=False):
        """Per image ``(det_bboxes [k, 5], det_labels [k])``: the ``topk`` centres, less the
        ``border`` of RandomCenterCropPad (none when the meta has none), in
        ``batch_input_shape`` pixels (the ``pad_shape`` when a direct call did not set it), divided by
        ``scale_factor`` when ``rescale``; class-wise NMS with ``with_nms``."""
        heatmap, wh, offset = self._one_level(center_heatmap_preds, wh_preds, offset_preds)
        return [self._get_bboxes_single(heatmap[i:i + 1], wh[i:i + 1], offset[i:i + 1],
                                        img_metas[i], rescale=rescale, with_nms=with_nms)
                for i in range(len(img_metas))]

    def _get_bboxes_single(self, center_heatmap_pred, wh_pred, offset_pred, img_meta,
                           rescale=False, with_nms=True):
        bboxes, labels = self.decode_heatmap(
            center_heatmap_pred, wh_pred, offset_pred,
            img_meta.get('batch_input_shape') or tuple(img_meta['pad_shape'][:2]),
            k=cfg_get(self.test_cfg, 'topk', 100),
            kernel=cfg_get(self.test_cfg, 'local_maximum_kernel', 3))
        det_bboxes = bboxes.view([-1, 5])
        det_labels = labels.view(-1)
        border = det_bboxes.new_tensor(img_meta.get('border', (0, 0, 0, 0)))[..., [2, 0, 2, 0]]
        det_bboxes[..., :4] -= border
        if rescale:
            det_bboxes[..., :4] /= det_bboxes.new_tensor(img_meta['scale_factor'])
        if with_nms:
            det_bboxes, det_labels = self._bboxes_nms(det_bboxes, det_labels, self.test_cfg)
        return det_bboxes, det_labels

    def decode_heatmap(self, center_heatmap_pred, wh_pred, offset_pred, img_shape, k=100,
                       kernel=3):
        """``(bboxes [B, k, 5], labels [B, k])`` in ``img_shape`` (h, w) pixels."""
        height, width = center_heatmap_pred.shape[2:]
        inp_h, inp_w = img_shape
        heat = get_local_maximum(center_heatmap_pred, kernel=kernel)
        scores, index, labels, ys, xs = get_topk_from_heatmap(heat, k=k)
        wh = transpose_and_gather_feat(wh_pred, index)
        offset = transpose_and_gather_feat(offset_pred, index)
        xs = xs + offset[..., 0]
        ys = ys + offset[..., 1]
        tl_x = (xs - wh[..., 0] / 2) * (inp_w / width)
        tl_y = (ys - wh[..., 1] / 2) * (inp_h / height)
        br_x = (xs + wh[..., 0] / 2) * (inp_w / width)
        br_y = (ys + wh[..., 1] / 2) * (inp_h / height)
        bboxes = torch.stack([tl_x, tl_y, br_x, br_y], dim=2)
        return torch.cat((bboxes, scores[..., None]), dim=-1), labels

    def _bboxes_nms(self, bboxes, labels, cfg):
        if labels.numel() > 0:
            max_num = cfg_get(cfg, 'max_per_img')
            nms_cfg = cfg_get(cfg, 'nms', None) or cfg_get(cfg, 'nms_cfg', None)
            if nms_cfg is None:
                raise ValueError(f'CenterNetHead with_nms needs test_cfg.nms, got {cfg!r}')
            bboxes, keep = batched_nms(bboxes[:, :4], bboxes[:, -1].contiguous(), labels,
                                       nms_cfg)
            if max_num > 0:
                bboxes = bboxes[:max_num]
                labels = labels[keep][:max_num]
        return bboxes, labels

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('CenterNetHead: the CenterNet detector runs the flip test '
                                  '(it averages the heatmaps of a flipped pair)')
