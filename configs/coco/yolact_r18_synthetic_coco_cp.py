# Minutes on a CPU: a slim YOLACT (ResNet-18 at half width, with_cp=True) trained from scratch on
# the generated COCO-format shapes (data/synthetic_coco, written on first use), with mmdet's
# yolact_r50_1x8_coco.py pipeline (Expand, MinIoURandomCrop, a square resize,
# PhotoMetricDistortion) at 128 px, evaluated with COCOeval (bbox_mAP and segm_mAP).
_base_ = [
    '../_base_/datasets/synthetic_coco_instance.py', '../_base_/schedules/synthetic_adamw_12e.py'
]
classes = ('circle', 'square', 'triangle')
img_size = 128
model = dict(
    type='YOLACT',
    backbone=dict(type='ResNet', depth=18, base_channels=32, num_stages=4,
                  out_indices=(0, 1, 2, 3), frozen_stages=-1,
                  norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                  zero_init_residual=False, style='pytorch', with_cp=True, init_cfg=None),
    neck=dict(type='FPN', in_channels=[32, 64, 128, 256], out_channels=64, start_level=1,
              add_extra_convs='on_input', num_outs=5, upsample_cfg=dict(mode='bilinear')),
    bbox_head=dict(
        type='YOLACTHead', num_classes=len(classes), in_channels=64, feat_channels=64,
        anchor_generator=dict(type='AnchorGenerator', octave_base_scale=2, scales_per_octave=1,
                              base_sizes=[8, 16, 32, 64, 128], ratios=[0.5, 1.0, 2.0],
                              strides=[img_size / x for x in [16, 8, 4, 2, 1]],
                              centers=[(img_size * 0.5 / x, img_size * 0.5 / x)
                                       for x in [16, 8, 4, 2, 1]]),
        bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                        target_stds=[0.1, 0.1, 0.2, 0.2]),
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, reduction='none',
                      loss_weight=1.0),
        loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.5),
        num_head_convs=1, num_protos=32, use_ohem=True, with_cp=True),
    mask_head=dict(type='YOLACTProtonet', in_channels=64, num_protos=32,
                   num_classes=len(classes), proto_channels=(64, 64, 64, None, 64, 32),
                   max_masks_to_train=100, loss_mask_weight=6.125, with_cp=True),
    segm_head=dict(type='YOLACTSegmHead', num_classes=len(classes), in_channels=64,
                   loss_segm=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0)),
    train_cfg=dict(
        assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4, min_pos_iou=0.,
                      ignore_iof_thr=-1, gt_max_assign_all=False),
        allowed_border=-1, pos_weight=-1, neg_pos_ratio=3, debug=False),
    test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05, iou_thr=0.5, top_k=200,
                  max_per_img=100))
img_norm_cfg = dict(mean=[123.68, 116.78, 103.94], std=[58.40, 57.12, 57.38], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(4.0, 4.0)),
    dict(type='Expand', mean=img_norm_cfg['mean'], to_rgb=img_norm_cfg['to_rgb'],
         ratio_range=(1, 2)),
    dict(type='MinIoURandomCrop', min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3),
    dict(type='Resize', img_scale=(img_size, img_size), keep_ratio=False),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='PhotoMetricDistortion', brightness_delta=32, contrast_range=(0.5, 1.5),
         saturation_range=(0.5, 1.5), hue_delta=18),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiScaleFlipAug', img_scale=(img_size, img_size), flip=False,
         transforms=[
             dict(type='Resize', keep_ratio=False),
             dict(type='Normalize', **img_norm_cfg),
             dict(type='ImageToTensor', keys=['img']),
             dict(type='Collect', keys=['img']),
         ])
]
data = dict(train=dict(pipeline=train_pipeline), val=dict(pipeline=test_pipeline),
            test=dict(pipeline=test_pipeline))
