"""mmdet 2.28.2's gaussian heatmap helpers by hand."""
import math

import torch

from ckptzoo.models.utils import (gaussian_radius, gen_gaussian_target, get_local_maximum,
                                  get_topk_from_heatmap, transpose_and_gather_feat)
from ckptzoo.models.utils.gaussian_target import gather_feat, gaussian2D


def test_gaussian_kernel_and_target():
    k = gaussian2D(2, sigma=5 / 6)
    assert k.shape == (5, 5) and k[2, 2] == 1
    assert math.isclose(float(k[2, 4]), math.exp(-4 / (2 * (5 / 6) ** 2)), rel_tol=1e-6)
    heat = torch.zeros(6, 8)
    heat[0, 0] = 0.9
    gen_gaussian_target(heat, [1, 1], 2)
    assert heat[1, 1] == 1 and heat[0, 0] == 0.9  # the max is kept
    assert heat[:, 4:].eq(0).all() and heat[4:].eq(0).all()  # cut at radius 2
    torch.testing.assert_close(heat[1, 3], k[2, 4])
    edge = gen_gaussian_target(torch.zeros(3, 3), [2, 2], 1, k=0.5)  # at the corner
    assert edge[2, 2] == 0.5 and edge[0].eq(0).all()


def test_radius_is_the_smallest_of_three_cases():
    h, w, iou = 20.0, 10.0, 0.3
    r1 = ((h + w) - math.sqrt((h + w) ** 2 - 4 * w * h * (1 - iou) / (1 + iou))) / 2
    r2 = (2 * (h + w) - math.sqrt(4 * (h + w) ** 2 - 16 * (1 - iou) * w * h)) / 8
    r3 = (-2 * iou * (h + w) + math.sqrt(4 * iou ** 2 * (h + w) ** 2
                                          + 16 * iou * (1 - iou) * w * h)) / (8 * iou)
    assert math.isclose(gaussian_radius((h, w), iou), min(r1, r2, r3))


def test_local_maximum_topk_and_gather():
    heat = torch.zeros(1, 2, 4, 5)
    heat[0, 0, 1, 1], heat[0, 0, 1, 2] = 0.8, 0.5  # 0.5 is next to a larger one
    heat[0, 1, 3, 4] = 0.6
    kept = get_local_maximum(heat)
    assert kept[0, 0, 1, 2] == 0 and kept[0, 0, 1, 1] == 0.8 and kept[0, 1, 3, 4] == 0.6
    scores, inds, clses, ys, xs = get_topk_from_heatmap(kept, k=2)
    assert scores.tolist() == [[0.800000011920929, 0.6000000238418579]]
    assert inds.tolist() == [[6, 19]] and clses.tolist() == [[0, 1]]
    assert ys.tolist() == [[1, 3]] and xs.tolist() == [[1.0, 4.0]] and xs.dtype == torch.float32
    feat = torch.arange(40.).view(1, 2, 4, 5)
    torch.testing.assert_close(transpose_and_gather_feat(feat, inds),
                               torch.tensor([[[6., 26.], [19., 39.]]]))
    flat = torch.arange(12.).view(1, 4, 3)
    got = gather_feat(flat, torch.tensor([[2, 0]]), mask=torch.tensor([[True, False]]))
    torch.testing.assert_close(got, torch.tensor([[6., 7., 8.]]))
