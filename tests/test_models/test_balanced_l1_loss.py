"""BalancedL1Loss (ckptzoo/models/losses/balanced_l1_loss.py) against its closed form."""
import math

import pytest
import torch

from ckptzoo.registry import build_loss


def _closed_form(d, alpha=0.5, gamma=1.5, beta=1.0):
    b = math.e ** (gamma / alpha) - 1
    if d < beta:
        return alpha / b * (b * d + 1) * math.log(b * d / beta + 1) - alpha * d
    return gamma * d + gamma / b - alpha * beta


def test_values_against_the_closed_form_and_continuity_at_beta():
    diffs = [0., 0.3, -0.7, 1.0, 2.5]
    pred = torch.tensor(diffs)[:, None]
    loss = build_loss(dict(type='BalancedL1Loss', reduction='none'))(pred, torch.zeros(5, 1))
    torch.testing.assert_close(loss.flatten(), torch.tensor([_closed_form(abs(d))
                                                             for d in diffs]))
    # the two pieces meet at |d| = beta (the choice of b makes them continuous)
    below = torch.tensor([[1 - 1e-4]])
    near = build_loss(dict(type='BalancedL1Loss', reduction='none'))(below, torch.zeros(1, 1))
    assert abs(near.item() - _closed_form(1.0)) < 1e-3


def test_arguments_weight_and_avg_factor():
    pred, target = torch.tensor([[0.5, 2.0]]), torch.zeros(1, 2)
    cfg = dict(type='BalancedL1Loss', alpha=0.3, gamma=2.0, beta=0.8, loss_weight=2.0)
    loss = build_loss(cfg)(pred, target, torch.tensor([[1., 3.]]), avg_factor=4.)
    expected = 2.0 * (_closed_form(0.5, 0.3, 2.0, 0.8) + 3 * _closed_form(2.0, 0.3, 2.0, 0.8)) / 4
    torch.testing.assert_close(loss, torch.tensor(expected))
    empty = build_loss(cfg)(torch.zeros(0, 4, requires_grad=True), torch.zeros(0, 4))
    assert empty.item() == 0 and empty.requires_grad


@pytest.mark.parametrize('key', ['alpha', 'gamma', 'beta'])
def test_bad_arguments_are_refused(key):
    with pytest.raises(ValueError, match=key):
        build_loss(dict(type='BalancedL1Loss', **{key: 0}))
