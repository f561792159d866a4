# Cascade R-CNN R50-FPN on COCO 2017, 12 epochs at 1333x800, 8 GPUs x 2 images (mmdet 2.x's
# cascade_rcnn_r50_fpn_1x_coco.py, same schema). Needs data/coco (see README) and torchvision's
# resnet50 weights in the torch hub cache.
_base_ = [
    '../_base_/models/cascade_rcnn_r50_fpn.py', '../_base_/datasets/coco_detection.py',
    '../_base_/schedules/schedule_1x.py', '../_base_/default_runtime.py'
]
auto_scale_lr = dict(enable=False, base_batch_size=16)
