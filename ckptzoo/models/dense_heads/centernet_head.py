"""mmdet 2.x ``CenterNetHead`` (Zhou et al. 2019, "Objects as Points"): on one feature map,
a per-class centre heatmap (sigmoid), the box size and the sub-cell centre offset, each from a
3x3 conv, ReLU, 1x1 conv branch. Targets are Gaussians drawn at the box centres
(``gaussian_radius`` with IoU 0.3); detections are the ``topk`` local maxima of the heatmap
(no NMS unless ``test_cfg.nms`` is given to ``get_bboxes(with_nms=True)``).

State-dict keys equal mmdet's (``heatmap_head.0.weight``, ``wh_head.2.bias``, ...).
Checkpoint units: ``level0`` (the three branches on the one feature map)."""
import torch
import torch.nn as nn

from ...ops.nms import batched_nms
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ...utils.cfg_get import cfg_get
from ..utils import (bias_init_with_prob, gaussian_radius, gen_gaussian_target,
                     get_local_maximum, get_topk_from_heatmap, normal_init,
                     transpose_and_gather_feat)
from .base_dense_head import BaseDenseHead
from .level_units import LevelUnitsMixin

__all__ = ['CenterNetHead']


@MODELS.register_module()
class CenterNetHead(LevelUnitsMixin, BaseDenseHead):
    """Args (mmdet's):
        in_channel (int), feat_channel (int), num_classes (int).
        loss_center_heatmap (dict): default GaussianFocalLoss.
        loss_wh (dict): default L1Loss (weight 0.1). loss_offset (dict): default L1Loss.
        train_cfg (unused), test_cfg (dict): ``topk``, ``local_maximum_kernel``,
            ``max_per_img``, optional ``nms``.
        init_cfg: mmdet's ``init_weights`` is applied at construction (heatmap bias at prior
            0.1, size and offset convs Normal(0.001)); a ``Pretrained`` one loads in
            ``init_weights``.
        with_cp (bool), cp_use_reentrant (bool): as the other dense heads (not mmdet's).

    ``img_metas`` without ``border`` (images not from RandomCenterCropPad) are taken as
    unpadded (mmdet needs the key).
    """

    def __init__(self, in_channel, feat_channel, num_classes,
                 loss_center_heatmap=dict(type='GaussianFocalLoss', loss_weight=1.0),
                 loss_wh=dict(type='L1Loss', loss_weight=0.1),
                 loss_offset=dict(type='L1Loss', loss_weight=1.0),
                 train_cfg=None, test_cfg=None, init_cfg=None, with_cp=False,
                 cp_use_reentrant=False):
        super().__init__()
        if not (isinstance(num_classes, int) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
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
        self.heatmap_head[-1].bias.data.fill_(bias_init_with_prob(0.1))
        for head in (self.wh_head, self.offset_head):
            for m in head.modules():
                if isinstance(m, nn.Conv2d):
                    normal_init(m, std=0.001)
        self._init_level_units(with_cp, cp_use_reentrant, num_levels=1)

    @staticmethod
    def _build_head(in_channel, feat_channel, out_channel):
        return nn.Sequential(nn.Conv2d(in_channel, feat_channel, kernel_size=3, padding=1),
                             nn.ReLU(inplace=True),
                             nn.Conv2d(feat_channel, out_channel, kernel_size=1))

    def forward_single(self, feat):
        """``(center heatmap (probabilities), wh, offset)`` of the feature map."""
        return (self.heatmap_head(feat).sigmoid(), self.wh_head(feat),
                self.offset_head(feat))

    @force_fp32(apply_to=('center_heatmap_preds', 'wh_preds', 'offset_preds'))
    def loss(self, center_heatmap_preds, wh_preds, offset_preds, gt_bboxes, gt_labels,
             img_metas, gt_bboxes_ignore=None):
        """mmdet 2.x: the heatmap loss averaged over the Gaussian peaks of the batch; size and
        offset L1 at the peaks, averaged over twice that."""
        if not len(center_heatmap_preds) == len(wh_preds) == len(offset_preds) == 1:
            raise ValueError(f'CenterNetHead predicts on one feature map, got '
                             f'{len(center_heatmap_preds)}')
        heatmap, wh, offset = center_heatmap_preds[0], wh_preds[0], offset_preds[0]
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
        """``(dict(center_heatmap_target, wh_target, offset_target, wh_offset_target_weight),
        avg_factor)``: per box a Gaussian on its class's heatmap at its centre cell, and its
        size (in feature cells) and sub-cell offset at that cell; ``avg_factor`` the number
        of peaks (at least 1)."""
        img_h, img_w = img_shape[:2]
        bs, _, feat_h, feat_w = feat_shape
        width_ratio = float(feat_w / img_w)
        height_ratio = float(feat_h / img_h)
        heatmap = gt_bboxes[-1].new_zeros([bs, self.num_classes, feat_h, feat_w])
        wh_target = gt_bboxes[-1].new_zeros([bs, 2, feat_h, feat_w])
        offset_target = gt_bboxes[-1].new_zeros([bs, 2, feat_h, feat_w])
        weight = gt_bboxes[-1].new_zeros([bs, 2, feat_h, feat_w])
        for i, (boxes, labels) in enumerate(zip(gt_bboxes, gt_labels)):
            cx = (boxes[:, [0]] + boxes[:, [2]]) * width_ratio / 2
            cy = (boxes[:, [1]] + boxes[:, [3]]) * height_ratio / 2
            for j, ct in enumerate(torch.cat((cx, cy), dim=1)):
                cx_int, cy_int = ct.int()
                box_h = (boxes[j][3] - boxes[j][1]) * height_ratio
                box_w = (boxes[j][2] - boxes[j][0]) * width_ratio
                radius = max(0, int(gaussian_radius([box_h, box_w], min_overlap=0.3)))
                gen_gaussian_target(heatmap[i, labels[j]], [cx_int, cy_int], radius)
                wh_target[i, 0, cy_int, cx_int] = box_w
                wh_target[i, 1, cy_int, cx_int] = box_h
                offset_target[i, 0, cy_int, cx_int] = ct[0] - cx_int
                offset_target[i, 1, cy_int, cx_int] = ct[1] - cy_int
                weight[i, :, cy_int, cx_int] = 1
        avg_factor = max(1, heatmap.eq(1).sum())
        return dict(center_heatmap_target=heatmap, wh_target=wh_target,
                    offset_target=offset_target, wh_offset_target_weight=weight), avg_factor

    @force_fp32(apply_to=('center_heatmap_preds', 'wh_preds', 'offset_preds'))
    def get_bboxes(self, center_heatmap_preds, wh_preds, offset_preds, img_metas,
                   rescale=True, with_nms=False):
        """Per image ``(det_bboxes [topk, 5], det_labels [topk])`` (mmdet's defaults:
        ``rescale=True``, no NMS)."""
        if not len(center_heatmap_preds) == len(wh_preds) == len(offset_preds) == 1:
            raise ValueError(f'CenterNetHead predicts on one feature map, got '
                             f'{len(center_heatmap_preds)}')
        return [self._get_bboxes_single(center_heatmap_preds[0][i:i + 1],
                                        wh_preds[0][i:i + 1], offset_preds[0][i:i + 1],
                                        meta, rescale=rescale, with_nms=with_nms)
                for i, meta in enumerate(img_metas)]

    def _get_bboxes_single(self, center_heatmap_pred, wh_pred, offset_pred, img_meta,
                           rescale=False, with_nms=True):
        cfg = self.test_cfg
        if cfg is None:
            raise ValueError('CenterNetHead needs test_cfg (topk, local_maximum_kernel, '
                             'max_per_img) to predict boxes')
        bboxes, labels = self.decode_heatmap(
            center_heatmap_pred, wh_pred, offset_pred, img_meta['batch_input_shape'],
            k=cfg_get(cfg, 'topk', 100), kernel=cfg_get(cfg, 'local_maximum_kernel', 3))
        det_bboxes, det_labels = bboxes.view([-1, 5]), labels.view(-1)
        border = img_meta.get('border')
        if border is not None:
            det_bboxes[..., :4] -= det_bboxes.new_tensor(border)[..., [2, 0, 2, 0]]
        if rescale:
            det_bboxes[..., :4] /= det_bboxes.new_tensor(img_meta['scale_factor'])
        if with_nms:
            det_bboxes, det_labels = self._bboxes_nms(det_bboxes, det_labels, cfg)
        return det_bboxes, det_labels

    def decode_heatmap(self, center_heatmap_pred, wh_pred, offset_pred, img_shape, k=100,
                       kernel=3):
        """``(boxes [B, k, 5] in input pixels, labels [B, k])`` of the ``k`` best local
        maxima: centre cell plus offset, plus and minus half the size, scaled by the input /
        feature ratio."""
        height, width = center_heatmap_pred.shape[2:]
        inp_h, inp_w = img_shape[:2]
        heat = get_local_maximum(center_heatmap_pred, kernel=kernel)
        scores, index, labels, ys, xs = get_topk_from_heatmap(heat, k=k)
        wh = transpose_and_gather_feat(wh_pred, index)
        offset = transpose_and_gather_feat(offset_pred, index)
        xs = xs + offset[..., 0]
        ys = ys + offset[..., 1]
        boxes = torch.stack([(xs - wh[..., 0] / 2) * (inp_w / width),
                             (ys - wh[..., 1] / 2) * (inp_h / height),
                             (xs + wh[..., 0] / 2) * (inp_w / width),
                             (ys + wh[..., 1] / 2) * (inp_h / height)], dim=2)
        return torch.cat((boxes, scores[..., None]), dim=-1), labels

    def _bboxes_nms(self, bboxes, labels, cfg):
        """Class-wise NMS with ``cfg.nms``, the ``max_per_img`` best. mmdet kept every label
        when ``max_per_img <= 0`` (labels no longer matching the boxes); ours keeps those of
        the kept boxes."""
        if labels.numel() > 0:
            max_num = cfg_get(cfg, 'max_per_img', -1)
            bboxes, keep = batched_nms(bboxes[:, :4], bboxes[:, -1].contiguous(), labels,
                                       cfg_get(cfg, 'nms'))
            labels = labels[keep]
            if max_num > 0:
                bboxes, labels = bboxes[:max_num], labels[:max_num]
        return bboxes, labels

    def aug_test(self, feats, img_metas, rescale=False):
        raise NotImplementedError('CenterNet averages a flipped pair of feature maps: use '
                                  "the CenterNet detector's aug_test")
