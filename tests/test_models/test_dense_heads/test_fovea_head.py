"""FoveaHead and FeatureAlign: mmdet's keys (plain and with_deform), targets worked by hand
(scale ranges, the fovea, the smaller box winning, log distances in base edges), decoding,
levels as units, errors."""
import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import FeatureAlign, FoveaHead
from ckptzoo.registry import build_head


def _head(**kw):
    cfg = dict(type='FoveaHead', num_classes=3, in_channels=8, feat_channels=8,
               stacked_convs=1, strides=(8, 16), base_edge_list=(4, 8),
               scale_ranges=((1, 16), (8, 64)), sigma=0.4,
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=1.5, alpha=0.4,
                             loss_weight=1.0),
               loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0),
               test_cfg=dict(nms_pre=1000, score_thr=0.0,
                             nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def test_keys_as_mmdet():
    assert list(_head().state_dict()) == [
        'reg_convs.0.conv.weight', 'reg_convs.0.conv.bias', 'conv_reg.weight', 'conv_reg.bias',
        'cls_convs.0.conv.weight', 'cls_convs.0.conv.bias', 'conv_cls.weight', 'conv_cls.bias']
    head = _head(with_deform=True, norm_cfg=dict(type='GN', num_groups=2))
    assert list(head.state_dict()) == [
        'reg_convs.0.conv.weight', 'reg_convs.0.gn.weight', 'reg_convs.0.gn.bias',
        'conv_reg.weight', 'conv_reg.bias', 'cls_convs.0.conv.weight', 'cls_convs.0.gn.weight',
        'cls_convs.0.gn.bias', 'cls_convs.1.conv.weight', 'cls_convs.1.gn.weight',
        'cls_convs.1.gn.bias', 'feature_adaption.conv_offset.weight',
        'feature_adaption.conv_adaption.weight', 'conv_cls.weight', 'conv_cls.bias']
    assert head.cls_convs[0].conv.out_channels == 32 and head.conv_cls.in_channels == 32
    assert head.feature_adaption.conv_offset.weight.shape == (4 * 18, 4, 1, 1)
    # the offsets start at zero (mmdet's dense heads zero every conv_offset)
    assert (head.feature_adaption.conv_offset.weight == 0).all()
    torch.testing.assert_close(head.conv_cls.bias, torch.full((3, ), math.log(0.01 / 0.99)))


def test_forward_and_feature_align():
    head = _head(with_deform=True)
    x = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 2, 2)]
    cls, reg = head(x)
    assert [c.shape for c in cls] == [(2, 3, 4, 4), (2, 3, 2, 2)]
    assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
    # zero offsets: the alignment is the plain conv of the deformable weights, then relu
    align = head.feature_adaption
    plain = torch.nn.functional.conv2d(x[0], align.conv_adaption.weight, padding=1).relu()
    torch.testing.assert_close(align(x[0], reg[0].exp()), plain, rtol=1e-5, atol=1e-6)
    assert isinstance(align, FeatureAlign)


def _points(head, sizes):
    return head.prior_generator.grid_priors(sizes, dtype=torch.float32)


def test_targets_by_hand():
    """Level 0: stride 8, 4x4 points at 4, 12, 20, 28; sqrt-areas in [1, 16]; base edge 4.
    Box [4,4,20,20] (sqrt-area 16): in stride units [0.5,0.5,2.5,2.5], half size 1, fovea
    columns ceil(0.5 + 0.6 - 0.5)=1 .. floor(0.5 + 1.4 - 0.5)=1: only point (12,12), with
    log targets log((12-4)/4) each side. Level 1 (range [8, 64]) also takes it: stride 16,
    [0.25,0.25,1.25,1.25], half 0.5: ceil(0.05)=1 .. floor(0.45)=0: no point. A box
    [0,0,32,32] (sqrt-area 32) only on level 1: [0,0,2,2], columns ceil(0.1)=1..floor(0.9)=0:
    none; with sigma 1: ceil(-0.5)=0 .. floor(1.5)=1, all four points."""
    head = _head()
    gt = torch.tensor([[4., 4., 20., 20.]])
    labels, targets = head.get_targets([gt], [torch.tensor([2])], [(4, 4), (2, 2)],
                                       _points(head, [(4, 4), (2, 2)]))
    assert labels.shape == (20, ) and (labels == 2).nonzero().flatten().tolist() == [5]
    torch.testing.assert_close(targets[5], torch.full((4, ), math.log(2.)))
    head = _head(sigma=1.0)
    big = torch.tensor([[0., 0., 32., 32.]])
    labels, targets = head.get_targets([big], [torch.tensor([1])], [(4, 4), (2, 2)],
                                       _points(head, [(4, 4), (2, 2)]))
    assert (labels[:16] == 3).all() and (labels[16:] == 1).all()
    # point (8, 8) of level 1: distances 8, 8, 24, 24 in base edges of 8, clamped to [1/16, 16]
    torch.testing.assert_close(targets[16], torch.log(torch.tensor([1., 1., 3., 3.])))


