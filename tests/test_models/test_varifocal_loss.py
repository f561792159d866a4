import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import MODELS


def _by_hand(pred, target, alpha=0.75, gamma=2.0, iou_weighted=True):
    p = pred.sigmoid()
    pos = (target > 0).float()
    weight = (target if iou_weighted else torch.ones_like(target)) * pos + \
        alpha * (p - target).abs()**gamma * (1 - pos)
    bce = -(target * torch.log(p) + (1 - target) * torch.log(1 - p))
    return bce * weight


def test_loss_by_hand_and_reductions():
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(6, 3, generator=g)
    target = torch.zeros(6, 3)
    target[1, 2], target[4, 0] = 0.7, 0.3
    loss = MODELS.build(dict(type='VarifocalLoss', loss_weight=2.0))
    expected = _by_hand(pred, target)
    torch.testing.assert_close(loss(pred, target), 2 * expected.mean())
    torch.testing.assert_close(loss(pred, target, avg_factor=4.), 2 * expected.sum() / 4)
    torch.testing.assert_close(loss(pred, target, reduction_override='none'), 2 * expected)
    weight = torch.rand(6, 3, generator=g)
    torch.testing.assert_close(loss(pred, target, weight, reduction_override='sum'),
                               2 * (expected * weight).sum())
    plain = MODELS.build(dict(type='VarifocalLoss', iou_weighted=False, alpha=0.5, gamma=1.0,
                              reduction='sum'))
    torch.testing.assert_close(plain(pred, target),
                               _by_hand(pred, target, 0.5, 1.0, False).sum())
    # the positives' gradient does not vanish when p equals the target (unlike focal's)
    pred.requires_grad_()
    MODELS.build(dict(type='VarifocalLoss'))(pred, target).backward()
    assert torch.isfinite(pred.grad).all()
    torch.testing.assert_close(F.binary_cross_entropy_with_logits(pred, target, reduction='none'),
                               -(target * torch.log(pred.sigmoid()) + (1 - target)
                                 * torch.log(1 - pred.sigmoid())))


def test_bad_arguments_are_named():
    with pytest.raises(NotImplementedError, match='use_sigmoid'):
        MODELS.build(dict(type='VarifocalLoss', use_sigmoid=False))
    with pytest.raises(ValueError, match='alpha'):
        MODELS.build(dict(type='VarifocalLoss', alpha=-1.))
    with pytest.raises(ValueError, match='one shape'):
        MODELS.build(dict(type='VarifocalLoss'))(torch.zeros(2, 3), torch.zeros(2))
