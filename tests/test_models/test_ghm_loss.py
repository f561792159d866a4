"""GHMC / GHMR (mmdet 2.x ``ghm_loss``) by hand: the bin densities, the moving average in
``acc_sum``, the state-dict buffers, and RetinaHead trained with them."""
import math

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_loss
from tests.helpers.retina_variants import build, loss_and_grads, retina_head_cfg


def test_buffers_are_mmdets():
    c = build_loss(dict(type='GHMC', bins=30, momentum=0.75))
    assert list(c.state_dict()) == ['edges', 'acc_sum'] and c.edges.shape == (31, )
    assert c.edges[-1].item() == pytest.approx(1 + 1e-6)
    r = build_loss(dict(type='GHMR', mu=0.02, bins=10))
    assert list(r.state_dict()) == ['edges'] and r.edges[-1].item() == 1e3


def test_ghmc_weights_by_hand():
    """Two bins: g = |sigmoid(pred) - target|. Elements with g 0.12, 0.12, 0.88 and one
    invalid: tot = 3 valid, bin 0 holds 2, bin 1 holds 1, two non-empty bins."""
    loss = build_loss(dict(type='GHMC', bins=2))
    p = torch.tensor([0.12, 0.12, 0.12, 0.12])
    pred = torch.log(p / (1 - p))[:, None]
    target = torch.tensor([[0.], [0.], [1.], [0.]])
    weight = torch.tensor([[1.], [1.], [1.], [0.]])
    got = loss(pred, target, weight)
    bce = F.binary_cross_entropy_with_logits(pred, target, reduction='none').view(-1)
    w = torch.tensor([3 / 2, 3 / 2, 3 / 1, 0.]) / 2
    torch.testing.assert_close(got, (bce * w).sum() / 3)


def test_ghmc_index_targets_and_background():
    loss = build_loss(dict(type='GHMC', bins=5))
    pred = torch.randn(6, 3)
    labels = torch.tensor([0, 3, 2, 3, 1, 3])  # 3: background
    onehot = F.one_hot(labels, 4)[:, :3].float()
    torch.testing.assert_close(loss(pred, labels, torch.ones(6)),
                               loss(pred, onehot, torch.ones(6, 3)))


def test_momentum_moving_average():
    loss = build_loss(dict(type='GHMC', bins=1, momentum=0.5))
    pred, target, weight = torch.zeros(4, 1), torch.zeros(4, 1), torch.ones(4, 1)
    loss(pred, target, weight)
    assert loss.acc_sum.tolist() == [2.0]  # 0.5 * 0 + 0.5 * 4
    loss(pred, target, weight)
    assert loss.acc_sum.tolist() == [3.0]


def test_ghmr_by_hand():
    loss = build_loss(dict(type='GHMR', mu=0.02, bins=10, loss_weight=2.0))
    pred = torch.tensor([[0.1, 0.0, 0.0, 0.0]])
    target = torch.zeros(1, 4)
    weight = torch.ones(1, 4)
    asl1 = torch.sqrt(pred**2 + 0.02**2) - 0.02
    # g = |d| / sqrt(d^2 + mu^2): 0.98 (bin 9) and 0 (bin 0, three elements); tot 4
    w = torch.tensor([4 / 1, 4 / 3, 4 / 3, 4 / 3]) / 2
    torch.testing.assert_close(loss(pred, target, weight, avg_factor=123.),
                               2.0 * (asl1.view(-1) * w).sum() / 4)


def test_bad_arguments():
    with pytest.raises(NotImplementedError, match='use_sigmoid=True'):
        build_loss(dict(type='GHMC', use_sigmoid=False))
    with pytest.raises(ValueError, match='bins must be a positive int'):
        build_loss(dict(type='GHMR', bins=0))
    with pytest.raises(ValueError, match=r'momentum must be in \[0, 1\)'):
        build_loss(dict(type='GHMC', momentum=1.0))
    with pytest.raises(ValueError, match='reduction'):
        build_loss(dict(type='GHMC', reduction='avg'))


def test_retina_head_with_ghm_losses():
    head = build(retina_head_cfg(
        loss_cls=dict(type='GHMC', bins=30, momentum=0.75, use_sigmoid=True, loss_weight=1.0),
        loss_bbox=dict(type='GHMR', mu=0.02, bins=10, momentum=0.7, loss_weight=10.0)))
    assert 'loss_cls.acc_sum' in head.state_dict() and 'loss_bbox.edges' in head.state_dict()
    losses, grads, buffers = loss_and_grads(head)
    assert all(math.isfinite(x) and x > 0 for v in losses.values() for x in v)
    assert buffers['loss_cls.acc_sum'].sum() > 0 and buffers['loss_bbox.acc_sum'].sum() > 0
    assert grads['retina_reg.weight'].abs().sum() > 0
