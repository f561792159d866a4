# Minutes on a CPU: a slim Mask R-CNN (ResNet-18 at half width, with_cp=True) trained from
# scratch on a generated COCO-format dataset of shapes with polygon masks (written to
# data/synthetic_coco on first use), read by the real CocoDataset with multi-scale training and
# evaluated with COCOeval (bbox_mAP and segm_mAP).
_base_ = [
    '../_base_/models/mask_rcnn_r50_fpn.py', '../_base_/datasets/synthetic_coco_instance.py',
    '../_base_/schedules/synthetic_adamw_12e.py'
]
classes = ('circle', 'square', 'triangle')  # the data's, for num_classes

model = dict(
    backbone=dict(depth=18, base_channels=32, frozen_stages=-1, norm_eval=False,
                  zero_init_residual=False, with_cp=True, init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=64),
    rpn_head=dict(in_channels=64, feat_channels=64, anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=64),
        bbox_head=dict(in_channels=64, fc_out_channels=256, num_classes=len(classes)),
        mask_roi_extractor=dict(out_channels=64),
        mask_head=dict(num_convs=2, in_channels=64, conv_out_channels=64,
                       num_classes=len(classes))),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=256),
        rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100)))
