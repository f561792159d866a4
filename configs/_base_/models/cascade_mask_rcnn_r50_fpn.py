# Cascade Mask R-CNN R50-FPN in mmdet 2.x's schema (its
# configs/_base_/models/cascade_mask_rcnn_r50_fpn.py builds the same model): Cascade R-CNN plus a
# 4-conv FCN mask head per stage on 14x14 RoIAlign features, trained on 28x28 mask targets; at
# test the three mask heads' probabilities are averaged.
_base_ = './cascade_rcnn_r50_fpn.py'
model = dict(
    roi_head=dict(
        mask_roi_extractor=dict(
            type='SingleRoIExtractor',
            roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
            out_channels=256,
            featmap_strides=[4, 8, 16, 32]),
        mask_head=dict(
            type='FCNMaskHead',
            num_convs=4,
            in_channels=256,
            conv_out_channels=256,
            num_classes=80,
            loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0))),
    train_cfg=dict(rcnn=[
        dict(
            assigner=dict(
                type='MaxIoUAssigner',
                pos_iou_thr=thr,
                neg_iou_thr=thr,
                min_pos_iou=thr,
                match_low_quality=False,
                ignore_iof_thr=-1),
            sampler=dict(
                type='RandomSampler', num=512, pos_fraction=0.25, neg_pos_ub=-1,
                add_gt_as_proposals=True),
            mask_size=28,
            pos_weight=-1,
            debug=False) for thr in (0.5, 0.6, 0.7)
    ]),
    test_cfg=dict(rcnn=dict(mask_thr_binary=0.5)))
