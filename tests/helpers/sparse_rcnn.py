"""Tiny Sparse R-CNN / QueryInst configs (mmdet 2.x schema) and batches for their tests."""
import copy

import numpy as np
import torch

from tests.helpers.detectors import img_meta, resnet_cfg

POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]


def dii_head_cfg(num_classes=3, feat=16, dropout=0.0, **kw):
    return dict(type='DIIHead', num_classes=num_classes, num_ffn_fcs=2, num_heads=2,
                num_cls_fcs=1, num_reg_fcs=3, feedforward_channels=32, in_channels=feat,
                dropout=dropout, ffn_act_cfg=dict(type='ReLU', inplace=True),
                dynamic_conv_cfg=dict(type='DynamicConv', in_channels=feat, feat_channels=8,
                                      out_channels=feat, input_feat_shape=7,
                                      act_cfg=dict(type='ReLU', inplace=True),
                                      norm_cfg=dict(type='LN')),
                loss_bbox=dict(type='L1Loss', loss_weight=5.0),
                loss_iou=dict(type='GIoULoss', loss_weight=2.0),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                              loss_weight=2.0),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', clip_border=False,
                                target_means=[0., 0., 0., 0.], target_stds=[0.5, 0.5, 1., 1.]),
                **kw)


def dynamic_mask_head_cfg(num_classes=3, feat=16, **kw):
    return dict(type='DynamicMaskHead',
                dynamic_conv_cfg=dict(type='DynamicConv', in_channels=feat, feat_channels=8,
                                      out_channels=feat, input_feat_shape=14, with_proj=False,
                                      act_cfg=dict(type='ReLU', inplace=True),
                                      norm_cfg=dict(type='LN')),
                num_convs=2, num_classes=num_classes, roi_feat_size=14, in_channels=feat,
                conv_kernel_size=3, conv_out_channels=feat, class_agnostic=False,
                norm_cfg=dict(type='BN'), upsample_cfg=dict(type='deconv', scale_factor=2),
                loss_mask=dict(type='DiceLoss', loss_weight=8.0, use_sigmoid=True,
                               activate=False, eps=1e-5), **kw)


def sparse_cfg(num_classes=3, feat=16, num_proposals=8, num_stages=2, with_mask=False,
               dropout=0.0, loss_weights=None):
    """SparseRCNN (or with ``with_mask`` QueryInst) on a ResNet-18 of 8 base channels."""
    extractor = dict(type='SingleRoIExtractor',
                     roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=2),
                     out_channels=feat, featmap_strides=[4, 8, 16, 32])
    roi_head = dict(type='SparseRoIHead', num_stages=num_stages,
                    stage_loss_weights=loss_weights or [1] * num_stages,
                    proposal_feature_channel=feat, bbox_roi_extractor=extractor,
                    bbox_head=[dii_head_cfg(num_classes, feat, dropout)
                               for _ in range(num_stages)])
    rcnn = dict(assigner=dict(type='HungarianAssigner',
                              cls_cost=dict(type='FocalLossCost', weight=2.0),
                              reg_cost=dict(type='BBoxL1Cost', weight=5.0),
                              iou_cost=dict(type='IoUCost', iou_mode='giou', weight=2.0)),
                sampler=dict(type='PseudoSampler'), pos_weight=1)
    test = dict(max_per_img=num_proposals)
    if with_mask:
        roi_head['mask_roi_extractor'] = dict(
            extractor, roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=2))
        roi_head['mask_head'] = [dynamic_mask_head_cfg(num_classes, feat)
                                 for _ in range(num_stages)]
        rcnn['mask_size'] = 28
        test['mask_thr_binary'] = 0.5
    return dict(type='QueryInst' if with_mask else 'SparseRCNN',
                backbone=resnet_cfg(),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=feat,
                          start_level=0, add_extra_convs='on_input', num_outs=4),
                rpn_head=dict(type='EmbeddingRPNHead', num_proposals=num_proposals,
                              proposal_feature_channel=feat),
                roi_head=roi_head,
                train_cfg=dict(rpn=None, rcnn=[copy.deepcopy(rcnn) for _ in range(num_stages)]),
                test_cfg=dict(rpn=None, rcnn=test))


def sparse_batch(mask_cls=None):
    """Two images (64x64 and 56x60 in a 64x64 pad); ``mask_cls`` (BitmapMasks of ckptzoo or
    mmdet) adds the masks of ``POLYGONS``."""
    g = torch.Generator().manual_seed(0)
    batch = dict(img=torch.randn(2, 3, 64, 64, generator=g),
                 img_metas=[img_meta(), img_meta(56, 60)],
                 gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                            torch.tensor([[5., 5., 52., 52.]])],
                 gt_labels=[torch.tensor([0, 2]), torch.tensor([1])])
    if mask_cls is not None:
        from ckptzoo.core.mask import PolygonMasks
        arrays = [PolygonMasks(p, 64, 64).to_ndarray() for p in POLYGONS]
        batch['gt_masks'] = [mask_cls(m, 64, 64) for m in arrays]
    return batch
