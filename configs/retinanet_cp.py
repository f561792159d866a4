# The headline command: `python tools/train.py configs/retinanet_cp.py`.
# RetinaNet with a checkpointed ResNet-18 (BasicBlock, with_cp=True) and FPN, trained from
# scratch on a generated VOC-format dataset of simple shapes (written to data/synthetic_voc on
# first use, read through the real VOCDataset), evaluated with VOC mAP@0.5.
# Sized to finish in minutes on a 2-core CPU; see README for the real-VOC R50 configs.
_base_ = ['./_base_/default_runtime.py']

classes = ('circle', 'square', 'triangle')
synthetic_data = dict(root='data/synthetic_voc', num_trainval=512, num_test=128,
                      img_size=((96, 128), (96, 128)), classes=classes, seed=0)
data_root = 'data/synthetic_voc/VOCdevkit/'

model = dict(
    type='RetinaNet',
    backbone=dict(
        type='ResNet',
        depth=18,
        base_channels=32,
        out_indices=(0, 1, 2, 3),
        frozen_stages=-1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        zero_init_residual=False,
        with_cp=True),
    neck=dict(
        type='FPN',
        in_channels=[32, 64, 128, 256],
        out_channels=64,
        start_level=1,
        add_extra_convs='on_input',
        num_outs=5),
    bbox_head=dict(
        type='RetinaHead',
        num_classes=len(classes),
        in_channels=64,
        stacked_convs=2,
        feat_channels=64,
        anchor_generator=dict(
            type='AnchorGenerator',
            octave_base_scale=2,
            scales_per_octave=3,
            ratios=[0.5, 1.0, 2.0],
            strides=[8, 16, 32, 64, 128]),
        bbox_coder=dict(
            type='DeltaXYWHBBoxCoder',
            target_means=[.0, .0, .0, .0],
            target_stds=[1.0, 1.0, 1.0, 1.0]),
        loss_cls=dict(
            type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25, loss_weight=1.0),
        loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
    train_cfg=dict(
        assigner=dict(
            type='MaxIoUAssigner',
            pos_iou_thr=0.5,
            neg_iou_thr=0.4,
            min_pos_iou=0,
            ignore_iof_thr=-1),
        allowed_border=-1,
        pos_weight=-1,
        debug=False),
    test_cfg=dict(
        nms_pre=1000,
        min_bbox_size=0,
        score_thr=0.05,
        nms=dict(type='nms', iou_threshold=0.5),
        max_per_img=100))

img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=(128, 128), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiScaleFlipAug',
        img_scale=(128, 128),
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
data = dict(
    samples_per_gpu=8,
    workers_per_gpu=0,
    train=dict(
        type='VOCDataset',
        classes=classes,
        ann_file=data_root + 'VOC2007/ImageSets/Main/trainval.txt',
        img_prefix=data_root + 'VOC2007/',
        pipeline=train_pipeline),
    val=dict(
        type='VOCDataset',
        classes=classes,
        ann_file=data_root + 'VOC2007/ImageSets/Main/test.txt',
        img_prefix=data_root + 'VOC2007/',
        pipeline=test_pipeline,
        samples_per_gpu=8),
    test=dict(
        type='VOCDataset',
        classes=classes,
        ann_file=data_root + 'VOC2007/ImageSets/Main/test.txt',
        img_prefix=data_root + 'VOC2007/',
        pipeline=test_pipeline,
        samples_per_gpu=8))

# from scratch, AdamW learns this in a few epochs (SGD at lr 0.02 reached mAP 0.18 in 12)
optimizer = dict(type='AdamW', lr=0.001, weight_decay=0.0001)
optimizer_config = dict(grad_clip=dict(max_norm=35, norm_type=2))
lr_config = dict(policy='step', warmup='linear', warmup_iters=100, warmup_ratio=0.01,
                 step=[9, 11])
runner = dict(type='EpochBasedRunner', max_epochs=12)
evaluation = dict(interval=4, metric='mAP')
checkpoint_config = dict(interval=4, max_keep_ckpts=2)
log_config = dict(interval=16, hooks=[dict(type='TextLoggerHook')])
seed = 0
