"""A tiny Grid R-CNN config, written after mmdet 2.28.2's ``grid_rcnn_r50_fpn_gn-head_1x``
(box head without regression, a 14x14 grid extractor, a GN grid head) with its sizes as
arguments."""
from .detectors import RPN_TEST_CFG, RPN_TRAIN_CFG, rpn_head_cfg
from .rcnn_variants import (_bbox_head, _extractor, _fpn_backbone, _rcnn_test, _rcnn_train,
                            _rpn_proposal)


def grid_head_cfg(feat=16, point_feat=8, **kw):
    head = dict(type='GridHead', grid_points=9, num_convs=2, in_channels=feat,
                point_feat_channels=point_feat, norm_cfg=dict(type='GN', num_groups=36),
                loss_grid=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=15))
    head.update(kw)
    return head


def grid_rcnn_cfg(num_classes=3, feat=16, max_num_grid=192):
    return dict(type='GridRCNN', **_fpn_backbone(feat),
                rpn_head=rpn_head_cfg(feat),
                roi_head=dict(type='GridRoIHead', bbox_roi_extractor=_extractor(7, feat),
                              bbox_head=_bbox_head(feat, 32, num_classes, with_reg=False),
                              grid_roi_extractor=_extractor(14, feat),
                              grid_head=grid_head_cfg(feat)),
                train_cfg=dict(rpn=RPN_TRAIN_CFG, rpn_proposal=_rpn_proposal(),
                               rcnn=_rcnn_train(pos_radius=1, max_num_grid=max_num_grid)),
                test_cfg=dict(rpn=RPN_TEST_CFG,
                              rcnn=dict(_rcnn_test(), nms=dict(type='nms', iou_threshold=0.3))))
