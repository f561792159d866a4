# Minutes on a CPU: YOLOX-tiny (mmdet 2.x's yolox_tiny_8x8_300e_coco.py at 160x160: the same
# CSPDarknet / PAFPN / decoupled head widths, Mosaic + RandomAffine + HSV + flip over
# MultiImageMixDataset, random input sizes 128-192 every 10 iterations, the mixing switched off
# for the last epochs, EMA) with every backbone, neck and head unit checkpointed
# (with_cp=True), trained from scratch on the generated COCO-format shapes (data/synthetic_coco,
# written on first use) and evaluated with COCOeval (bbox_mAP) on the EMA weights.
_base_ = '../_base_/default_runtime.py'
classes = ('circle', 'square', 'triangle')
data_root = 'data/synthetic_coco/'
synthetic_data = dict(format='coco', root=data_root, num_train=256, num_val=64,
                      img_size=((96, 128), (96, 128)), classes=classes, seed=0)
img_scale = (160, 160)  # height, width

model = dict(
    type='YOLOX',
    input_size=img_scale,
    random_size_range=(4, 6),
    random_size_interval=10,
    backbone=dict(type='CSPDarknet', deepen_factor=0.33, widen_factor=0.375, with_cp=True),
    neck=dict(type='YOLOXPAFPN', in_channels=[96, 192, 384], out_channels=96, num_csp_blocks=1,
              with_cp=True),
    bbox_head=dict(type='YOLOXHead', num_classes=len(classes), in_channels=96, feat_channels=96,
                   with_cp=True),
    train_cfg=dict(assigner=dict(type='SimOTAAssigner', center_radius=2.5)),
    test_cfg=dict(score_thr=0.01, nms=dict(type='nms', iou_threshold=0.65)))

train_pipeline = [
    dict(type='Mosaic', img_scale=img_scale, pad_val=114.0),
    dict(type='RandomAffine', scaling_ratio_range=(0.5, 1.5),
         border=(-img_scale[0] // 2, -img_scale[1] // 2)),
    dict(type='YOLOXHSVRandomAug'),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Resize', img_scale=img_scale, keep_ratio=True),
    dict(type='Pad', pad_to_square=True, pad_val=dict(img=(114.0, 114.0, 114.0))),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1, 1), keep_empty=False),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiScaleFlipAug',
        img_scale=img_scale,
        flip=False,
        transforms=[
            dict(type='Resize', keep_ratio=True),
            dict(type='RandomFlip'),
            dict(type='Pad', pad_to_square=True, pad_val=dict(img=(114.0, 114.0, 114.0))),
            dict(type='DefaultFormatBundle'),
            dict(type='Collect', keys=['img'])
        ])
]
val_data = dict(type='CocoDataset', classes=classes,
                ann_file=data_root + 'annotations/instances_val2017.json',
                img_prefix=data_root + 'val2017/', pipeline=test_pipeline, samples_per_gpu=8)
data = dict(
    samples_per_gpu=8,
    workers_per_gpu=0,
    persistent_workers=False,
    train=dict(
        type='MultiImageMixDataset',
        dataset=dict(type='CocoDataset', classes=classes,
                     ann_file=data_root + 'annotations/instances_train2017.json',
                     img_prefix=data_root + 'train2017/',
                     pipeline=[dict(type='LoadImageFromFile'),
                               dict(type='LoadAnnotations', with_bbox=True)],
                     filter_empty_gt=False),
        pipeline=train_pipeline),
    val=val_data,
    test=val_data)

max_epochs = 24
num_last_epochs = 4
optimizer = dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=5e-4, nesterov=True,
                 paramwise_cfg=dict(norm_decay_mult=0., bias_decay_mult=0.))
optimizer_config = dict(grad_clip=None)
lr_config = dict(policy='YOLOX', warmup='exp', by_epoch=False, warmup_by_epoch=True,
                 warmup_ratio=1, warmup_iters=2, num_last_epochs=num_last_epochs,
                 min_lr_ratio=0.05)
runner = dict(type='EpochBasedRunner', max_epochs=max_epochs)
custom_hooks = [
    dict(type='YOLOXModeSwitchHook', num_last_epochs=num_last_epochs, priority=48),
    dict(type='SyncNormHook', num_last_epochs=num_last_epochs, interval=4, priority=48),
    dict(type='ExpMomentumEMAHook', resume_from=None, momentum=0.0001, priority=49)
]
checkpoint_config = dict(interval=8, max_keep_ckpts=2)
evaluation = dict(save_best='auto', interval=8,
                  dynamic_intervals=[(max_epochs - num_last_epochs, 4)], metric='bbox')
log_config = dict(interval=16, hooks=[dict(type='TextLoggerHook')])
seed = 0
