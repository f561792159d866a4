# RetinaNet with a checkpointed DenseNet-121 backbone (multi-scale outputs, strides 4-32).
_base_ = './retinanet_r50_fpn_1x_voc0712.py'
model = dict(
    backbone=dict(_delete_=True, type='DenseNet', arch='121', out_indices=(0, 1, 2, 3),
                  frozen_stages=-1, norm_eval=True, with_cp=True,
                  init_cfg=dict(type='Pretrained', checkpoint='torchvision://densenet121')),
    neck=dict(in_channels=[256, 512, 1024, 1024]))
