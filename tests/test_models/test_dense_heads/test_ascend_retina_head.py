import pytest
import torch

from ckptzoo.registry import build_head

CFG = dict(num_classes=3, in_channels=8, stacked_convs=2, feat_channels=8,
           anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                 scales_per_octave=3, ratios=[0.5, 1.0, 2.0], strides=[8, 16]),
           loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                         loss_weight=1.0),
           loss_bbox=dict(type='L1Loss', loss_weight=1.0),
           train_cfg=dict(assigner=dict(type='AscendMaxIoUAssigner', pos_iou_thr=0.5,
                                        neg_iou_thr=0.4, min_pos_iou=0, ignore_iof_thr=-1),
                          allowed_border=-1, pos_weight=-1, debug=False))


def test_losses_equal_retina_heads():
    torch.manual_seed(0)
    ascend = build_head(dict(CFG, type='AscendRetinaHead'))
    retina = build_head(dict(CFG, type='RetinaHead',
                             train_cfg=dict(CFG['train_cfg'],
                                            assigner=dict(CFG['train_cfg']['assigner'],
                                                          type='MaxIoUAssigner'))))
    retina.load_state_dict(ascend.state_dict())
    feats = [torch.randn(2, 8, 8, 8), torch.randn(2, 8, 4, 4)]
    metas = [dict(img_shape=(64, 64, 3), pad_shape=(64, 64, 3), scale_factor=[1.] * 4)] * 2
    gts = [torch.tensor([[2., 3., 30., 40.], [20., 20., 60., 50.]]),
           torch.tensor([[5., 5., 25., 25.]])]
    labels = [torch.tensor([0, 2]), torch.tensor([1])]
    a = ascend.forward_train(feats, metas, gts, labels)
    b = retina.forward_train(feats, metas, gts, labels)
    for key in ('loss_cls', 'loss_bbox'):
        torch.testing.assert_close(sum(a[key]), sum(b[key]), rtol=0, atol=0)


def test_decoded_box_regression_is_refused_as_mmdet():
    for kind in ('AscendRetinaHead', 'AscendAnchorHead'):
        with pytest.raises(ValueError, match='reg_decoded_bbox=False only'):
            build_head(dict(CFG, type=kind, reg_decoded_bbox=True))
