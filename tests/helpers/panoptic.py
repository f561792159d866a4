"""A tiny Panoptic FPN (mmdet's panoptic_fpn_r50_fpn_1x_coco schema, ResNet-18 / 8 base
channels, 16-channel FPN, 3 thing and 2 stuff classes) and a hand-made batch with its
per-pixel ``gt_semantic_seg``, shared by the panoptic tests and the audit against mmdet."""
import numpy as np
import torch

from tests.helpers.detectors import img_meta

NUM_THINGS, NUM_STUFF = 3, 2


def _assigner(thr, low=None):
    return dict(type='MaxIoUAssigner', pos_iou_thr=thr, neg_iou_thr=thr if low is None else low,
                min_pos_iou=thr if low is None else low, match_low_quality=True,
                ignore_iof_thr=-1)


def panoptic_fpn_cfg(feat=16, fc=32, inner=8, num_groups=4, start_level=0, end_level=4,
                     with_cp=False, norm_cfg='GN', score_thr=0.0, stuff_area_limit=16):
    """The model dict; ``norm_cfg='GN'`` gives the semantic head GroupNorm (as the configs)."""
    seg_norm = dict(type='GN', num_groups=num_groups, requires_grad=True) \
        if norm_cfg == 'GN' else norm_cfg
    roi_extractor = dict(type='SingleRoIExtractor', out_channels=feat,
                         featmap_strides=[4, 8, 16, 32])
    semantic_head = dict(type='PanopticFPNHead', num_things_classes=NUM_THINGS,
                         num_stuff_classes=NUM_STUFF, in_channels=feat, inner_channels=inner,
                         start_level=start_level, end_level=end_level, norm_cfg=seg_norm,
                         conv_cfg=None,
                         loss_seg=dict(type='CrossEntropyLoss', ignore_index=255,
                                       loss_weight=0.5))
    if with_cp:
        semantic_head['with_cp'] = True
    return dict(
        type='PanopticFPN',
        backbone=dict(type='ResNet', depth=18, base_channels=8, num_stages=4,
                      out_indices=(0, 1, 2, 3), frozen_stages=-1,
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', zero_init_residual=False),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=feat, num_outs=5),
        rpn_head=dict(type='RPNHead', in_channels=feat, feat_channels=feat,
                      anchor_generator=dict(type='AnchorGenerator', scales=[2],
                                            ratios=[0.5, 1.0, 2.0], strides=[4, 8, 16, 32, 64]),
                      bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                                      target_stds=[1.0] * 4),
                      loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                      loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        roi_head=dict(
            type='StandardRoIHead',
            bbox_roi_extractor=dict(roi_extractor, roi_layer=dict(type='RoIAlign', output_size=7,
                                                                  sampling_ratio=0)),
            bbox_head=dict(type='Shared2FCBBoxHead', in_channels=feat, fc_out_channels=fc,
                           roi_feat_size=7, num_classes=NUM_THINGS,
                           bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                                           target_stds=[0.1, 0.1, 0.2, 0.2]),
                           reg_class_agnostic=False,
                           loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                         loss_weight=1.0),
                           loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
            mask_roi_extractor=dict(roi_extractor, roi_layer=dict(type='RoIAlign',
                                                                  output_size=14,
                                                                  sampling_ratio=0)),
            mask_head=dict(type='FCNMaskHead', num_convs=2, in_channels=feat,
                           conv_out_channels=feat, num_classes=NUM_THINGS,
                           loss_mask=dict(type='CrossEntropyLoss', use_mask=True,
                                          loss_weight=1.0))),
        semantic_head=semantic_head,
        panoptic_fusion_head=dict(type='HeuristicFusionHead', num_things_classes=NUM_THINGS,
                                  num_stuff_classes=NUM_STUFF),
        train_cfg=dict(
            rpn=dict(assigner=_assigner(0.7, 0.3),
                     sampler=dict(type='RandomSampler', num=64, pos_fraction=0.5,
                                  neg_pos_ub=-1, add_gt_as_proposals=False),
                     allowed_border=-1, pos_weight=-1, debug=False),
            rpn_proposal=dict(nms_pre=200, max_per_img=100, nms=dict(type='nms',
                                                                    iou_threshold=0.7),
                              min_bbox_size=0),
            rcnn=dict(assigner=_assigner(0.5),
                      sampler=dict(type='RandomSampler', num=32, pos_fraction=0.25,
                                   neg_pos_ub=-1, add_gt_as_proposals=True),
                      mask_size=28, pos_weight=-1, debug=False)),
        test_cfg=dict(
            rpn=dict(nms_pre=200, max_per_img=50, nms=dict(type='nms', iou_threshold=0.7),
                     min_bbox_size=0),
            rcnn=dict(score_thr=0.05, nms=dict(type='nms', iou_threshold=0.5), max_per_img=100,
                      mask_thr_binary=0.5),
            panoptic=dict(score_thr=score_thr, max_per_img=10, mask_thr_binary=0.5,
                          mask_overlap=0.5, nms=dict(type='nms', iou_threshold=0.5,
                                                     class_agnostic=True),
                          stuff_area_limit=stuff_area_limit)))


BOXES = [[[8., 10., 40., 50.], [30., 4., 60., 30.]], [[5., 5., 52., 52.]]]
LABELS = [[0, 2], [1]]


def gt_semantic_seg():
    """(2, 1, 64, 64) uint8-valued labels: stuff 3 / 4 in bands, the things' boxes over them,
    a 255 (ignored) strip."""
    seg = torch.full((2, 1, 64, 64), NUM_THINGS, dtype=torch.long)
    seg[:, :, 32:] = NUM_THINGS + 1
    for i, (boxes, labels) in enumerate(zip(BOXES, LABELS)):
        for (x1, y1, x2, y2), label in zip(boxes, labels):
            seg[i, 0, int(y1):int(y2), int(x1):int(x2)] = label
    seg[:, :, :, 62:] = 255
    return seg


def panoptic_batch(mask_cls):
    """The training batch; ``mask_cls`` is the BitmapMasks class (ours or mmdet's)."""
    g = torch.Generator().manual_seed(0)
    masks = []
    for boxes in BOXES:
        m = np.zeros((len(boxes), 64, 64), dtype=np.uint8)
        for j, (x1, y1, x2, y2) in enumerate(boxes):
            m[j, int(y1) + 2:int(y2) - 2, int(x1) + 1:int(x2) - 1] = 1
        masks.append(mask_cls(m, 64, 64))
    return dict(img=torch.randn(2, 3, 64, 64, generator=g),
                img_metas=[img_meta(), img_meta(56, 60)],
                gt_bboxes=[torch.tensor(b) for b in BOXES],
                gt_labels=[torch.tensor(lab) for lab in LABELS],
                gt_masks=masks, gt_semantic_seg=gt_semantic_seg())
