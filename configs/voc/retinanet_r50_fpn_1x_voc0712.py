# The reference RetinaNet-R50 VOC experiment's baseline (GTX 1660, batch 2: 2900 MB, 7m45s),
# as mmdet 2.x's configs/pascal_voc/retinanet_r50_fpn_1x_voc0712.py.
# Needs data/VOCdevkit/{VOC2007,VOC2012} and torchvision's resnet50 weights in the torch hub
# cache (see README).
_base_ = [
    '../_base_/models/retinanet_r50_fpn.py', '../_base_/datasets/voc0712.py',
    '../_base_/default_runtime.py'
]
model = dict(bbox_head=dict(num_classes=20))
# optimizer
optimizer = dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=0.0001)
optimizer_config = dict(grad_clip=None)
# learning policy
# actual epoch = 3 * 3 = 9
lr_config = dict(policy='step', step=[3])
# runtime settings
runner = dict(type='EpochBasedRunner', max_epochs=4)  # actual epoch = 4 * 3 = 12

# NOTE: `auto_scale_lr` is for automatically scaling LR,
# USER SHOULD NOT CHANGE ITS VALUES.
# base_batch_size = (8 GPUs) x (2 samples per GPU)
auto_scale_lr = dict(base_batch_size=16)
