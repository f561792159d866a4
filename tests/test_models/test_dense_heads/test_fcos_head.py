"""FCOSHead: mmdet's keys, targets worked by hand (regress ranges, smallest box, centre
sampling, norm_on_bbox), centerness, the losses, levels as units with their Scale, errors."""
import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import FCOSHead
from ckptzoo.registry import build_head

TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _head(**kw):
    cfg = dict(type='FCOSHead', num_classes=3, in_channels=4, feat_channels=4, stacked_convs=2,
               strides=(8, 16), regress_ranges=((-1, 16), (16, 1e8)),
               norm_cfg=dict(type='GN', num_groups=2, requires_grad=True), test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def test_keys_as_mmdet():
    head = _head()
    assert list(head.state_dict()) == [
        'cls_convs.0.conv.weight', 'cls_convs.0.gn.weight', 'cls_convs.0.gn.bias',
        'cls_convs.1.conv.weight', 'cls_convs.1.gn.weight', 'cls_convs.1.gn.bias',
        'reg_convs.0.conv.weight', 'reg_convs.0.gn.weight', 'reg_convs.0.gn.bias',
        'reg_convs.1.conv.weight', 'reg_convs.1.gn.weight', 'reg_convs.1.gn.bias',
        'conv_cls.weight', 'conv_cls.bias', 'conv_reg.weight', 'conv_reg.bias',
        'conv_centerness.weight', 'conv_centerness.bias', 'scales.0.scale', 'scales.1.scale']
    assert isinstance(head, FCOSHead) and [s.scale.item() for s in head.scales] == [1., 1.]
    torch.testing.assert_close(head.conv_cls.bias, torch.full((3, ), math.log(0.01 / 0.99)))
    # mmdet's defaults: 5 strides, 5 ranges, GN(32) towers
    default = FCOSHead(2, 32, feat_channels=32)
    assert default.strides == (4, 8, 16, 32, 64) and len(default.regress_ranges) == 5
    assert default.cls_convs[0].norm_cfg['type'] == 'GN' and default.norm_cfg['num_groups'] == 32


@pytest.mark.parametrize('norm_on_bbox', [False, True])
def test_forward_scales_each_level(norm_on_bbox):
    head = _head(norm_on_bbox=norm_on_bbox)
    with torch.no_grad():
        head.scales[1].scale.fill_(0.5)
    feats = [torch.randn(2, 4, 6, 5), torch.randn(2, 4, 3, 3)]
    cls, reg, ctr = head(feats)
    assert [c.shape for c in cls] == [(2, 3, 6, 5), (2, 3, 3, 3)]
    assert [r.shape for r in reg] == [(2, 4, 6, 5), (2, 4, 3, 3)]
    assert [c.shape for c in ctr] == [(2, 1, 6, 5), (2, 1, 3, 3)]
    raw = head.conv_reg(_tower(head.reg_convs, feats[1])) * 0.5
    expected = raw.clamp(min=0) if norm_on_bbox else raw.exp()
    torch.testing.assert_close(reg[1], expected)
    head.eval()
    with torch.no_grad():
        reg_eval = head(feats)[1][1]
    # at test time norm_on_bbox predictions are in pixels (times the stride)
    torch.testing.assert_close(reg_eval, expected * (16 if norm_on_bbox else 1))


def _tower(convs, x):
    for conv in convs:
        x = conv(x)
    return x


def test_centerness_from_the_regression_tower():
    head = _head(centerness_on_reg=True)
    x = torch.randn(1, 4, 3, 3)
    ctr = head([torch.randn(1, 4, 6, 6), x])[2][1]
    torch.testing.assert_close(ctr, head.conv_centerness(_tower(head.reg_convs, x)))


def _points(head, sizes):
    return head.prior_generator.grid_priors(sizes, dtype=torch.float32)


def test_targets_by_hand():
    """Level 0: stride 8, 2x2 points (4,4) (12,4) (4,12) (12,12), range (-1, 16]; level 1:
    stride 16, one point (8,8), range (16, inf). Box A [0,0,20,20] (area 400), box B
    [2,2,14,14] (area 144). (4,4): in both, distances to B (2,2,10,10) max 10 in range, to A
    max 16 in range -> B, the smaller. (12,4): in A (12,4,8,16) max 16 -> A; in B
    (10,2,2,10) max 10 -> B. (4,12): B. (12,12): B (max 10) vs A (max 12) -> B. Level 1
    (8,8): to A max 12, to B max 6: not above 16 -> background."""
    head = _head()
    gt = torch.tensor([[0., 0., 20., 20.], [2., 2., 14., 14.]])
    labels, targets = head.get_targets(_points(head, [(2, 2), (1, 1)]), [gt],
                                       [torch.tensor([0, 2])])
    assert labels[0].tolist() == [2, 2, 2, 2] and labels[1].tolist() == [3]
    torch.testing.assert_close(targets[0], torch.tensor(
        [[2., 2., 10., 10.], [10., 2., 2., 10.], [2., 10., 10., 2.], [10., 10., 2., 2.]]))
    # two images: each level's points of image 0, then of image 1; an image without boxes
    labels, targets = head.get_targets(_points(head, [(2, 2), (1, 1)]), [gt, gt[:0]],
                                       [torch.tensor([0, 2]), torch.zeros(0).long()])
    assert labels[0].tolist() == [2, 2, 2, 2, 3, 3, 3, 3] and labels[1].tolist() == [3, 3]
    assert (targets[0][4:] == 0).all()
    # norm_on_bbox: targets in strides
    head = _head(norm_on_bbox=True)
    _, normed = head.get_targets(_points(head, [(2, 2), (1, 1)]), [gt],
                                 [torch.tensor([0, 2])])
    torch.testing.assert_close(normed[0][0], torch.tensor([2., 2., 10., 10.]) / 8)


def test_center_sampling_keeps_the_points_near_the_centre():
    """One box [0,0,32,32] (centre (16,16)) on a stride-8 4x4 grid, every range open: all 16
    points are inside the box; with centre sampling of radius 1 (8 px) only those strictly
    within (8, 24): (12,12) (20,12) (12,20) (20,20); radius 0.25 (2 px): none."""
    gt = [torch.tensor([[0., 0., 32., 32.]])]
    for sampling, radius, expected in ((False, 1.5, 16), (True, 1., 4), (True, 0.25, 0)):
        head = _head(strides=(8, ), regress_ranges=((-1, 1e8), ), center_sampling=sampling,
                     center_sample_radius=radius)
        labels, _ = head.get_targets(_points(head, [(4, 4)]), gt, [torch.tensor([1])])
        assert int((labels[0] == 1).sum()) == expected
        if expected == 4:
            assert (labels[0] == 1).nonzero().reshape(-1).tolist() == [5, 6, 9, 10]


def test_centerness_target():
    head = _head()
    t = torch.tensor([[2., 4., 8., 4.], [1., 1., 1., 1.]])
    torch.testing.assert_close(head.centerness_target(t), torch.tensor([0.5, 1.]))
    assert head.centerness_target(t[:0]).shape == (0, )


def _meta(h=32, w=32):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def test_loss_by_hand():
    """One level (stride 8, 2x2 points), box [0,0,16,16]: the four points lie in the box with
    largest distance 12 <= 16, all positive, each with centerness target
    sqrt(4/12 * 4/12) = 1/3. Focal loss / 4 positives, IoU loss weighted by centerness over
    its sum, centerness cross entropy / 4."""
    head = _head(strides=(8, ), regress_ranges=((-1, 16), ),
                 loss_bbox=dict(type='IoULoss', loss_weight=1.0))
    torch.manual_seed(1)
    cls = torch.randn(1, 3, 2, 2, requires_grad=True)
    reg = torch.rand(1, 4, 2, 2) * 4 + 2
    ctr = torch.randn(1, 1, 2, 2, requires_grad=True)
    gt = torch.tensor([[0., 0., 16., 16.]])
    losses = head.loss([cls], [reg], [ctr], [gt], [torch.tensor([1])], [_meta()])
    target = torch.zeros(4, 3)
    target[:, 1] = 1
    p = cls.permute(0, 2, 3, 1).reshape(-1, 3).sigmoid()
    pt = torch.where(target == 1, p, 1 - p)
    alpha = torch.where(target == 1, torch.tensor(0.25), torch.tensor(0.75))
    focal = (-alpha * (1 - pt) ** 2 * pt.log()).sum() / 4
    torch.testing.assert_close(losses['loss_cls'], focal)
    d = torch.tensor([[4., 4., 12., 12.], [12., 4., 4., 12.], [4., 12., 12., 4.],
                      [12., 12., 4., 4.]])
    ctr_t = torch.full((4, ), 1 / 3)
    pred = reg.permute(0, 2, 3, 1).reshape(-1, 4)
    inter = torch.minimum(pred, d)
    iw, ih = inter[:, 0] + inter[:, 2], inter[:, 1] + inter[:, 3]
    ious = iw * ih / ((pred[:, 0] + pred[:, 2]) * (pred[:, 1] + pred[:, 3]) + 256 - iw * ih)
    torch.testing.assert_close(losses['loss_bbox'],
                               (-ious.clamp(min=1e-6).log() * ctr_t).sum() / ctr_t.sum())
    logit = ctr.reshape(-1)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logit, ctr_t, reduction='sum')
    torch.testing.assert_close(losses['loss_centerness'], bce / 4)


