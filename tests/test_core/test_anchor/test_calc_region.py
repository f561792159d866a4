"""calc_region (mmdet 2.x's ``mmdet/core/anchor/utils.py``): a box shrunk about its centre."""
import torch

from ckptzoo.core.anchor import calc_region


def test_calc_region_by_hand():
    box = torch.tensor([2., 4., 12., 24.])
    # ratio 0.2: x1 = 0.8 * 2 + 0.2 * 12 = 4, y1 = 0.8 * 4 + 0.2 * 24 = 8, x2 = 10, y2 = 20
    assert [int(v) for v in calc_region(box, 0.2)] == [4, 8, 10, 20]
    # clamped to a (h, w) = (15, 9) feature map
    assert [int(v) for v in calc_region(box, 0.2, (15, 9))] == [4, 8, 9, 15]
    assert all(v.dtype == torch.long for v in calc_region(box, 0.25))
    # rounding is torch's (half to even): 0.75 * 1 + 0.25 * 3 = 1.5 -> 2, 2.5 -> 2
    assert [int(v) for v in calc_region(torch.tensor([1., 1., 3., 3.]), 0.25)] == [2, 2, 2, 2]
