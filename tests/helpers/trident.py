"""A tiny TridentNet config, written after mmdet 2.28.2's ``tridentnet_r50_caffe_1x_coco.py``
(the C4 Faster R-CNN with a TridentResNet): ResNet-50 blocks at base width 16, so the
trunk's 256 channels feed a ResNet-18 ``layer4`` shared head."""
from .rcnn_variants import c4_cfg

__all__ = ['trident_cfg']


def trident_cfg(num_branch=3, test_branch_idx=1, dilations=(1, 2, 3), **backbone_kw):
    cfg = c4_cfg()
    cfg['type'] = 'TridentFasterRCNN'
    cfg['backbone'].update(type='TridentResNet', depth=50, base_channels=16,
                           trident_dilations=dilations, num_branch=num_branch,
                           test_branch_idx=test_branch_idx, **backbone_kw)
    cfg['roi_head'].update(type='TridentRoIHead', num_branch=num_branch,
                           test_branch_idx=test_branch_idx)
    cfg['train_cfg']['rcnn']['sampler'].update(num=8, pos_fraction=0.5,
                                               add_gt_as_proposals=False)
    return cfg
