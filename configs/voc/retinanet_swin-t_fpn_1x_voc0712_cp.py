# RetinaNet with a checkpointed Swin-T backbone (mmdet 2.x's retinanet_swin-t-p4-w7 shape).
# Pretrained weights: init_cfg with convert_weights=True for the official Swin release's file
# (as mmdet 2.x), or convert_weights='torchvision' for torchvision's swin_t weights.
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
model = dict(
    backbone=dict(_delete_=True, type='SwinTransformer', arch='tiny', drop_path_rate=0.2,
                  out_indices=(1, 2, 3), with_cp=True, init_cfg=None),
    neck=dict(in_channels=[192, 384, 768], start_level=0, num_outs=5))
optimizer = dict(_delete_=True, type='AdamW', lr=0.0001, betas=(0.9, 0.999),
                 weight_decay=0.05)
