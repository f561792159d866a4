# Minutes on a CPU: a slim Cascade Mask R-CNN (ResNet-18 at half width, with_cp=True, three
# stages of box and mask heads) trained from scratch on the generated COCO-format dataset of
# shapes with polygon masks (data/synthetic_coco, written on first use), read by the real
# CocoDataset with multi-scale training and evaluated with COCOeval (bbox_mAP and segm_mAP).
_base_ = [
    '../_base_/models/cascade_mask_rcnn_r50_fpn.py', '../_base_/datasets/coco_instance.py',
    '../_base_/default_runtime.py'
]
classes = ('circle', 'square', 'triangle')
data_root = 'data/synthetic_coco/'
synthetic_data = dict(format='coco', root=data_root, num_train=256, num_val=64,
                      img_size=((96, 128), (96, 128)), classes=classes, seed=0)

model = dict(
    backbone=dict(depth=18, base_channels=32, frozen_stages=-1, norm_eval=False,
                  zero_init_residual=False, with_cp=True, init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=64),
    rpn_head=dict(in_channels=64, feat_channels=64, anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=64),
        bbox_head=[
            dict(
                type='Shared2FCBBoxHead',
                in_channels=64,
                fc_out_channels=256,
                roi_feat_size=7,
                num_classes=len(classes),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                                target_stds=stds),
                reg_class_agnostic=True,
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))
            for stds in ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1],
                         [0.033, 0.033, 0.067, 0.067])
        ],
        mask_roi_extractor=dict(out_channels=64),
        mask_head=dict(num_convs=2, in_channels=64, conv_out_channels=64,
                       num_classes=len(classes))),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=256),
        rcnn=[
            dict(
                assigner=dict(type='MaxIoUAssigner', pos_iou_thr=thr, neg_iou_thr=thr,
                              min_pos_iou=thr, match_low_quality=False, ignore_iof_thr=-1),
                sampler=dict(type='RandomSampler', num=128, pos_fraction=0.25, neg_pos_ub=-1,
                             add_gt_as_proposals=True),
                mask_size=28,
                pos_weight=-1,
                debug=False) for thr in (0.5, 0.6, 0.7)
        ]),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100)))

img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', img_scale=[(160, 96), (160, 112), (160, 128)],
         multiscale_mode='value', keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiScaleFlipAug',
        img_scale=(160, 128),
        flip=False,
        transforms=[
            dict(type='Resize', keep_ratio=True),
            dict(type='RandomFlip'),
            dict(type='Normalize', **img_norm_cfg),
            dict(type='Pad', size_divisor=32),
            dict(type='ImageToTensor', keys=['img']),
            dict(type='Collect', keys=['img']),
        ])
]
val_data = dict(type='CocoDataset', classes=classes,
                ann_file=data_root + 'annotations/instances_val2017.json',
                img_prefix=data_root + 'val2017/', pipeline=test_pipeline, samples_per_gpu=8)
data = dict(
    samples_per_gpu=8,
    workers_per_gpu=0,
    train=dict(classes=classes, ann_file=data_root + 'annotations/instances_train2017.json',
               img_prefix=data_root + 'train2017/', pipeline=train_pipeline),
    val=val_data,
    test=val_data)

optimizer = dict(type='AdamW', lr=0.001, weight_decay=0.0001)
optimizer_config = dict(grad_clip=dict(max_norm=35, norm_type=2))
lr_config = dict(policy='step', warmup='linear', warmup_iters=100, warmup_ratio=0.01,
                 step=[9, 11])
runner = dict(type='EpochBasedRunner', max_epochs=12)
evaluation = dict(interval=4, metric=['bbox', 'segm'], save_best='auto')
checkpoint_config = dict(interval=4, max_keep_ckpts=2)
log_config = dict(interval=16, hooks=[dict(type='TextLoggerHook')])
seed = 0
