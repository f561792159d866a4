"""AutoAssignHead and CenterPrior: mmdet's keys and init, points at the cells' corners, the
Gaussian prior by hand, force_topk, the losses' structure, levels as units."""
import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import AutoAssignHead, CenterPrior
from ckptzoo.models.dense_heads.paa_head import levels_to_images
from ckptzoo.registry import build_head


def _head(**kw):
    cfg = dict(type='AutoAssignHead', num_classes=3, in_channels=4, feat_channels=4,
               stacked_convs=1, strides=(8, 16), norm_cfg=dict(type='GN', num_groups=2),
               loss_bbox=dict(type='GIoULoss', loss_weight=5.0))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def test_keys_init_and_points_as_mmdet():
    head = _head()
    keys = list(head.state_dict())
    assert keys[-4:] == ['scales.0.scale', 'scales.1.scale', 'center_prior.mean',
                         'center_prior.sigma']
    assert 'cls_convs.0.conv.bias' in keys  # conv biases even before GN
    assert head.center_prior.mean.shape == (3, 2) and (head.center_prior.sigma == 1).all()
    torch.testing.assert_close(head.conv_cls.bias, torch.full((3, ), math.log(0.02 / 0.98)))
    assert (head.conv_reg.bias == 4).all() and head.conv_reg.weight.std() < 0.02
    points = head.prior_generator.grid_priors([(2, 2), (1, 1)], dtype=torch.float32)[0]
    assert points.tolist() == [[0., 0.], [8., 0.], [0., 8.], [8., 8.]]
    with pytest.raises(ValueError, match='conv_bias'):
        _head(conv_bias=False)


def test_forward_gives_pixel_distances():
    head = _head()
    with torch.no_grad():
        head.scales[1].scale.fill_(-1.)
    cls, reg, obj = head([torch.randn(1, 4, 4, 4), torch.randn(1, 4, 2, 2)])
    assert [o.shape for o in obj] == [(1, 1, 4, 4), (1, 1, 2, 2)]
    assert (reg[1] == 0).all()  # negative scale: relu gives zero
    x = torch.randn(1, 4, 4, 4)
    raw = head.conv_reg(head.reg_convs[0](x))
    torch.testing.assert_close(head([x, torch.randn(1, 4, 2, 2)])[1][0],
                               raw.clamp(min=0) * 8)


def test_center_prior_by_hand():
    """Box [0,0,16,16] (centre (8,8)) of class 1 with mean (0.5, 0) and sigma (1, 2) strides:
    the point (8,0) on the stride-8 level is (0, -1) strides from the centre, so its weight
    is exp(-(0-0.5)^2 / 2) * exp(-(-1)^2 / 8); points outside the mask weigh 0."""
    prior = CenterPrior(num_classes=2, strides=(8, ))
    with torch.no_grad():
        prior.mean[1] = torch.tensor([0.5, 0.])
        prior.sigma[1] = torch.tensor([1., 2.])
    points = [torch.tensor([[8., 0.], [0., 0.]])]
    inside = torch.tensor([[True], [False]])
    w, mask = prior(points, torch.tensor([[0., 0., 16., 16.]]), torch.tensor([1]), inside)
    expected = math.exp(-0.25 / 2) * math.exp(-1 / 8)
    torch.testing.assert_close(w, torch.tensor([[expected], [0.]]))
    assert mask.tolist() == [[True], [False]]
    empty_w, _ = prior(points, torch.zeros(0, 4), torch.zeros(0).long(), inside[:, :0])
    assert empty_w.shape == (2, 0)


def test_force_topk_gives_a_pointless_box_its_nearest_points():
    prior = CenterPrior(force_topk=True, topk=2, num_classes=1, strides=(8, ))
    points = [torch.tensor([[0., 0.], [8., 0.], [16., 0.], [24., 0.]])]
    box = torch.tensor([[16.5, -1., 17.5, 1.]])  # centre (17, 0): no point inside
    w, mask = prior(points, box, torch.tensor([0]), torch.zeros(4, 1, dtype=torch.bool))
    assert mask[:, 0].tolist() == [False, False, True, True]  # 1 and 7 px from the centre
    assert (w[[0, 1]] == 0).all() and (w[[2, 3]] > 0).all()


def test_levels_to_images():
    a = torch.arange(2 * 3 * 2 * 2.).reshape(2, 3, 2, 2)
    b = torch.arange(2 * 3 * 1 * 1.).reshape(2, 3, 1, 1) + 100
    imgs = levels_to_images([a, b])
    assert [i.shape for i in imgs] == [(5, 3), (5, 3)]
    torch.testing.assert_close(imgs[1][:4], a[1].permute(1, 2, 0).reshape(4, 3))
    torch.testing.assert_close(imgs[1][4], b[1, :, 0, 0])


def _meta():
    return dict(img_shape=(32, 32, 3), pad_shape=(32, 32, 3), ori_shape=(32, 32, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def test_losses_and_their_gradients():
    head = _head()
    feats = [torch.randn(2, 4, 4, 4), torch.randn(2, 4, 2, 2)]
    gts = [torch.tensor([[2., 3., 20., 25.], [12., 10., 30., 30.]]), torch.zeros(0, 4)]
    labels = [torch.tensor([0, 2]), torch.zeros(0).long()]
    losses = head.loss(*head(feats), gts, labels, [_meta(), _meta()])
    assert list(losses) == ['loss_pos', 'loss_neg', 'loss_center']
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    sum(losses.values()).backward()
    assert head.center_prior.mean.grad.abs().sum() > 0
    assert head.center_prior.sigma.grad[[0, 2]].abs().sum() > 0
    assert (head.center_prior.sigma.grad[1] == 0).all()  # no box of class 1
    # no box at all: loss_pos and loss_center are zeros that keep the graph
    head.zero_grad()
    losses = head.loss(*head(feats), [gts[1]] * 2, [labels[1]] * 2, [_meta(), _meta()])
    assert losses['loss_pos'] == 0 and losses['loss_center'] == 0 and losses['loss_neg'] > 0
    sum(losses.values()).backward()
    assert head.center_prior.mean.grad is not None


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_levels_are_units_every_mode_exact(mode):
    plain = _head()
    feats = [torch.randn(2, 4, 4, 4), torch.randn(2, 4, 2, 2)]

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl] + [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters() if p.grad is not None})

    ref = run(plain)
    cp = _head()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    for a, b in zip(got[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert got[1].keys() == ref[1].keys()
    for name, g in ref[1].items():
        torch.testing.assert_close(got[1][name], g, rtol=0, atol=0, msg=name)
    assert isinstance(cp, AutoAssignHead)
