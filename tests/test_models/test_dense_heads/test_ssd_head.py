import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import one_thread, randomise_bn
from tests.helpers.level_heads import assert_head_mode_exact

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                               min_pos_iou=0., ignore_iof_thr=-1, gt_max_assign_all=False),
                 smoothl1_beta=1., allowed_border=-1, pos_weight=-1, neg_pos_ratio=3,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, nms=dict(type='nms', iou_threshold=0.45), min_bbox_size=0,
                score_thr=0.02, max_per_img=200)
# two levels of 16x16 anchors (one ratio, min 16 = max 16: two equal squares per position)
TINY_ANCHORS = dict(type='SSDAnchorGenerator', scale_major=False, strides=[8, 16],
                    ratios=[[], []], min_sizes=[16, 16], max_sizes=[16, 16])


def _head(**kw):
    cfg = dict(type='SSDHead', num_classes=2, in_channels=(4, 4), anchor_generator=TINY_ANCHORS,
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[1.0] * 4),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def test_keys_and_shapes_as_mmdet():
    head = _head()
    assert head.num_base_priors == [2, 2] and head.cls_out_channels == 3
    assert sorted(head.state_dict()) == ['cls_convs.0.0.bias', 'cls_convs.0.0.weight',
                                         'cls_convs.1.0.bias', 'cls_convs.1.0.weight',
                                         'reg_convs.0.0.bias', 'reg_convs.0.0.weight',
                                         'reg_convs.1.0.bias', 'reg_convs.1.0.weight']
    assert head.cls_convs[0][0].out_channels == 6 and head.reg_convs[1][0].out_channels == 8
    assert head.cls_convs[0][0].kernel_size == (3, 3) and (head.cls_convs[0][0].bias == 0).all()
    lite = _head(use_depthwise=True, stacked_convs=1, feat_channels=8,
                 norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU6'))
    keys = set(lite.state_dict())
    assert {'cls_convs.0.0.depthwise_conv.conv.weight', 'cls_convs.0.0.pointwise_conv.bn.weight',
            'cls_convs.0.1.conv.weight', 'cls_convs.0.1.bn.running_mean',
            'cls_convs.0.2.weight', 'reg_convs.1.2.bias'} <= keys
    assert lite.cls_convs[0][2].kernel_size == (1, 1) and lite.cls_convs[0][1].conv.groups == 8
    assert [u for u in lite.checkpoint_units()] == ['level0', 'level1']


def test_hard_negative_mining_by_hand():
    """Image 16x16: level 0 has 2x2 positions (centres 4, 12) x 2 anchors, level 1 one position
    (centre 8) x 2 anchors. The gt [0, 0, 16, 16] is level 1's two anchors (IoU 1: positives);
    level 0's anchors ([-4, -4, 12, 12], ...) have IoU 9/23 < 0.5: 8 negatives, of which the
    6 (3 x 2 positives) of highest cross-entropy count."""
    head = _head()
    torch.manual_seed(1)
    cls = [torch.randn(1, 6, 2, 2), torch.randn(1, 6, 1, 1)]
    reg = [torch.randn(1, 8, 2, 2), torch.randn(1, 8, 1, 1)]
    gt = torch.tensor([[0., 0., 16., 16.]])
    losses = head.loss(cls, reg, [gt], [torch.tensor([1])], [_meta()])
    scores = torch.cat([c.permute(0, 2, 3, 1).reshape(-1, 3) for c in cls])
    deltas = torch.cat([r.permute(0, 2, 3, 1).reshape(-1, 4) for r in reg])
    anchors = torch.cat(head.prior_generator.grid_priors([(2, 2), (1, 1)]))
    iou = torch.tensor([float(torch.equal(a, torch.tensor([0., 0., 16., 16.])))
                        for a in anchors])
    pos = iou == 1
    labels = torch.where(pos, 1, 2)
    ce = F.cross_entropy(scores, labels, reduction='none')
    num_pos = int(pos.sum())
    neg = ce[~pos].topk(min(3 * num_pos, int((~pos).sum())))[0]
    torch.testing.assert_close(losses['loss_cls'][0], (ce[pos].sum() + neg.sum())[None] / num_pos)
    # targets are zero deltas (anchor == gt): smooth L1 with beta 1 of the positives' deltas
    d = deltas[pos].abs()
    sl1 = torch.where(d < 1, 0.5 * d * d, d - 0.5).sum() / num_pos
    torch.testing.assert_close(losses['loss_bbox'][0], sl1)
    assert num_pos == 2


def test_negatives_are_capped_by_ratio():
    head = _head(train_cfg=dict(TRAIN_CFG, neg_pos_ratio=1))
    cls = [torch.zeros(1, 6, 2, 2), torch.zeros(1, 6, 1, 1)]
    cls[0][0, 0, 0, 0] = 5.  # a confident class 0 on the first anchor (a negative)
    reg = [torch.zeros(1, 8, 2, 2), torch.zeros(1, 8, 1, 1)]
    losses = head.loss(cls, reg, [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([0])],
                       [_meta()])
    # 2 positives (each -log(1/3)) and the 2 worst negatives: the confident one and one at log 3
    worst = -F.log_softmax(torch.tensor([5., 0., 0.]), 0)[2]
    expected = (2 * math.log(3) + worst + math.log(3)) / 2
    torch.testing.assert_close(losses['loss_cls'][0], expected[None])


def test_loss_lists_per_image_and_empty_gt():
    head = _head()
    cls = [torch.randn(2, 6, 2, 2, requires_grad=True), torch.randn(2, 6, 1, 1)]
    reg = [torch.randn(2, 8, 2, 2, requires_grad=True), torch.randn(2, 8, 1, 1)]
    losses = head.loss(cls, reg, [torch.zeros(0, 4), torch.tensor([[0., 0., 16., 16.]])],
                       [torch.zeros(0, dtype=torch.long), torch.tensor([1])],
                       [_meta(), _meta()])
    assert len(losses['loss_cls']) == 2 and losses['loss_cls'][0].shape == (1, )
    # no positive: no negative is mined either
    assert losses['loss_cls'][0].item() == 0 and losses['loss_bbox'][0].item() == 0
    sum(losses['loss_cls'] + losses['loss_bbox']).sum().backward()
    assert torch.isfinite(cls[0].grad).all() and cls[0].grad[0].abs().sum() == 0


def test_get_bboxes_softmax_without_background():
    head = _head()
    cls = [torch.full((1, 6, 2, 2), -10.), torch.full((1, 6, 1, 1), -10.)]
    for c in cls:
        c[:, 2::3] = 10.  # every anchor is background (channel = anchor * 3 + class) ...
    cls[1][0, 1:3, 0, 0] = torch.tensor([10., -10.])  # ... but level 1's anchor 0: class 1
    reg = [torch.zeros(1, 8, 2, 2), torch.zeros(1, 8, 1, 1)]
    (dets, labels), = head.get_bboxes(cls, reg, img_metas=[_meta(scale=2.0)], rescale=True)
    assert labels.tolist() == [1]
    p = torch.tensor([-10., 10., -10.]).softmax(0)[1]
    torch.testing.assert_close(dets, torch.tensor([[0., 0., 8., 8., p]]))


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head(stacked_convs=1, feat_channels=4, norm_cfg=dict(type='BN'),
                 act_cfg=dict(type='ReLU')).double().train()
    randomise_bn(head)
    feats = [torch.randn(2, 4, 4, 4, dtype=torch.float64), torch.randn(2, 4, 2, 2,
                                                                       dtype=torch.float64)]
    assert_head_mode_exact(head, feats, monkeypatch, mode)


def test_with_cp_sets_full():
    head = _head(with_cp=True)
    assert set(head.checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match='neg_pos_ratio, smoothl1_beta|smoothl1_beta'):
        _head(train_cfg=dict(assigner=TRAIN_CFG['assigner']))
    with pytest.raises(UnknownKeyError, match='sampler'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='PseudoSampler')))
    with pytest.raises(ValueError, match='in_channels needs one entry per anchor level'):
        _head(in_channels=(4, 4, 4))
    with pytest.raises(ValueError, match='neg_pos_ratio must be'):
        _head(train_cfg=dict(TRAIN_CFG, neg_pos_ratio=2.5))
    with pytest.raises(ValueError, match='expects 2 levels'):
        _head()([torch.zeros(1, 4, 2, 2)])


