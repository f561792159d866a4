"""mmdet 2.x ``SOLOV2Head`` and its ``MaskFeatModule`` (SOLOv2: Dynamic and Fast Instance
Segmentation, Wang et al. 2020).

A cell predicts a class and a dynamic 1x1 kernel (``conv_kernel``); the instance's mask is
that kernel applied to one unified mask feature map at stride ``mask_stride``
(``mask_feature_head``, built from the FPN levels). Keys as mmdet's (``kernel_convs``,
``cls_convs``, ``conv_kernel``, ``conv_cls``, ``mask_feature_head.convs_all_levels.*``,
``mask_feature_head.conv_pred``).

Checkpoint units: ``mask_feature_head`` (the whole unified-feature branch, run first) and
``level{i}`` (each level's kernel and class towers). Test-time masks are made for the cells
above ``score_thr`` only, chunked, as :class:`SOLOHead` (its module docstring): the dynamic
convolution of one chunk writes at most ``MASK_MEM_LIMIT`` bytes (mmdet convolved every
candidate at once).
"""
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.utils import generate_coordinate
from ...registry import MODELS
from ...runner.fp16 import force_fp32
from ..checkpointing import CheckpointUnit, unit_step
from ..utils import ConvModule, apply_init_cfg
from .solo_head import SOLOHead

__all__ = ['MaskFeatModule', 'SOLOV2Head']


class MaskFeatModule(nn.Module):
    """SOLOv2's unified mask feature branch (mmdet's, not registered there either): level
    ``i`` (from ``start_level`` to ``end_level``) goes through ``i`` conv + 2x upsample steps
    (level 0 one conv), the last level with coordinates appended; the sum goes through
    ``conv_pred`` (1x1 ConvModule) to ``out_channels``.

    Args (mmdet's): ``in_channels``, ``feat_channels``, ``start_level``, ``end_level``,
    ``out_channels``, ``mask_stride`` (the output's stride), ``conv_cfg``, ``norm_cfg``,
    ``init_cfg``. As mmcv's ``init_weights`` does, the direct child ``conv_pred`` (a
    ConvModule) is re-initialised by its own ``init_weights`` (kaiming) after ``init_cfg``;
    the convs inside ``convs_all_levels`` (plain containers) keep the ``init_cfg`` init, and
    deformable convs' ``conv_offset`` keeps it too (Normal std 0.01, not zeroed: as mmdet)."""

    def __init__(self, in_channels, feat_channels, start_level, end_level, out_channels,
                 mask_stride=4, conv_cfg=None, norm_cfg=None,
                 init_cfg=[dict(type='Normal', layer='Conv2d', std=0.01)]):
        super().__init__()
        if not (isinstance(start_level, int) and isinstance(end_level, int)
                and 0 <= start_level <= end_level):
            raise ValueError(f'MaskFeatModule needs 0 <= start_level <= end_level, got '
                             f'start_level={start_level!r}, end_level={end_level!r}')
        self.in_channels = in_channels
        self.feat_channels = feat_channels
        self.start_level = start_level
        self.end_level = end_level
        self.mask_stride = mask_stride
        self.out_channels = out_channels
        self.conv_cfg = conv_cfg
        self.norm_cfg = norm_cfg
        self.init_cfg = init_cfg
        self.fp16_enabled = False
        self._init_layers()
        apply_init_cfg(self, init_cfg)
        self.conv_pred.init_weights()

    def _conv(self, in_channels, **kwargs):
        return ConvModule(in_channels, self.feat_channels, 3, padding=1,
                          conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg, inplace=False,
                          **kwargs)

    def _init_layers(self):
        self.convs_all_levels = nn.ModuleList()
        for i in range(self.start_level, self.end_level + 1):
            level = nn.Sequential()
            if i == 0:
                level.add_module(f'conv{i}', self._conv(self.in_channels))
                self.convs_all_levels.append(level)
                continue
            for j in range(i):
                if j == 0:
                    chn = self.in_channels + 2 if i == self.end_level else self.in_channels
                else:
                    chn = self.feat_channels
                level.add_module(f'conv{j}', self._conv(chn))
                level.add_module(f'upsample{j}', nn.Upsample(scale_factor=2, mode='bilinear',
                                                             align_corners=False))
            self.convs_all_levels.append(level)
        self.conv_pred = ConvModule(self.feat_channels, self.out_channels, 1, padding=0,
                                    conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg)

    def forward(self, feats):
        """The unified mask features ``(B, out_channels, H / mask_stride, W / ...)``."""
        inputs = feats[self.start_level:self.end_level + 1]
        if len(inputs) != self.end_level - self.start_level + 1:
            raise ValueError(f'MaskFeatModule uses levels {self.start_level}..{self.end_level}'
                             f', got {len(feats)} levels')
        out = self.convs_all_levels[0](inputs[0])
        for i in range(1, len(inputs)):
            x = inputs[i]
            if i == len(inputs) - 1:
                x = torch.cat([x, generate_coordinate(x.size(), x.device).to(x.dtype)], 1)
            out = out + self.convs_all_levels[i](x)
        return self.conv_pred(out)


