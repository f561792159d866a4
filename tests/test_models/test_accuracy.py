import pytest
import torch

from ckptzoo.models.losses import Accuracy, accuracy


def test_accuracy_percent_topk_thresh():
    pred = torch.tensor([[.1, .7, .2], [.5, .3, .2], [.2, .3, .5], [.4, .35, .25]])
    target = torch.tensor([1, 1, 2, 1])
    assert accuracy(pred, target).tolist() == [50.]
    top1, top2 = accuracy(pred, target, topk=(1, 2))
    assert top1.tolist() == [50.] and top2.tolist() == [100.]
    assert accuracy(pred, target, thresh=0.6).tolist() == [25.]
    assert Accuracy(topk=(1, ))(pred, target)[0].tolist() == [50.]
    assert accuracy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)) == 0
    with pytest.raises(ValueError, match='topk 4'):
        accuracy(pred, target, topk=4)
