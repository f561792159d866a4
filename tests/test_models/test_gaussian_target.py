"""gaussian_target helpers (mmdet's models/utils/gaussian_target.py) by hand."""
import math

import torch

from ckptzoo.models.utils import (gaussian2D, gaussian_radius, gen_gaussian_target,
                                  get_local_maximum, get_topk_from_heatmap,
                                  transpose_and_gather_feat)
from ckptzoo.models.utils.gaussian_target import gather_feat


def test_gaussian2d_and_drawing_keeps_the_maximum():
    g = gaussian2D(1, sigma=1)
    assert g.shape == (3, 3) and g[1, 1] == 1
    torch.testing.assert_close(g[0, 0], torch.tensor(math.exp(-1.)))
    heat = torch.zeros(4, 5)
    heat[0, 0] = 0.9
    gen_gaussian_target(heat, [0, 0], 1)  # clipped at the top-left corner
    assert heat[0, 0] == 1 and heat[0, 1] > 0 and heat[2, 2] == 0
    before = heat.clone()
    gen_gaussian_target(heat, [4, 3], 1, k=0.5)  # bottom-right corner, half height
    assert heat[3, 4] == 0.5 and torch.equal(heat[:2], before[:2])


def test_gaussian_radius_is_the_smallest_root():
    """A 10x10 box at IoU 0.3: case 1 gives (20 - sqrt(400 - 4 * 100 * 0.7 / 1.3)) / 2."""
    r1 = (20 - math.sqrt(400 - 4 * 100 * 0.7 / 1.3)) / 2
    r2 = (40 - math.sqrt(1600 - 16 * 0.7 * 100)) / 8
    r3 = (-6 + math.sqrt(36 + 4 * 1.2 * 70)) / 2.4
    assert gaussian_radius([10, 10], 0.3) == min(r1, r2, r3)


def test_local_maximum_topk_and_gather():
    heat = torch.zeros(1, 2, 3, 4)
    heat[0, 1, 2, 3] = 0.9
    heat[0, 1, 2, 2] = 0.5  # next to a higher peak: suppressed
    heat[0, 0, 0, 0] = 0.7
    peaks = get_local_maximum(heat)
    assert peaks[0, 1, 2, 2] == 0 and peaks[0, 1, 2, 3] == 0.9
    scores, inds, clses, ys, xs = get_topk_from_heatmap(peaks, k=2)
    assert scores.tolist() == [[0.8999999761581421, 0.699999988079071]]
    assert inds.tolist() == [[11, 0]] and clses.tolist() == [[1, 0]]
    assert ys.tolist() == [[2, 0]] and xs.tolist() == [[3., 0.]] and xs.dtype == torch.float32
    feat = torch.arange(2 * 12.).reshape(1, 2, 3, 4)
    torch.testing.assert_close(transpose_and_gather_feat(feat, inds),
                               torch.tensor([[[11., 23.], [0., 12.]]]))
    rows = torch.arange(6.).reshape(1, 3, 2)
    mask = torch.tensor([[True, False]])
    torch.testing.assert_close(gather_feat(rows, torch.tensor([[2, 0]]), mask),
                               torch.tensor([[4., 5.]]))