@MODELS.register_module()
class SOLOV2Head(SOLOHead):
    """Args (mmdet's): :class:`SOLOHead`'s (``cls_down_index`` is accepted and unused, as in
    mmdet), ``mask_feature_head`` (:class:`MaskFeatModule` args; its ``in_channels`` is this
    head's), ``dynamic_conv_size`` (only 1: mmdet's dynamic convolution has no padding, so
    a larger kernel made masks smaller than their targets and the loss failed), ``dcn_cfg``
    and ``dcn_apply_to_all_conv`` (deformable convs in every tower conv, or only the last).
    """

    def __init__(self, *args, mask_feature_head, dynamic_conv_size=1, dcn_cfg=None,
                 dcn_apply_to_all_conv=True,
                 init_cfg=[dict(type='Normal', layer='Conv2d', std=0.01),
                           dict(type='Normal', std=0.01, bias_prob=0.01,
                                override=dict(name='conv_cls'))],
                 **kwargs):
        if dcn_cfg is not None and not isinstance(dcn_cfg, dict):
            raise TypeError(f'SOLOV2Head dcn_cfg must be a dict or None, got {dcn_cfg!r}')
        if dynamic_conv_size != 1:
            raise ValueError(f'SOLOV2Head dynamic_conv_size must be 1 (its masks must match '
                             f'their targets), got {dynamic_conv_size!r}')
        if not isinstance(mask_feature_head, dict) or 'out_channels' not in mask_feature_head:
            raise ValueError('SOLOV2Head needs a mask_feature_head dict with out_channels, '
                             f'got {mask_feature_head!r}')
        self.dcn_cfg = dcn_cfg
        self.with_dcn = dcn_cfg is not None
        self.dcn_apply_to_all_conv = dcn_apply_to_all_conv
        self.dynamic_conv_size = dynamic_conv_size
        self.kernel_out_channels = mask_feature_head['out_channels'] * dynamic_conv_size ** 2
        with_cp = kwargs.pop('with_cp', False)
        cp_use_reentrant = kwargs.pop('cp_use_reentrant', False)
        super().__init__(*args, init_cfg=init_cfg, with_cp=with_cp,
                         cp_use_reentrant=cp_use_reentrant, **kwargs)
        mask_feature_head = dict(mask_feature_head)
        given = mask_feature_head.get('in_channels')
        if given is not None and given != self.in_channels:
            warnings.warn(f'mask_feature_head in_channels {given} != SOLOV2Head in_channels '
                          f'{self.in_channels}; using {self.in_channels} (as mmdet)')
        mask_feature_head['in_channels'] = self.in_channels
        self.mask_feature_head = MaskFeatModule(**mask_feature_head)
        self.mask_stride = self.mask_feature_head.mask_stride
        self.mask_feat_unit = CheckpointUnit.from_flag(with_cp, cp_use_reentrant)

    def _init_layers(self):
        self.cls_convs = nn.ModuleList()
        self.kernel_convs = nn.ModuleList()
        conv_cfg = None
        for i in range(self.stacked_convs):
            if self.with_dcn and (self.dcn_apply_to_all_conv or i == self.stacked_convs - 1):
                conv_cfg = self.dcn_cfg
            bias = self.norm_cfg is None
            self.kernel_convs.append(self._tower_conv(
                self.in_channels + 2 if i == 0 else self.feat_channels, conv_cfg, bias=bias))
            self.cls_convs.append(self._tower_conv(
                self.in_channels if i == 0 else self.feat_channels, conv_cfg, bias=bias))
        self.conv_cls = nn.Conv2d(self.feat_channels, self.cls_out_channels, 3, padding=1)
        self.conv_kernel = nn.Conv2d(self.feat_channels, self.kernel_out_channels, 3,
                                     padding=1)

    def _mask_feats(self, *inputs):
        """The mask feature branch on its levels (a unit's function: tensors in)."""
        head = self.mask_feature_head
        return head([None] * head.start_level + list(inputs))

    def _checkpoint_steps(self):
        return [[unit_step('mask_feature_head', self.mask_feat_unit, self._mask_feats,
                           self.mask_feature_head)]] + super()._checkpoint_steps()

    def forward_single(self, x, level):
        """``(kernel_pred (B, E, G, G), cls_pred (B, C, G, G))`` of one level."""
        kernel_feat = F.interpolate(self._with_coords(x), size=self.num_grids[level],
                                    mode='bilinear', align_corners=False)
        cate_feat = kernel_feat[:, :-2].contiguous()
        kernel_feat = kernel_feat.contiguous()
        for conv in self.kernel_convs:
            kernel_feat = conv(kernel_feat)
        for conv in self.cls_convs:
            cate_feat = conv(cate_feat)
        return self.conv_kernel(kernel_feat), self.conv_cls(cate_feat)

    def forward(self, feats):
        """``(mlvl_kernel_preds, mlvl_cls_preds, mask_feats)``, logits, train and test."""
        self._check_levels(feats)
        head = self.mask_feature_head
        mask_feats = self.mask_feat_unit(self._mask_feats,
                                         *feats[head.start_level:head.end_level + 1],
                                         module=head)
        kernel_preds, cls_preds = super(SOLOHead, self).forward(self.resize_feats(feats))
        return kernel_preds, cls_preds, mask_feats

    def _get_targets_single(self, gt_bboxes, gt_labels, gt_masks, featmap_size=None):
        """mmdet's: per level the mask targets ``(n, h, w)`` and cell indices (a list) of the
        positive cells in assignment order (a cell two instances hit appears twice, as in
        mmdet), the labels ``(G, G)`` and the positive cells ``(G*G,)`` bool."""
        upsampled_size = (featmap_size[0] * self.mask_stride,
                          featmap_size[1] * self.mask_stride)
        assigned = self._assign_single(gt_bboxes, gt_labels, gt_masks,
                                       lambda lvl: featmap_size, upsampled_size,
                                       lambda lvl: 1. / self.mask_stride)
        targets, mlvl_labels, pos_masks, pos_indexes = [], [], [], []
        for (labels, hits), num_grid in zip(assigned, self.num_grids):
            pos_mask = torch.zeros(num_grid**2, dtype=torch.bool, device=gt_labels.device)
            index = [cell for cell, _ in hits]
            pos_mask[index] = True
            targets.append(torch.stack([t for _, t in hits]) if hits else
                           torch.zeros((0, *featmap_size), dtype=torch.uint8,
                                       device=gt_labels.device))
            mlvl_labels.append(labels)
            pos_masks.append(pos_mask)
            pos_indexes.append(index)
        return targets, mlvl_labels, pos_masks, pos_indexes

    @force_fp32(apply_to=('mlvl_kernel_preds', 'mlvl_cls_preds', 'mask_feats'))
    def loss(self, mlvl_kernel_preds, mlvl_cls_preds, mask_feats, gt_labels, gt_masks,
             img_metas, gt_bboxes=None, **kwargs):
        """``dict(loss_mask, loss_cls)``: the dice loss of each positive (cell, instance)
        pair's dynamic mask, summed over the positive cells' count (zero times the features
        without any), and the focal loss over positives + 1."""
        featmap_size = mask_feats.size()[-2:]
        if gt_bboxes is None:
            raise ValueError('SOLOV2Head needs gt_bboxes (their sizes pick the levels); the '
                             'pipeline must collect them')
        per_img = [self._get_targets_single(b, lab, m, featmap_size)
                   for b, lab, m in zip(gt_bboxes, gt_labels, gt_masks)]
        targets, labels, pos_masks, pos_indexes = (list(x) for x in zip(*per_img))
        num_imgs = len(gt_labels)
        h, w = featmap_size
        loss_mask = []
        for lvl in range(self.num_levels):
            preds = []
            for img in range(num_imgs):
                index = pos_indexes[img][lvl]
                if not index:
                    continue
                kernels = mlvl_kernel_preds[lvl][img].reshape(self.kernel_out_channels, -1)
                kernels = kernels[:, index].permute(1, 0).reshape(len(index), -1, 1, 1)
                preds.append(F.conv2d(mask_feats[[img]], kernels, stride=1).view(-1, h, w))
            if preds:
                target = torch.cat([targets[img][lvl] for img in range(num_imgs)])
                loss_mask.append(self.loss_mask(torch.cat(preds), target,
                                                reduction_override='none'))
        num_pos = 0
        for img in range(num_imgs):
            for lvl in range(self.num_levels):
                num_pos += pos_masks[img][lvl].count_nonzero()
        if num_pos > 0:
            loss_mask = torch.cat(loss_mask).sum() / num_pos
        else:
            loss_mask = mask_feats.sum() * 0
        return dict(loss_mask=loss_mask, loss_cls=self._loss_cls(mlvl_cls_preds, labels,
                                                                 num_pos))

    @force_fp32(apply_to=('mlvl_kernel_preds', 'mlvl_cls_scores', 'mask_feats'))
    def get_results(self, mlvl_kernel_preds, mlvl_cls_scores, mask_feats, img_metas,
                    rescale=True, cfg=None, **kwargs):
        """Per image ``dict(scores, labels, masks)`` as :meth:`SOLOHead.get_results`."""
        cfg = self._test_cfg(cfg)
        cls_scores_lvls = [self._local_max(s).permute(0, 2, 3, 1) for s in mlvl_cls_scores]
        featmap_size = tuple(mask_feats.shape[-2:])
        results = []
        for img_id, meta in enumerate(img_metas):
            cls_scores = torch.cat([s[img_id].reshape(-1, self.num_classes)
                                    for s in cls_scores_lvls])
            kernels = torch.cat([k[img_id].permute(1, 2, 0).reshape(-1, self.kernel_out_channels)
                                 for k in mlvl_kernel_preds])
            feats = mask_feats[[img_id]]

            def mask_fn(points, kernels=kernels, feats=feats):
                weight = kernels[points].view(len(points), -1, self.dynamic_conv_size,
                                              self.dynamic_conv_size)
                return F.conv2d(feats, weight, stride=1)[0].sigmoid()
            results.append(self._results_single(cls_scores, mask_fn, featmap_size,
                                                self.mask_stride, meta, cfg, rescale))
        return results