def test_loss_without_positives_keeps_the_graph():
    head = _head()
    feats = [torch.randn(1, 4, 4, 4), torch.randn(1, 4, 2, 2)]
    losses = head.loss(*head(feats), [torch.zeros(0, 4)], [torch.zeros(0).long()], [_meta()])
    assert losses['loss_bbox'] == 0 and losses['loss_centerness'] == 0
    assert losses['loss_cls'] > 0
    sum(losses.values()).backward()
    assert head.conv_reg.weight.grad is not None and head.conv_centerness.weight.grad is not None


def test_detections_are_scored_by_centerness():
    head = _head(strides=(8, ), regress_ranges=((-1, 1e8), ))
    cls = torch.full((1, 3, 1, 2), -20.)
    cls[0, 2, 0, 0] = 1.
    reg = torch.ones(1, 4, 1, 2)
    ctr = torch.full((1, 1, 1, 2), -1.)
    (dets, labels), = head.get_bboxes([cls], [reg], [ctr], img_metas=[_meta(8, 16)])
    assert labels[0] == 2
    torch.testing.assert_close(dets[0], torch.tensor(
        [3., 3., 5., 5., torch.sigmoid(torch.tensor(1.)) * torch.sigmoid(torch.tensor(-1.))]))


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_levels_with_their_scale_are_units_and_every_mode_is_exact(mode):
    plain = _head(norm_on_bbox=True, centerness_on_reg=True)
    with torch.no_grad():
        for i, s in enumerate(plain.scales):
            s.scale.fill_(0.7 + i)
    feats = [torch.randn(2, 4, 6, 5), torch.randn(2, 4, 3, 3)]

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl], [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters()})

    ref = run(plain)
    assert all(ref[2][f'scales.{i}.scale'].abs() > 0 for i in range(2))
    cp = _head(norm_on_bbox=True, centerness_on_reg=True)
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, g in ref[2].items():
        torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)
    assert _head(with_cp=True).checkpoint_plan() == {'level0': 'full', 'level1': 'full'}


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='center_sample_radius'):
        _head(center_sample_radius=0)
    head = _head(regress_ranges=((-1, 64), ))
    with pytest.raises(ValueError, match='regress_ranges'):
        head.get_targets(_points(head, [(2, 2), (1, 1)]), [torch.zeros(0, 4)],
                         [torch.zeros(0).long()])
    with pytest.raises(ValueError, match='centernesses'):
        _head().loss([torch.zeros(1, 3, 2, 2)], [torch.zeros(1, 4, 2, 2)], [], [], [], [])


def test_deformable_last_conv_starts_as_a_plain_conv():
    """mmdet's BaseDenseHead.init_weights zeroes each conv_offset after the Normal init over
    'Conv2d' layers (which reaches it); so do we, at construction."""
    head = _head(dcn_on_last_conv=True)
    for tower in (head.cls_convs, head.reg_convs):
        offset = tower[-1].conv.conv_offset
        assert (offset.weight == 0).all() and (offset.bias == 0).all()
        assert tower[0].conv.weight.std() > 0
