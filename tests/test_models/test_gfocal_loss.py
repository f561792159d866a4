import math

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import MODELS


def test_quality_focal_loss_by_hand():
    """Negatives: -log(1 - p) * p**beta per class; a positive's own class: BCE with its IoU
    score s weighted by |s - p|**beta."""
    pred = torch.tensor([[0.5, -1.0], [2.0, 0.0]], requires_grad=True)
    labels = torch.tensor([2, 1])  # 2 = background
    scores = torch.tensor([0.0, 0.7])
    loss = MODELS.build(dict(type='QualityFocalLoss', beta=2.0, loss_weight=0.5,
                             reduction='sum'))(pred, (labels, scores))
    p = pred.detach().sigmoid()
    neg = -torch.log(1 - p) * p**2
    pos = F.binary_cross_entropy(p[1, 1], torch.tensor(0.7)) * (0.7 - p[1, 1]).abs()**2
    expected = neg[0].sum() + neg[1, 0] + pos
    torch.testing.assert_close(loss, 0.5 * expected)
    loss.backward()
    assert torch.isfinite(pred.grad).all()
    # the probability form gives the same loss
    prob = MODELS.build(dict(type='QualityFocalLoss', activated=True, reduction='sum'))(
        pred.detach().sigmoid(), (labels, scores))
    torch.testing.assert_close(prob, expected)
    # per-sample weight and avg_factor
    weighted = MODELS.build(dict(type='QualityFocalLoss'))(
        pred, (labels, scores), weight=torch.tensor([0., 1.]), avg_factor=4.)
    torch.testing.assert_close(weighted, (neg[1, 0] + pos) / 4, rtol=1e-6, atol=0)


def test_distribution_focal_loss_by_hand():
    """A target of 2.3 bins: 0.7 * CE(bin 2) + 0.3 * CE(bin 3)."""
    pred = torch.randn(1, 5)
    loss = MODELS.build(dict(type='DistributionFocalLoss', loss_weight=0.25))(
        pred, torch.tensor([2.3]))
    logp = pred.log_softmax(-1)[0]
    torch.testing.assert_close(loss, 0.25 * -(0.7 * logp[2] + 0.3 * logp[3]))
    # an integer target is one bin
    loss = MODELS.build(dict(type='DistributionFocalLoss'))(pred, torch.tensor([1.0]))
    torch.testing.assert_close(loss, -logp[1])


def test_bad_arguments():
    with pytest.raises(NotImplementedError, match='only use_sigmoid=True'):
        MODELS.build(dict(type='QualityFocalLoss', use_sigmoid=False))
    with pytest.raises(ValueError, match='reduction must be one of'):
        MODELS.build(dict(type='DistributionFocalLoss', reduction='avg'))
    with pytest.raises(ValueError, match=r'\(labels \[N\], scores \[N\]\) pair'):
        MODELS.build(dict(type='QualityFocalLoss'))(torch.zeros(2, 2), torch.zeros(2))
    assert math.isclose(MODELS.build(dict(type='QualityFocalLoss')).beta, 2.0)


def test_focal_loss_on_probabilities_equals_the_logit_form():
    logits = torch.randn(6, 3)
    labels = torch.tensor([0, 3, 2, 1, 3, 0])
    weight = torch.rand(6)
    on_logits = MODELS.build(dict(type='FocalLoss', gamma=2.0, alpha=0.25))(
        logits, labels, weight, avg_factor=2.)
    on_probs = MODELS.build(dict(type='FocalLoss', activated=True, gamma=2.0, alpha=0.25))(
        logits.sigmoid(), labels, weight, avg_factor=2.)
    torch.testing.assert_close(on_probs, on_logits, rtol=1e-5, atol=1e-7)


def test_sigmoid_geometric_mean_and_its_gradient():
    from ckptzoo.models.utils import sigmoid_geometric_mean
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, dtype=torch.float64, requires_grad=True)
    z = sigmoid_geometric_mean(x, y)
    torch.testing.assert_close(z, (x.sigmoid() * y.sigmoid()).sqrt())
    assert torch.autograd.gradcheck(sigmoid_geometric_mean, (x, y))
    # finite where autograd of the composition is not: both sigmoids underflow
    far = torch.tensor([-800.], dtype=torch.float64, requires_grad=True)
    sigmoid_geometric_mean(far, far.detach().clone().requires_grad_()).sum().backward()
    assert torch.isfinite(far.grad).all()
