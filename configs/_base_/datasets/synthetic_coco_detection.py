# The generated COCO-format shapes of the minutes-on-a-CPU detection configs (data/synthetic_coco,
# written on first use from ``synthetic_data``), read by the real CocoDataset with multi-scale
# training at 160x96-128 (one of 3 sizes, multiscale_mode='value') and evaluated with COCOeval.
_base_ = './coco_detection.py'
classes = ('circle', 'square', 'triangle')
data_root = 'data/synthetic_coco/'
synthetic_data = dict(format='coco', root=data_root, num_train=256, num_val=64,
                      img_size=((96, 128), (96, 128)), classes=classes, seed=0)

img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=[(160, 96), (160, 112), (160, 128)],
         multiscale_mode='value', keep_ratio=True),
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
evaluation = dict(interval=4, metric='bbox', save_best='auto')
