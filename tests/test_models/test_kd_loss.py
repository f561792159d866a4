import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import MODELS


def test_kl_div_is_t_squared_times_the_mean_over_bins():
    torch.manual_seed(0)
    pred, soft = torch.randn(6, 17, dtype=torch.float64), torch.randn(6, 17, dtype=torch.float64)
    loss = MODELS.build(dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.5, T=4))
    p, q = F.softmax(soft / 4, 1), F.log_softmax(pred / 4, 1)
    per_row = (p * (p.log() - q)).mean(1) * 16
    torch.testing.assert_close(loss(pred, soft), 0.5 * per_row.mean())
    w = torch.rand(6, dtype=torch.float64)
    torch.testing.assert_close(loss(pred, soft, weight=w, avg_factor=4.0),
                               0.5 * (per_row * w).sum() / (4.0 + torch.finfo(torch.float32).eps))
    torch.testing.assert_close(loss(pred, soft, reduction_override='none'), 0.5 * per_row)
    assert loss(soft, soft).abs() < 1e-12  # equal distributions


def test_the_target_is_detached():
    pred = torch.randn(3, 5, requires_grad=True)
    soft = torch.randn(3, 5, requires_grad=True)
    MODELS.build(dict(type='KnowledgeDistillationKLDivLoss'))(pred, soft).backward()
    assert pred.grad is not None and soft.grad is None


def test_bad_arguments():
    with pytest.raises(ValueError, match='T'):
        MODELS.build(dict(type='KnowledgeDistillationKLDivLoss', T=0.5))
    with pytest.raises(ValueError, match='reduction'):
        MODELS.build(dict(type='KnowledgeDistillationKLDivLoss', reduction='avg'))
    loss = MODELS.build(dict(type='KnowledgeDistillationKLDivLoss'))
    with pytest.raises(ValueError, match='one shape'):
        loss(torch.randn(3, 5), torch.randn(3, 6))
