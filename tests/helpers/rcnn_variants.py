"""Tiny configs of the R-CNN variants (Mask Scoring, C4 shared head, Fast R-CNN), written
after mmdet 2.28.2's ``ms_rcnn_r50_caffe_fpn``, ``faster/mask_rcnn_r50_caffe_c4`` and
``fast_rcnn_r50_fpn`` configs with their sizes as arguments, and a batch with masks."""
import copy

import numpy as np
import torch

from ckptzoo.core.mask import PolygonMasks

from .detectors import RPN_TEST_CFG, RPN_TRAIN_CFG, img_meta, rpn_head_cfg

POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]


def _rcnn_train(num=32, **kw):
    return dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                              min_pos_iou=0.5, match_low_quality=False, ignore_iof_thr=-1),
                sampler=dict(type='RandomSampler', num=num, pos_fraction=0.25, neg_pos_ub=-1,
                             add_gt_as_proposals=True), pos_weight=-1, debug=False, **kw)


def _rcnn_test(**kw):
    return dict(score_thr=0.05, nms=dict(type='nms', iou_threshold=0.5), max_per_img=100, **kw)


def _rpn_proposal():
    return dict(nms_pre=200, max_per_img=100, nms=dict(type='nms', iou_threshold=0.7),
                min_bbox_size=0)


def _bbox_head(feat=16, fc=32, num_classes=3, **kw):
    head = dict(type='Shared2FCBBoxHead', in_channels=feat, fc_out_channels=fc,
                roi_feat_size=7, num_classes=num_classes,
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                                target_stds=[0.1, 0.1, 0.2, 0.2]),
                reg_class_agnostic=False,
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                loss_bbox=dict(type='L1Loss', loss_weight=1.0))
    head.update(kw)
    return head


def _extractor(size, feat=16, strides=(4, 8, 16, 32)):
    return dict(type='SingleRoIExtractor',
                roi_layer=dict(type='RoIAlign', output_size=size, sampling_ratio=0),
                out_channels=feat, featmap_strides=list(strides))


def _fpn_backbone(feat=16):
    return dict(backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                              norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                              style='caffe', zero_init_residual=False),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=feat,
                          num_outs=5))


def ms_rcnn_cfg(num_classes=3, feat=16):
    """ms_rcnn_r50_caffe_fpn_1x_coco.py, tiny."""
    return dict(
        type='MaskScoringRCNN', **_fpn_backbone(feat),
        rpn_head=rpn_head_cfg(feat),
        roi_head=dict(
            type='MaskScoringRoIHead',
            mask_iou_head=dict(type='MaskIoUHead', num_convs=2, num_fcs=2, roi_feat_size=14,
                               in_channels=feat, conv_out_channels=feat, fc_out_channels=32,
                               num_classes=num_classes),
            bbox_roi_extractor=_extractor(7, feat), bbox_head=_bbox_head(feat, 32, num_classes),
            mask_roi_extractor=_extractor(14, feat),
            mask_head=dict(type='FCNMaskHead', num_convs=2, in_channels=feat,
                           conv_out_channels=feat, num_classes=num_classes,
                           loss_mask=dict(type='CrossEntropyLoss', use_mask=True,
                                          loss_weight=1.0))),
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, sampler=dict(RPN_TRAIN_CFG['sampler'], num=64)),
                       rpn_proposal=_rpn_proposal(),
                       rcnn=_rcnn_train(mask_size=28, mask_thr_binary=0.5)),
        test_cfg=dict(rpn=RPN_TEST_CFG, rcnn=_rcnn_test(mask_thr_binary=0.5)))


def c4_cfg(with_mask=False, num_classes=3, stride=2):
    """faster_rcnn_r50_caffe_c4.py / mask_rcnn_r50_caffe_c4.py with a ResNet-18 (base 64, so
    the shared ``layer4`` fits the backbone's 256 channels), BN trained."""
    norm_cfg = dict(type='BN', requires_grad=True)
    roi_head = dict(
        type='StandardRoIHead',
        shared_head=dict(type='ResLayer', depth=18, stage=3, stride=stride, dilation=1,
                         style='caffe', norm_cfg=norm_cfg, norm_eval=False),
        bbox_roi_extractor=_extractor(14, 256, (16, )),
        bbox_head=dict(type='BBoxHead', with_avg_pool=True, roi_feat_size=7, in_channels=512,
                       num_classes=num_classes,
                       bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                                       target_stds=[0.1, 0.1, 0.2, 0.2]),
                       reg_class_agnostic=False,
                       loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                     loss_weight=1.0),
                       loss_bbox=dict(type='L1Loss', loss_weight=1.0)))
    if with_mask:
        roi_head.update(mask_roi_extractor=None, mask_head=dict(
            type='FCNMaskHead', num_convs=0, in_channels=512, conv_out_channels=16,
            num_classes=num_classes,
            loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0)))
    rpn = rpn_head_cfg(32)
    rpn.update(in_channels=256, anchor_generator=dict(
        type='AnchorGenerator', scales=[2, 4, 8], ratios=[0.5, 1.0, 2.0], strides=[16]))
    return dict(
        type='MaskRCNN' if with_mask else 'FasterRCNN',
        backbone=dict(type='ResNet', depth=18, num_stages=3, strides=(1, 2, 2),
                      dilations=(1, 1, 1), out_indices=(2, ), frozen_stages=1,
                      norm_cfg=norm_cfg, norm_eval=False, style='caffe',
                      zero_init_residual=False),
        rpn_head=rpn, roi_head=roi_head,
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, sampler=dict(RPN_TRAIN_CFG['sampler'], num=64)),
                       rpn_proposal=_rpn_proposal(),
                       rcnn=_rcnn_train(num=16, **(dict(mask_size=14) if with_mask else {}))),
        test_cfg=dict(rpn=RPN_TEST_CFG,
                      rcnn=_rcnn_test(**(dict(mask_thr_binary=0.5) if with_mask else {}))))


def fast_rcnn_cfg(num_classes=3, feat=16):
    """fast_rcnn_r50_fpn.py, tiny: no rpn_head, the proposals come with the batch."""
    return dict(type='FastRCNN', **_fpn_backbone(feat),
                roi_head=dict(type='StandardRoIHead', bbox_roi_extractor=_extractor(7, feat),
                              bbox_head=_bbox_head(feat, 32, num_classes)),
                train_cfg=dict(rcnn=_rcnn_train()), test_cfg=dict(rcnn=_rcnn_test()))


def masks_batch(with_mask=True, proposals=False):
    g = torch.Generator().manual_seed(0)
    batch = dict(img=torch.randn(2, 3, 64, 64, generator=g),
                 img_metas=[img_meta(), img_meta(56, 60)],
                 gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                            torch.tensor([[5., 5., 52., 52.]])],
                 gt_labels=[torch.tensor([0, 2]), torch.tensor([1])])
    if with_mask:
        batch['gt_masks'] = [PolygonMasks(p, 64, 64) for p in POLYGONS]
    if proposals:
        batch['proposals'] = [torch.tensor([[6., 8., 42., 48.], [28., 2., 62., 33.],
                                            [0., 0., 30., 30.], [10., 30., 60., 60.]]),
                              torch.tensor([[4., 6., 50., 50.], [20., 20., 40., 40.]])]
    return batch


def train_step(model, batch, seed=7):
    """Seeded train step and backward: ``(log_vars, grads by name, buffers by name)``."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}