def test_smaller_box_wins_where_foveae_overlap():
    head = _head(sigma=1.0, scale_ranges=((1, 64), (8, 64)))
    big, small = torch.tensor([0., 0., 32., 32.]), torch.tensor([0., 0., 16., 16.])
    for order in ([big, small], [small, big]):
        labels, _ = head.get_targets([torch.stack(order)],
                                     [torch.tensor([0, 1]) if order[0] is big else
                                      torch.tensor([1, 0])], [(4, 4), (2, 2)],
                                     _points(head, [(4, 4), (2, 2)]))
        assert labels[0].item() == 1 and labels[15].item() == 0  # (4,4): small; (28,28): big


def _meta(h=32, w=32):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def test_loss_and_no_positive_keeps_the_graph():
    head = _head()
    feats = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 2, 2)]
    gts = [torch.tensor([[4., 4., 20., 20.]]), torch.tensor([[0., 0., 30., 28.]])]
    losses = head.loss(*head(feats), gts, [torch.tensor([2]), torch.tensor([0])],
                       [_meta(), _meta()])
    assert losses['loss_cls'] > 0 and losses['loss_bbox'] > 0
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2, [torch.zeros(0).long()] * 2,
                       [_meta(), _meta()])
    assert losses['loss_bbox'] == 0
    sum(losses.values()).backward()
    # mmdet returns a constant here; ours is a zero the box branch is part of
    assert head.conv_reg.weight.grad is not None and (head.conv_reg.weight.grad == 0).all()


def test_decoding_uses_each_levels_base_edge():
    head = _head(strides=(8, ), base_edge_list=(4, ), scale_ranges=((1, 64), ))
    head.test_cfg['score_thr'] = 0.05
    cls = torch.full((1, 3, 1, 2), -20.)
    cls[0, 0, 0, 1] = 3.
    reg = torch.zeros(1, 4, 1, 2)
    reg[0, :, 0, 1] = torch.log(torch.tensor([1., 0.5, 2., 10.]))
    (dets, labels), = head.get_bboxes([cls], [reg], img_metas=[_meta(8, 24)])
    # point (12, 4): x1 = 12 - 4, y1 = 4 - 2, x2 = 12 + 8, y2 = 4 + 40 clipped to H - 1 = 7
    assert labels.tolist() == [0]
    torch.testing.assert_close(dets[0, :4], torch.tensor([8., 2., 20., 7.]))


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_levels_are_units_every_mode_exact(mode):
    def make():
        head = _head(with_deform=True, norm_cfg=dict(type='GN', num_groups=2))
        with torch.no_grad():
            head.feature_adaption.conv_offset.weight.normal_(0, 0.1)
        return head
    plain = make()
    feats = [torch.randn(2, 8, 4, 4), torch.randn(2, 8, 2, 2)]

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl] + [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters()})

    ref = run(plain)
    cp = make()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    for a, b in zip(got[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, g in ref[1].items():
        assert g is not None, name
        torch.testing.assert_close(got[1][name], g, rtol=0, atol=0, msg=name)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='base_edge_list'):
        _head(base_edge_list=(4, 8, 16))
    with pytest.raises(ValueError, match='in_channels'):
        _head(with_deform=True, in_channels=16)
    assert isinstance(_head(), FoveaHead)
