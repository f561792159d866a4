# The generated COCO panoptic shapes of the minutes-on-a-CPU panoptic config: three thing
# shapes on three stuff regions (data/synthetic_coco_panoptic, written on first use from
# ``synthetic_data``: panoptic json + PNG id maps + the instances json), read by the real
# CocoPanopticDataset / LoadPanopticAnnotations at 160x96-128 and evaluated by PQ.
_base_ = './coco_panoptic.py'
classes = ('circle', 'square', 'triangle', 'sky', 'sand', 'wall')  # things, then stuff
data_root = 'data/synthetic_coco_panoptic/'
synthetic_data = dict(format='coco_panoptic', root=data_root, num_train=128, num_val=32,
                      img_size=((96, 128), (96, 128)), seed=0)

img_norm_cfg = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadPanopticAnnotations', with_bbox=True, with_mask=True, with_seg=True),
    dict(type='Resize', img_scale=[(160, 96), (160, 112), (160, 128)],
         multiscale_mode='value', keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **img_norm_cfg),
    dict(type='Pad', size_divisor=32),
    dict(type='SegRescale', scale_factor=1 / 4),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks', 'gt_semantic_seg']),
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
val_data = dict(type='CocoPanopticDataset', classes=classes,
                ann_file=data_root + 'annotations/panoptic_val2017.json',
                ins_ann_file=data_root + 'annotations/instances_val2017.json',
                img_prefix=data_root + 'val2017/',
                seg_prefix=data_root + 'annotations/panoptic_val2017/',
                pipeline=test_pipeline, samples_per_gpu=8)
data = dict(
    samples_per_gpu=8,
    workers_per_gpu=0,
    train=dict(classes=classes, ann_file=data_root + 'annotations/panoptic_train2017.json',
               img_prefix=data_root + 'train2017/',
               seg_prefix=data_root + 'annotations/panoptic_train2017/',
               pipeline=train_pipeline),
    val=val_data,
    test=val_data)
# PQ is not among the keys the hook infers a rule from (nor in mmcv): the rule is given
evaluation = dict(interval=4, metric=['PQ'], save_best='PQ', rule='greater')
