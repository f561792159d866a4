"""DiceLoss (mmdet 2.28.2's) by hand: both forms, weights, reductions, refusals."""
import pytest
import torch

from ckptzoo.models.losses import DiceLoss, dice_loss
from ckptzoo.registry import build_loss


def _by_hand(p, t, eps, naive):
    p, t = p.flatten(1), t.flatten(1).float()
    a = (p * t).sum(1)
    if naive:
        return 1 - (2 * a + eps) / (p.sum(1) + t.sum(1) + eps)
    return 1 - 2 * a / ((p * p).sum(1) + eps + (t * t).sum(1) + eps)


@pytest.mark.parametrize('naive', [False, True])
def test_dice_loss_forms(naive):
    torch.manual_seed(0)
    logits = torch.randn(4, 6, 5)
    target = torch.rand(4, 6, 5) > 0.5
    loss = build_loss(dict(type='DiceLoss', naive_dice=naive, reduction='none', eps=1e-3))
    expected = _by_hand(logits.sigmoid(), target, 1e-3, naive)
    torch.testing.assert_close(loss(logits, target), expected)
    # activate=False takes probabilities
    probs = DiceLoss(activate=False, naive_dice=naive, loss_weight=2.0)(logits.sigmoid(), target)
    torch.testing.assert_close(probs, 2 * expected.mean())


def test_dice_loss_weight_and_avg_factor():
    torch.manual_seed(1)
    pred = torch.rand(3, 8)
    target = torch.rand(3, 8) > 0.3
    weight = torch.tensor([1.0, 0.0, 2.0])
    per_mask = _by_hand(pred, target, 1e-3, False)
    out = dice_loss(pred, target, weight, avg_factor=2.5)
    torch.testing.assert_close(out, (per_mask * weight).sum() /
                               (2.5 + torch.finfo(torch.float32).eps))
    summed = DiceLoss(activate=False)(pred, target, reduction_override='sum')
    torch.testing.assert_close(summed, per_mask.sum())


def test_dice_loss_perfect_match_is_near_zero():
    target = torch.zeros(2, 4, 4, dtype=torch.bool)
    target[:, 1:3, 1:3] = True
    loss = DiceLoss(activate=False, reduction='none')(target.float(), target)
    assert (loss.abs() < 1e-3).all()


def test_dice_loss_refusals():
    with pytest.raises(ValueError, match='use_sigmoid'):
        DiceLoss(use_sigmoid=False)
    DiceLoss(use_sigmoid=False, activate=False)  # probabilities in: allowed
    with pytest.raises(ValueError, match='reduction'):
        DiceLoss(reduction='avg')
    with pytest.raises(ValueError, match='one value per mask'):
        dice_loss(torch.rand(3, 4), torch.rand(3, 4), weight=torch.ones(3, 1))
    with pytest.raises(ValueError, match='one size'):
        dice_loss(torch.rand(3, 4), torch.rand(3, 5))
