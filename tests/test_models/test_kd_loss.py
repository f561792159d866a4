"""KnowledgeDistillationKLDivLoss (mmdet 2.28.2's) by hand."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import MODELS


def test_by_hand():
    torch.manual_seed(0)
    pred, soft = torch.randn(3, 5, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    T = 4
    p, q = F.softmax(soft / T, 1), F.log_softmax(pred / T, 1)
    per_row = (p * (p.log() - q)).mean(1) * T * T
    loss = MODELS.build(dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.5, T=T))
    w = torch.tensor([1., 0., 2.])
    got = loss(pred, soft, weight=w, avg_factor=4.0)
    torch.testing.assert_close(got, 0.5 * (per_row * w).sum() / 4)
    got.backward()
    assert soft.grad is None and pred.grad[1].abs().sum() == 0  # the target is detached


def test_bad_arguments():
    with pytest.raises(ValueError, match='T must be'):
        MODELS.build(dict(type='KnowledgeDistillationKLDivLoss', T=0.5))
    with pytest.raises(ValueError, match='one shape'):
        MODELS.build(dict(type='KnowledgeDistillationKLDivLoss'))(torch.zeros(2, 3),
                                                                  torch.zeros(2, 4))
