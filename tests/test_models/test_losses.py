import math

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_loss

LN2 = math.log(2)


def _focal(**kw):
    cfg = dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25, loss_weight=1.0)
    cfg.update(kw)
    return build_loss(cfg)


def test_focal_loss_by_hand():
    # logit 0 -> p = 0.5: positive 0.25 * 0.5**2 * ln2, negative 0.75 * 0.5**2 * ln2
    pred = torch.zeros(2, 3)
    labels = torch.tensor([1, 3])  # 3 = background (num_classes)
    loss = _focal(reduction='none')(pred, labels)
    pos, neg = 0.25 * 0.25 * LN2, 0.75 * 0.25 * LN2
    torch.testing.assert_close(loss, torch.tensor([[neg, pos, neg], [neg, neg, neg]]))
    torch.testing.assert_close(_focal(reduction='sum')(pred, labels), torch.tensor(pos + 5 * neg))
    torch.testing.assert_close(_focal()(pred, labels), torch.tensor((pos + 5 * neg) / 6))


def test_focal_loss_equals_formula():
    torch.manual_seed(0)
    pred = torch.randn(20, 4) * 3
    labels = torch.randint(0, 5, (20, ))
    weight = torch.rand(20)
    gamma, alpha = 1.5, 0.3
    p = pred.sigmoid()
    t = F.one_hot(labels, 5)[:, :4].float()
    direct = -(alpha * t * (1 - p)**gamma * torch.log(p)
               + (1 - alpha) * (1 - t) * p**gamma * torch.log(1 - p))
    expected = 2.0 * (direct * weight[:, None]).sum() / 7
    loss = _focal(gamma=gamma, alpha=alpha, loss_weight=2.0)(pred, labels, weight, avg_factor=7)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=0)


def test_focal_loss_only_sigmoid():
    with pytest.raises(NotImplementedError, match='use_sigmoid'):
        _focal(use_sigmoid=False)


def test_avg_factor_with_sum_is_an_error():
    with pytest.raises(ValueError, match='avg_factor'):
        _focal(reduction='sum')(torch.zeros(2, 3), torch.tensor([0, 1]), avg_factor=2)


def test_l1_and_smooth_l1_by_hand():
    pred = torch.tensor([[0., 0., 0., 0.]])
    target = torch.tensor([[0.5, -2., 0., 1.]])
    weight = torch.tensor([[1., 1., 0., 2.]])
    l1 = build_loss(dict(type='L1Loss', loss_weight=2.0))
    torch.testing.assert_close(l1(pred, target), torch.tensor(2.0 * 3.5 / 4))
    torch.testing.assert_close(l1(pred, target, weight, avg_factor=2),
                               torch.tensor(2.0 * (0.5 + 2 + 2) / 2))
    smooth = build_loss(dict(type='SmoothL1Loss', beta=1.0, reduction='sum'))
    # 0.5 -> 0.5 * 0.25 = 0.125; 2 -> 2 - 0.5 = 1.5; 1 -> 1 - 0.5 = 0.5
    torch.testing.assert_close(smooth(pred, target), torch.tensor(0.125 + 1.5 + 0.5))


def test_empty_regression_target_keeps_graph():
    pred = torch.zeros(0, 4, requires_grad=True)
    loss = build_loss(dict(type='L1Loss'))(pred, torch.zeros(0, 4))
    assert loss.item() == 0 and loss.requires_grad


def test_giou_by_hand():
    giou = build_loss(dict(type='GIoULoss', reduction='none'))
    pred = torch.tensor([[0., 0., 1., 1.], [0., 0., 1., 1.]])
    target = torch.tensor([[0., 0., 1., 1.], [2., 0., 3., 1.]])
    # identical: 0; disjoint: IoU 0, hull 3, union 2 -> 1 - (0 - 1/3)
    torch.testing.assert_close(giou(pred, target), torch.tensor([0., 4 / 3]), rtol=0,
                               atol=1e-5)
    mean = build_loss(dict(type='GIoULoss'))(pred, target, torch.ones(2, 4), avg_factor=4)
    torch.testing.assert_close(mean, torch.tensor(4 / 3 / 4), rtol=0, atol=1e-5)


def test_cross_entropy():
    torch.manual_seed(0)
    pred = torch.randn(6, 3)
    labels = torch.tensor([0, 1, 2, 3, 3, 1])  # 3 = background for the sigmoid form
    sig = build_loss(dict(type='CrossEntropyLoss', use_sigmoid=True))(pred, labels)
    onehot = F.one_hot(labels, 4)[:, :3].float()
    torch.testing.assert_close(sig, F.binary_cross_entropy_with_logits(pred, onehot))
    soft = build_loss(dict(type='CrossEntropyLoss', loss_weight=0.5))(pred, labels.clamp(max=2))
    torch.testing.assert_close(soft, 0.5 * F.cross_entropy(pred, labels.clamp(max=2)))


def test_mask_cross_entropy_picks_the_label_channel():
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(3, 4, 5, 5, generator=gen)
    target = torch.rand(3, 5, 5, generator=gen)
    labels = torch.tensor([3, 0, 3])
    loss = build_loss(dict(type='CrossEntropyLoss', use_mask=True, loss_weight=0.5))(
        pred, target, labels)
    assert loss.shape == (1, )  # mmdet's shape
    want = 0.5 * F.binary_cross_entropy_with_logits(pred[[0, 1, 2], [3, 0, 3]], target)
    torch.testing.assert_close(loss[0], want)


def test_mask_cross_entropy_class_weight_weighs_each_roi_by_its_class():
    """mmdet broadcast the (C, ) class weights over the mask width; each RoI gets its
    class's weight here."""
    pred = torch.randn(2, 3, 4, 4)
    target = torch.rand(2, 4, 4)
    labels = torch.tensor([0, 2])
    loss = build_loss(dict(type='CrossEntropyLoss', use_mask=True,
                           class_weight=[1.0, 5.0, 3.0]))(pred, target, labels)
    per_roi = F.binary_cross_entropy_with_logits(pred[[0, 1], [0, 2]], target,
                                                 reduction='none').mean(dim=(1, 2))
    torch.testing.assert_close(loss[0], (1.0 * per_roi[0] + 3.0 * per_roi[1]) / 2)


@pytest.mark.parametrize('cfg,call,words', [
    (dict(use_mask=True, use_sigmoid=True), {}, 'not both'),
    (dict(use_mask=True, ignore_index=255), {}, 'ignore_index'),
    (dict(use_mask=True), dict(reduction_override='sum'), "reduction='mean'"),
    (dict(use_mask=True), dict(avg_factor=3), 'avg_factor'),
    (dict(use_mask=True), dict(weight=None), 'class of each RoI'),
])
def test_mask_cross_entropy_bad_use(cfg, call, words):
    with pytest.raises(ValueError, match=words):
        loss = build_loss(dict(type='CrossEntropyLoss', **cfg))
        kwargs = dict(weight=torch.tensor([0, 1]))
        kwargs.update(call)
        loss(torch.randn(2, 3, 4, 4), torch.rand(2, 4, 4), **kwargs)
