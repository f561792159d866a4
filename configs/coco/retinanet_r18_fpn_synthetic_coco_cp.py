# Minutes on a CPU: a slim RetinaNet (ResNet-18 at half width, with_cp=True) trained from
# scratch on a generated COCO-format dataset of shapes (written to data/synthetic_coco on first
# use), read by the real CocoDataset with multi-scale training (one of 3 sizes,
# multiscale_mode='value') and evaluated with
# COCOeval (bbox_mAP).
_base_ = [
    '../_base_/models/retinanet_r50_fpn.py', '../_base_/datasets/synthetic_coco_detection.py',
    '../_base_/schedules/synthetic_adamw_12e.py'
]
classes = ('circle', 'square', 'triangle')  # the data's, for num_classes

model = dict(
    backbone=dict(depth=18, base_channels=32, frozen_stages=-1, norm_eval=False,
                  zero_init_residual=False, with_cp=True, init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=64),
    bbox_head=dict(num_classes=len(classes), in_channels=64, stacked_convs=2, feat_channels=64,
                   anchor_generator=dict(octave_base_scale=2)))
