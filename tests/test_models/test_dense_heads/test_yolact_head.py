"""YOLACTHead (mmdet 2.x keys, OHEM loss, fast-NMS decoding with coefficients, level units) and
YOLACTSegmHead (class c is map c; mmdet's c - 1 fixed)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import one_thread, randomise_bn
from tests.helpers.level_heads import assert_head_mode_exact

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                               min_pos_iou=0., ignore_iof_thr=-1, gt_max_assign_all=False),
                 allowed_border=-1, pos_weight=-1, neg_pos_ratio=1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05, iou_thr=0.5, top_k=200,
                max_per_img=100)


def _head(**kw):
    cfg = dict(type='YOLACTHead', num_classes=2, in_channels=4, feat_channels=4, num_protos=3,
               # one level, stride 8, one 16x16 anchor per position
               anchor_generator=dict(type='AnchorGenerator', strides=[8], ratios=[1.0],
                                     scales=[2]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                               target_stds=[1.] * 4),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def test_keys_shapes_and_defaults_as_mmdet():
    head = build_head(dict(type='YOLACTHead', num_classes=80, in_channels=256,
                           feat_channels=256))
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes == {'head_convs.0.conv.weight': (256, 256, 3, 3),
                      'head_convs.0.conv.bias': (256, ),
                      'conv_cls.weight': (3 * 81, 256, 3, 3), 'conv_cls.bias': (243, ),
                      'conv_reg.weight': (12, 256, 3, 3), 'conv_reg.bias': (12, ),
                      'conv_coeff.weight': (96, 256, 3, 3), 'conv_coeff.bias': (96, )}
    assert head.use_ohem and head.num_protos == 32 and head.num_base_priors == 3
    assert (head.conv_cls.bias == 0).all()  # Xavier, bias 0
    outs = head([torch.randn(1, 256, 4, 4)] * 5)
    assert [len(o) for o in outs] == [5, 5, 5]
    assert outs[2][0].shape == (1, 96, 4, 4) and outs[2][0].abs().max() < 1  # tanh
    assert list(head.checkpoint_units()) == [f'level{i}' for i in range(5)]


def test_head_convs_init_is_kaiming_after_xavier():
    """mmdet's head_convs live in mmcv's ModuleList: after the Xavier init_cfg each
    ConvModule's own init_weights runs (kaiming fan_out, relu, bias 0); the predictors keep
    Xavier (uniform, bias 0)."""
    torch.manual_seed(0)
    head = build_head(dict(type='YOLACTHead', num_classes=2, in_channels=256,
                           feat_channels=256, num_protos=3,
                           anchor_generator=dict(type='AnchorGenerator', strides=[8],
                                                 ratios=[1.0], scales=[2]),
                           train_cfg=TRAIN_CFG, test_cfg=TEST_CFG))
    w = head.head_convs[0].conv.weight
    assert abs(w.std().item() - math.sqrt(2 / (256 * 9))) < 0.003  # kaiming fan_out
    assert not torch.any(head.head_convs[0].conv.bias)
    bound = math.sqrt(6 / (256 * 9 + head.conv_cls.out_channels * 9))  # Xavier uniform
    assert head.conv_cls.weight.abs().max().item() <= bound
    assert abs(head.conv_cls.weight.std().item() - bound / math.sqrt(3)) < 0.1 * bound


def test_ohem_loss_by_hand():
    """16x16 image, 2x2 map: anchors [-8,-8,8,8], [0,-8,16,8], [-8,0,8,16], [0,0,16,16]; the
    gt [0,0,16,16] is anchor 3, the rest negatives (IoU 1/7, 1/3, 1/3). neg_pos_ratio 1: the
    positive and the negative of highest cross entropy."""
    head = _head()
    torch.manual_seed(1)
    cls_score, bbox_pred = torch.randn(1, 3, 2, 2), torch.randn(1, 4, 2, 2)
    losses, sampling = head.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                                 [torch.tensor([1])], [_meta()])
    logits = cls_score.permute(0, 2, 3, 1).reshape(4, 3)
    ce = F.cross_entropy(logits, torch.tensor([2, 2, 2, 1]), reduction='none')
    torch.testing.assert_close(losses['loss_cls'][0], ce[3] + ce[:3].max())
    deltas = bbox_pred.permute(0, 2, 3, 1).reshape(4, 4)[3]
    smooth = torch.where(deltas.abs() < 1, 0.5 * deltas**2, deltas.abs() - 0.5)
    torch.testing.assert_close(losses['loss_bbox'][0], 1.5 * smooth.sum())
    assert sampling[0].pos_inds.tolist() == [3]
    assert sampling[0].pos_assigned_gt_inds.tolist() == [0]


def test_ohem_without_gt_takes_every_negative():
    head = _head()
    cls_score = torch.randn(2, 3, 2, 2, requires_grad=True)
    losses, _ = head.loss([cls_score], [torch.randn(2, 4, 2, 2)], [torch.zeros(0, 4)] * 2,
                          [torch.zeros(0, dtype=torch.long)] * 2, [_meta(), _meta()])
    logits = cls_score.detach().permute(0, 2, 3, 1).reshape(2, 4, 3)
    for i in range(2):  # each image counts one, so the batch divides by 2
        expected = F.cross_entropy(logits[i], torch.full((4, ), 2), reduction='sum') / 2
        torch.testing.assert_close(losses['loss_cls'][i], expected)
        assert losses['loss_bbox'][i].item() == 0
    sum(losses['loss_cls']).backward()
    assert torch.isfinite(cls_score.grad).all()


def test_outside_anchors_are_unmapped_and_positives_index_all_anchors():
    """allowed_border=0 in a 17x17 image: only anchor 3 is inside (mmdet's OHEM fails on the
    shapes); its positive index is 3 among all anchors."""
    head = _head(train_cfg=dict(TRAIN_CFG, allowed_border=0))
    cls_score = torch.randn(1, 3, 2, 2)
    losses, sampling = head.loss([cls_score], [torch.zeros(1, 4, 2, 2)],
                                 [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([0])],
                                 [_meta(17, 17)])
    assert sampling[0].pos_inds.tolist() == [3]
    ce3 = F.cross_entropy(cls_score.permute(0, 2, 3, 1).reshape(4, 3)[3:], torch.tensor([0]))
    # the outside anchors are negatives of weight 0 (zero loss), as mmdet's ignored anchors
    torch.testing.assert_close(losses['loss_cls'][0], ce3)


def test_without_ohem_is_anchor_head_loss():
    head = _head(use_ohem=False, loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                               loss_weight=1.0))
    cls_score = torch.randn(1, 3, 2, 2)
    losses, sampling = head.loss([cls_score], [torch.zeros(1, 4, 2, 2)],
                                 [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([1])],
                                 [_meta()])
    ce = F.cross_entropy(cls_score.permute(0, 2, 3, 1).reshape(4, 3),
                         torch.tensor([2, 2, 2, 1]), reduction='sum')
    torch.testing.assert_close(losses['loss_cls'][0], ce)
    assert sampling[0].pos_inds.tolist() == [3]


def test_get_bboxes_keeps_coefficients_with_their_boxes():
    head = _head()
    cls_score = torch.full((1, 3, 2, 2), -10.)
    cls_score[0, 2] = 0.         # background
    cls_score[0, 1, 1, 1] = 5.   # anchor 3, class 1
    cls_score[0, 0, 0, 0] = 4.   # anchor 0, class 0
    coeff = torch.arange(12.).view(1, 3, 2, 2) / 20
    (dets, ), (labels, ), (coeffs, ) = head.get_bboxes(
        [cls_score], [torch.zeros(1, 4, 2, 2)], [coeff], img_metas=[_meta(scale=2.0)],
        rescale=True)
    assert labels.tolist() == [1, 0]
    per_anchor = coeff[0].permute(1, 2, 0).reshape(4, 3)
    torch.testing.assert_close(coeffs, per_anchor[[3, 0]])
    p = torch.tensor([5., -10., 0.]).softmax(0)[0]
    q = torch.tensor([4., -10., 0.]).softmax(0)[0]
    # anchor 3 [0, 0, 16, 16] halved; anchor 0 [-8,-8,8,8] clipped to [0,0,8,8] then halved
    torch.testing.assert_close(dets, torch.tensor([[0., 0., 8., 8., p], [0., 0., 4., 4., q]]))
    # nms_pre keeps the anchors of best foreground score
    (dets, ), (labels, ), _ = head.get_bboxes([cls_score], [torch.zeros(1, 4, 2, 2)], [coeff],
                                              [_meta()], cfg=dict(TEST_CFG, nms_pre=1))
    assert labels.tolist() == [1]
    with pytest.raises(NotImplementedError, match='test-time augmentation'):
        head.aug_test([], [])
    with pytest.raises(ValueError, match=r"missing \['iou_thr'\]"):
        head.get_bboxes([cls_score], [torch.zeros(1, 4, 2, 2)], [coeff], [_meta()],
                        cfg=dict(score_thr=0.05, top_k=200))


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head(num_head_convs=2, norm_cfg=dict(type='BN'),
                 anchor_generator=dict(type='AnchorGenerator', strides=[8, 16], ratios=[1.0],
                                       scales=[2])).double().train()
    randomise_bn(head)
    feats = [torch.randn(2, 4, 4, 4, dtype=torch.float64),
             torch.randn(2, 4, 2, 2, dtype=torch.float64)]
    assert_head_mode_exact(head, feats, monkeypatch, mode)


def test_with_cp_sets_full():
    assert set(_head(with_cp=True).checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match="reduction='none'"):
        _head(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False))
    with pytest.raises(ValueError, match='neg_pos_ratio'):
        _head(train_cfg=dict(TRAIN_CFG, neg_pos_ratio=None))
    with pytest.raises(ValueError, match='neg_pos_ratio'):
        _head(train_cfg=dict(TRAIN_CFG, neg_pos_ratio=2.5))
    with pytest.raises(ValueError, match='leave train_cfg.sampler out'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8,
                                                     pos_fraction=0.5)))
    with pytest.raises(UnknownKeyError, match='nms'):
        _head(test_cfg=dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.5)))
    with pytest.raises(ValueError, match='num_protos'):
        _head(num_protos=0)
    with pytest.raises(ValueError, match='expects 1 levels'):
        _head()([torch.zeros(1, 4, 2, 2)] * 2)


# ------------------------------------------------------------------- YOLACTSegmHead
def _segm(**kw):
    torch.manual_seed(0)
    return build_head(dict(dict(type='YOLACTSegmHead', num_classes=3, in_channels=4), **kw))


def test_segm_head_keys_and_targets_by_class():
    head = _segm()
    assert {k: tuple(v.shape) for k, v in head.state_dict().items()} == {
        'segm_conv.weight': (3, 4, 1, 1), 'segm_conv.bias': (3, )}
    masks = torch.zeros(2, 8, 8)
    masks[0, :4, :4] = 1
    masks[1, 4:, 4:] = 1
    targets = head.get_targets(torch.zeros(3, 4, 4), masks, torch.tensor([0, 2]))
    # class 0 in map 0, class 2 in map 2 (mmdet put class c in map c - 1)
    expected = torch.zeros(3, 4, 4)
    expected[0, :2, :2] = 1
    expected[2, 2:, 2:] = 1
    torch.testing.assert_close(targets, expected)


def test_segm_loss_by_hand_and_without_objects():
    head = _segm()
    pred = torch.randn(2, 3, 4, 4, requires_grad=True)
    masks = [torch.ones(1, 8, 8, dtype=torch.uint8), torch.zeros(0, 8, 8, dtype=torch.uint8)]
    losses = head.loss(pred, masks, [torch.tensor([1]), torch.zeros(0, dtype=torch.long)])
    target = torch.zeros(3, 4, 4)
    target[1] = 1
    bce = F.binary_cross_entropy_with_logits(pred[0].detach(), target, reduction='sum')
    torch.testing.assert_close(losses['loss_segm'][0], bce / (2 * 4 * 4), rtol=1e-5, atol=0)
    assert losses['loss_segm'][1].item() == 0
    sum(losses['loss_segm']).backward()
    assert torch.isfinite(pred.grad).all()
    with pytest.raises(NotImplementedError, match='only takes part in training'):
        head.simple_test(None, None)
    with pytest.raises(ValueError, match='num_classes'):
        _segm(num_classes=0)


def test_segm_init_is_xavier_uniform_on_segm_conv():
    head = _segm(in_channels=64)
    bound = math.sqrt(6 / (64 + 3))
    assert head.segm_conv.weight.abs().max() <= bound and (head.segm_conv.bias == 0).all()
