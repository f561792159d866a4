"""GaussianFocalLoss (mmdet's) by hand."""
import torch

from ckptzoo.models.losses import GaussianFocalLoss
from ckptzoo.registry import build_loss


def test_gaussian_focal_loss_by_hand():
    """A peak (target 1) is a focal positive; elsewhere the negative is weighted by
    (1 - target) ** gamma."""
    pred = torch.tensor([0.8, 0.3, 0.6])
    target = torch.tensor([1.0, 0.5, 0.0])
    loss = GaussianFocalLoss(alpha=2.0, gamma=4.0, reduction='none')(pred, target)
    expected = torch.stack([-torch.log(pred[0] + 1e-12) * 0.2 ** 2,
                            -torch.log(0.7 + torch.tensor(1e-12)) * 0.09 * 0.5 ** 4,
                            -torch.log(0.4 + torch.tensor(1e-12)) * 0.36])
    torch.testing.assert_close(loss, expected)
    summed = build_loss(dict(type='GaussianFocalLoss', loss_weight=2.0))(pred, target,
                                                                      avg_factor=2)
    torch.testing.assert_close(summed, 2 * expected.sum() / (2 + torch.finfo(torch.float32).eps))
