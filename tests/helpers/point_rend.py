"""A tiny PointRend config, written after mmdet 2.28.2's
``point_rend_r50_caffe_fpn_mstrain_1x_coco.py`` with its sizes as arguments."""
from .detectors import RPN_TEST_CFG, RPN_TRAIN_CFG, rpn_head_cfg
from .rcnn_variants import _bbox_head, _extractor, _fpn_backbone, _rcnn_test, _rcnn_train, \
    _rpn_proposal

__all__ = ['point_rend_cfg']


def point_rend_cfg(num_classes=3, feat=16, num_points=49, subdivision_steps=3,
                   subdivision_num_points=100, **roi_kw):
    """point_rend_r50_caffe_fpn_mstrain_1x_coco.py, tiny (7x7 coarse masks from 14x14 RoI
    features of the stride-4 level)."""
    roi_head = dict(
        type='PointRendRoIHead',
        bbox_roi_extractor=_extractor(7, feat), bbox_head=_bbox_head(feat, 32, num_classes),
        mask_roi_extractor=dict(type='GenericRoIExtractor', aggregation='concat',
                                roi_layer=dict(type='SimpleRoIAlign', output_size=14),
                                out_channels=feat, featmap_strides=[4]),
        mask_head=dict(type='CoarseMaskHead', num_fcs=2, in_channels=feat,
                       conv_out_channels=feat, fc_out_channels=32, num_classes=num_classes,
                       loss_mask=dict(type='CrossEntropyLoss', use_mask=True, loss_weight=1.0)),
        point_head=dict(type='MaskPointHead', num_fcs=3, in_channels=feat, fc_channels=feat,
                        num_classes=num_classes, coarse_pred_each_layer=True,
                        loss_point=dict(type='CrossEntropyLoss', use_mask=True,
                                        loss_weight=1.0)))
    roi_head.update(roi_kw)
    return dict(
        type='PointRend', **_fpn_backbone(feat), rpn_head=rpn_head_cfg(feat), roi_head=roi_head,
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, sampler=dict(RPN_TRAIN_CFG['sampler'], num=64)),
                       rpn_proposal=_rpn_proposal(),
                       rcnn=_rcnn_train(mask_size=7, num_points=num_points, oversample_ratio=3,
                                        importance_sample_ratio=0.75)),
        test_cfg=dict(rpn=RPN_TEST_CFG,
                      rcnn=_rcnn_test(mask_thr_binary=0.5, subdivision_steps=subdivision_steps,
                                      subdivision_num_points=subdivision_num_points,
                                      scale_factor=2)))
