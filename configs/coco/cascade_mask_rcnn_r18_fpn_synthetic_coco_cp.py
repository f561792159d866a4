# Minutes on a CPU: a slim Cascade Mask R-CNN (ResNet-18 at half width, with_cp=True, three
# stages of box and mask heads) trained from scratch on the generated COCO-format dataset of
# shapes with polygon masks (data/synthetic_coco, written on first use), read by the real
# CocoDataset with multi-scale training and evaluated with COCOeval (bbox_mAP and segm_mAP).
_base_ = [
    '../_base_/models/cascade_mask_rcnn_r50_fpn.py', '../_base_/datasets/synthetic_coco_instance.py',
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
