# Minutes on a CPU: a slim FCOS (ResNet-18 at half width, with_cp=True, every head level a
# checkpoint unit) trained from scratch on the generated COCO-format shapes (data/synthetic_coco,
# written on first use), with FCOS's improvements (centre sampling, normalised distances,
# centerness on the regression branch, GIoU) and regress ranges a quarter of COCO's for the
# 160x128 images; evaluated with COCOeval (bbox_mAP).
_base_ = [
    '../_base_/datasets/synthetic_coco_detection.py', '../_base_/schedules/synthetic_adamw_12e.py'
]
classes = ('circle', 'square', 'triangle')  # the data's, for num_classes

model = dict(
    type='FCOS',
    backbone=dict(type='ResNet', depth=18, base_channels=32, num_stages=4,
                  out_indices=(0, 1, 2, 3), frozen_stages=-1,
                  norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                  style='pytorch', with_cp=True, init_cfg=None),
    neck=dict(type='FPN', in_channels=[32, 64, 128, 256], out_channels=64, start_level=1,
              add_extra_convs='on_output', num_outs=5, relu_before_extra_convs=True),
    bbox_head=dict(
        type='FCOSHead', num_classes=len(classes), in_channels=64, stacked_convs=2,
        feat_channels=64, strides=[8, 16, 32, 64, 128],
        regress_ranges=((-1, 16), (16, 32), (32, 64), (64, 128), (128, 1e8)),
        norm_cfg=dict(type='GN', num_groups=16, requires_grad=True), conv_bias=True,
        norm_on_bbox=True, centerness_on_reg=True, center_sampling=True,
        center_sample_radius=1.5, dcn_on_last_conv=False, with_cp=True,
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0),
        loss_bbox=dict(type='GIoULoss', loss_weight=1.0),
        loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0)),
    train_cfg=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                                 min_pos_iou=0, ignore_iof_thr=-1),
                   allowed_border=-1, pos_weight=-1, debug=False),
    test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                  nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