def test_ascend_ssd_head_is_ssd_head():
    """mmdet's Ascend (NPU) batched SSD loss is the same loss: the same head here."""
    from ckptzoo.models.dense_heads import AscendSSDHead
    ascend = _head(type='AscendSSDHead', train_cfg=dict(
        TRAIN_CFG, assigner=dict(TRAIN_CFG['assigner'], type='AscendMaxIoUAssigner')))
    plain = _head()
    assert isinstance(ascend, AscendSSDHead) and ascend.state_dict().keys() == \
        plain.state_dict().keys()
    ascend.load_state_dict(plain.state_dict())
    feats = [torch.randn(1, 4, 2, 2), torch.randn(1, 4, 1, 1)]
    args = ([torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([1])], [_meta()])
    a, b = ascend.loss(*ascend(feats), *args), plain.loss(*plain(feats), *args)
    assert a.keys() == b.keys() and all(torch.equal(x, y) for k in a for x, y in zip(a[k], b[k]))
    with pytest.raises(ValueError, match='reg_decoded_bbox'):
        _head(type='AscendSSDHead', reg_decoded_bbox=True)


def test_pisa_ssd_head_adds_carl_and_reweights_positives():
    """Without isr / carl PISASSDHead is SSDHead; CARL adds ``loss_carl``; ISR-P changes the
    positives' weights but keeps their classification loss's sum (as mmdet's isr_p)."""
    plain = _head()
    feats = [torch.randn(2, 4, 2, 2), torch.randn(2, 4, 1, 1)]
    args = ([torch.tensor([[0., 0., 16., 16.]]), torch.tensor([[1., 0., 15., 16.]])],
            [torch.tensor([1]), torch.tensor([0])], [_meta(), _meta()])
    ref = plain.loss(*plain(feats), *args)
    bare = _head(type='PISASSDHead')
    bare.load_state_dict(plain.state_dict())
    got = bare.loss(*bare(feats), *args)
    assert all(torch.equal(x, y) for k in ref for x, y in zip(ref[k], got[k]))
    pisa = _head(type='PISASSDHead', train_cfg=dict(TRAIN_CFG, isr=dict(k=2., bias=0.),
                                                    carl=dict(k=1., bias=0.2)))
    pisa.load_state_dict(plain.state_dict())
    losses = pisa.loss(*pisa(feats), *args)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_carl'}
    assert losses['loss_carl'].shape == (1, ) and losses['loss_carl'].item() > 0
    torch.testing.assert_close(sum(losses['loss_bbox']), sum(ref['loss_bbox']))
