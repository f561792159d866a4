"""GaussianFocalLoss (mmdet 2.28.2's) by hand."""
import pytest
import torch

from ckptzoo.registry import MODELS


def test_by_hand():
    pred = torch.tensor([0.9, 0.2, 0.6, 0.1])
    target = torch.tensor([1.0, 0.5, 0.0, 0.8])
    eps = 1e-12
    expected = torch.stack([
        -torch.log(pred[0] + eps) * (1 - pred[0]) ** 2,
        -torch.log(1 - pred[1] + eps) * pred[1] ** 2 * 0.5 ** 4,
        -torch.log(1 - pred[2] + eps) * pred[2] ** 2,
        -torch.log(1 - pred[3] + eps) * pred[3] ** 2 * 0.2 ** 4])
    loss = MODELS.build(dict(type='GaussianFocalLoss', loss_weight=2.0))
    torch.testing.assert_close(loss(pred, target), 2 * expected.mean())
    torch.testing.assert_close(loss(pred, target, avg_factor=3.), 2 * expected.sum() / 3)
    torch.testing.assert_close(loss(pred, target, reduction_override='none'), 2 * expected)
    alt = MODELS.build(dict(type='GaussianFocalLoss', alpha=1.0, gamma=2.0, reduction='sum'))
    assert alt(pred, target).item() == pytest.approx(
        float(-torch.log(pred[0]) * 0.1 - torch.log(1 - pred[1]) * 0.2 * 0.25
              - torch.log(1 - pred[2]) * 0.6 - torch.log(1 - pred[3]) * 0.1 * 0.04), rel=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match='reduction'):
        MODELS.build(dict(type='GaussianFocalLoss', reduction='avg'))
    with pytest.raises(ValueError, match='one shape'):
        MODELS.build(dict(type='GaussianFocalLoss'))(torch.rand(2, 3), torch.rand(3, 2))
