# The headline command: `python tools/train.py configs/retinanet_cp.py`.
# RetinaNet (mmdet 2.x's retinanet_r50_fpn base) with a checkpointed ResNet-18 (BasicBlock,
# with_cp=True) and a slim FPN / head, trained from scratch on a generated VOC-format dataset of
# simple shapes (written to data/synthetic_voc on first use, read through the real VOCDataset
# and the voc0712 pipeline at 128 px), evaluated with VOC mAP@0.5.
# Sized to finish in minutes on a 2-core CPU; see README for the real-VOC R50 configs.
_base_ = [
    './_base_/models/retinanet_r50_fpn.py', './_base_/datasets/voc0712.py',
    './_base_/default_runtime.py'
]

classes = ('circle', 'square', 'triangle')
synthetic_data = dict(root='data/synthetic_voc', num_trainval=512, num_test=128,
                      img_size=((96, 128), (96, 128)), classes=classes, seed=0)
data_root = 'data/synthetic_voc/VOCdevkit/'

model = dict(
    backbone=dict(depth=18, base_channels=32, frozen_stages=-1, norm_eval=False,
                  zero_init_residual=False, with_cp=True, init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=64),
    bbox_head=dict(num_classes=len(classes), in_channels=64, stacked_convs=2, feat_channels=64,
                   anchor_generator=dict(octave_base_scale=2)))

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
test_data = dict(type='VOCDataset', classes=classes,
                 ann_file=data_root + 'VOC2007/ImageSets/Main/test.txt',
                 img_prefix=data_root + 'VOC2007/', pipeline=test_pipeline, samples_per_gpu=8)
data = dict(
    samples_per_gpu=8,
    workers_per_gpu=0,
    train=dict(
        _delete_=True,
        type='VOCDataset',
        classes=classes,
        ann_file=data_root + 'VOC2007/ImageSets/Main/trainval.txt',
        img_prefix=data_root + 'VOC2007/',
        pipeline=train_pipeline),
    val=test_data,
    test=test_data)

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
