import pytest
import torch

from ckptzoo.core.anchor import YOLOAnchorGenerator

BASE = [[(116, 90), (156, 198), (373, 326)], [(30, 61), (62, 45), (59, 119)],
        [(10, 13), (16, 30), (33, 23)]]


def test_base_anchors_and_grid():
    gen = YOLOAnchorGenerator(strides=[32, 16, 8], base_sizes=BASE)
    assert gen.num_levels == 3 and gen.num_base_priors == [3, 3, 3]
    torch.testing.assert_close(gen.base_anchors[2][0], torch.tensor([-1., -2.5, 9., 10.5]))
    priors = gen.grid_priors([(2, 2), (4, 4), (8, 8)])
    assert [len(p) for p in priors] == [12, 48, 192]
    # position (y=0, x=1) of level 0: shifted by 32 in x
    torch.testing.assert_close(priors[0][3], gen.base_anchors[0][0] + torch.tensor([32., 0, 32, 0]))


def test_responsible_flags_mark_the_cell_of_each_centre():
    gen = YOLOAnchorGenerator(strides=[32, 16, 8], base_sizes=BASE)
    gt = torch.tensor([[0., 0., 40., 40.], [40., 0., 60., 20.]])  # centres (20, 20), (50, 10)
    flags = gen.responsible_flags([(2, 2), (4, 4), (8, 8)], gt, device='cpu')
    assert flags[0].view(4, 3)[:, 0].tolist() == [1, 1, 0, 0]
    assert flags[1].view(16, 3)[:, 0].nonzero().view(-1).tolist() == [3, 5]
    assert flags[2].view(64, 3).all(dim=1).nonzero().view(-1).tolist() == [14, 18]
    assert flags[0].dtype == torch.uint8


def test_bad_base_sizes():
    with pytest.raises(ValueError, match='same number'):
        YOLOAnchorGenerator(strides=[32, 16], base_sizes=[[(1, 1)], [(1, 1), (2, 2)]])
    with pytest.raises(ValueError, match='one list per stride'):
        YOLOAnchorGenerator(strides=[32, 16], base_sizes=[[(1, 1)]])
