"""AssociativeEmbeddingLoss (mmdet 2.28.2's) by hand."""
import pytest
import torch

from ckptzoo.registry import MODELS


def test_pull_and_push_by_hand():
    tl = torch.zeros(1, 1, 4, 4)
    br = torch.zeros(1, 1, 4, 4)
    tl[0, 0, 0, 0], br[0, 0, 2, 2] = 1.0, 0.0   # object 0: mean 0.5
    tl[0, 0, 1, 1], br[0, 0, 3, 3] = 0.2, 0.6   # object 1: mean 0.4
    match = [[[[0, 0], [2, 2]], [[1, 1], [3, 3]]]]
    loss = MODELS.build(dict(type='AssociativeEmbeddingLoss', pull_weight=0.1, push_weight=0.2))
    pull, push = loss(tl, br, match)
    pull_hand = ((0.5 ** 2 + 0.5 ** 2) + (0.2 ** 2 + 0.2 ** 2)) / 2
    push_hand = 2 * (1 - 0.1) / 2  # |0.5 - 0.4| apart, margin 1, both ordered pairs
    assert float(pull) == pytest.approx(0.1 * pull_hand)
    assert float(push) == pytest.approx(0.2 * push_hand)


def test_no_object_and_one_object():
    emb = torch.randn(2, 1, 3, 3, requires_grad=True)
    loss = MODELS.build(dict(type='AssociativeEmbeddingLoss'))
    pull, push = loss(emb, emb, [[], [[[0, 0], [1, 1]]]])
    assert float(push) == 0
    (pull + push).backward()
    assert emb.grad[0].abs().sum() == 0
    with pytest.raises(ValueError, match='one match list per image'):
        loss(emb, emb, [[]])
