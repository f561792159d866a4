"""Tiny SABL R-CNN configs, after mmdet 2.28.2's ``sabl_faster_rcnn_r50_fpn_1x_coco`` and
``sabl_cascade_rcnn_r50_fpn_1x_coco`` with their sizes as arguments."""
from .detectors import cascade_cfg

__all__ = ['sabl_head_cfg', 'sabl_faster_cfg', 'sabl_cascade_cfg']


def sabl_head_cfg(feat=16, num_classes=3, scale_factor=1.7, **kw):
    """mmdet's SABLHead config of the sabl/ R-CNNs, narrower."""
    head = dict(type='SABLHead', num_classes=num_classes, cls_in_channels=feat,
                reg_in_channels=feat, roi_feat_size=7, reg_feat_up_ratio=2, reg_pre_kernel=3,
                reg_post_kernel=3, reg_pre_num=2, reg_post_num=1, cls_out_channels=32,
                reg_offset_out_channels=16, reg_cls_out_channels=16, num_cls_fcs=1,
                num_reg_fcs=0, reg_class_agnostic=True, norm_cfg=None,
                bbox_coder=dict(type='BucketingBBoxCoder', num_buckets=14,
                                scale_factor=scale_factor),
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                loss_bbox_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                loss_bbox_reg=dict(type='SmoothL1Loss', beta=0.1, loss_weight=1.0))
    head.update(kw)
    return head


def sabl_cascade_cfg(num_stages=3, **kw):
    """Cascade R-CNN with a SABL head per stage (scale factors 1.7, 1.5, 1.3 as mmdet's)."""
    cfg = cascade_cfg(with_mask=False, num_stages=num_stages, **kw)
    cfg['roi_head']['bbox_head'] = [sabl_head_cfg(scale_factor=s)
                                    for s in (1.7, 1.5, 1.3)[:num_stages]]
    return cfg


def sabl_faster_cfg(**kw):
    """Faster R-CNN (FPN) with a SABL box head."""
    cfg = sabl_cascade_cfg(num_stages=1, **kw)
    cfg['type'] = 'FasterRCNN'
    rh = cfg['roi_head']
    cfg['roi_head'] = dict(type='StandardRoIHead', bbox_roi_extractor=rh['bbox_roi_extractor'],
                           bbox_head=rh['bbox_head'][0])
    cfg['train_cfg']['rcnn'] = cfg['train_cfg']['rcnn'][0]
    return cfg
