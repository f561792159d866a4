"""A tiny SCNet (mmdet's scnet_r50_fpn_1x_coco.py model at ``cascade_cfg``'s sizes), shared by
the SCNet detector and RoI head tests."""
from .detectors import cascade_cfg

__all__ = ['scnet_cfg']


def scnet_cfg(with_semantic=True, with_glbctx=True, with_feat_relay=True, seg_classes=5,
              norm_cfg=None, mask_convs=4, **kw):
    """SCNetBBoxHead per stage, one SCNetMaskHead (``conv_to_res``), and the semantic (stride
    8), global context and feature relay heads, each optional."""
    cfg = cascade_cfg(mask_convs=mask_convs, **kw)
    cfg['type'] = 'SCNet'
    roi = cfg['roi_head']
    roi['type'] = 'SCNetRoIHead'
    feat, fc = roi['bbox_head'][0]['in_channels'], roi['bbox_head'][0]['fc_out_channels']
    num_classes = roi['bbox_head'][0]['num_classes']
    for head in roi['bbox_head']:
        head.update(type='SCNetBBoxHead', num_shared_fcs=2)
    roi['mask_head'].update(type='SCNetMaskHead', conv_to_res=True, norm_cfg=norm_cfg)
    if with_semantic:
        roi.update(
            semantic_roi_extractor=dict(
                type='SingleRoIExtractor',
                roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
                out_channels=feat, featmap_strides=[8]),
            semantic_head=dict(type='SCNetSemanticHead', num_ins=5, fusion_level=1,
                               num_convs=4, in_channels=feat, conv_out_channels=feat,
                               num_classes=seg_classes, norm_cfg=norm_cfg,
                               loss_seg=dict(type='CrossEntropyLoss', ignore_index=255,
                                             loss_weight=0.2),
                               conv_to_res=True))
    if with_glbctx:
        roi['glbctx_head'] = dict(type='GlobalContextHead', num_convs=4, in_channels=feat,
                                  conv_out_channels=feat, num_classes=num_classes,
                                  loss_weight=3.0, conv_to_res=True, norm_cfg=norm_cfg)
    if with_feat_relay:
        roi['feat_relay_head'] = dict(type='FeatureRelayHead', in_channels=fc,
                                      out_conv_channels=feat, roi_feat_size=7,
                                      scale_factor=2)
    return cfg
