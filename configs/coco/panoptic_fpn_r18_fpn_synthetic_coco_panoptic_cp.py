# Minutes on a CPU: a slim Panoptic FPN (ResNet-18 at half width, with_cp=True) trained from
# scratch on generated COCO panoptic data (three thing shapes on three stuff regions, written to
# data/synthetic_coco_panoptic on first use), read by the real CocoPanopticDataset and
# LoadPanopticAnnotations, evaluated by panoptic quality (PQ, SQ, RQ of all / things / stuff).
_base_ = [
    '../_base_/models/mask_rcnn_r50_fpn.py', '../_base_/datasets/synthetic_coco_panoptic.py',
    '../_base_/schedules/synthetic_adamw_12e.py'
]
num_things, num_stuff = 3, 3  # circle, square, triangle; sky, sand, wall

model = dict(
    type='PanopticFPN',
    backbone=dict(depth=18, base_channels=32, frozen_stages=-1, norm_eval=False,
                  zero_init_residual=False, with_cp=True, init_cfg=None),
    neck=dict(in_channels=[32, 64, 128, 256], out_channels=64),
    rpn_head=dict(in_channels=64, feat_channels=64, anchor_generator=dict(scales=[4])),
    roi_head=dict(
        bbox_roi_extractor=dict(out_channels=64),
        bbox_head=dict(in_channels=64, fc_out_channels=256, num_classes=num_things),
        mask_roi_extractor=dict(out_channels=64),
        mask_head=dict(num_convs=2, in_channels=64, conv_out_channels=64,
                       num_classes=num_things)),
    semantic_head=dict(
        type='PanopticFPNHead',
        num_things_classes=num_things,
        num_stuff_classes=num_stuff,
        in_channels=64,
        inner_channels=32,
        start_level=0,
        end_level=4,
        norm_cfg=dict(type='GN', num_groups=8, requires_grad=True),
        conv_cfg=None,
        loss_seg=dict(type='CrossEntropyLoss', ignore_index=255, loss_weight=0.5)),
    panoptic_fusion_head=dict(
        type='HeuristicFusionHead',
        num_things_classes=num_things,
        num_stuff_classes=num_stuff),
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=256),
        rcnn=dict(sampler=dict(num=128))),
    test_cfg=dict(
        rpn=dict(nms_pre=500, max_per_img=100),
        panoptic=dict(
            score_thr=0.5,
            max_per_img=100,
            mask_thr_binary=0.5,
            mask_overlap=0.5,
            nms=dict(type='nms', iou_threshold=0.5, class_agnostic=True),
            # a stuff region under this many pixels (at the input's size) becomes VOID;
            # mmdet's 4096 is for 1333x800 COCO images
            stuff_area_limit=64)))
# as mmdet's panoptic_fpn configs: the heads' num_classes are the things' (box, mask), the
# stuff's + 1 (semantic) or all classes (fusion), never one count for NumClassCheckHook
custom_hooks = []
