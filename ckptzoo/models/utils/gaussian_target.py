"""mmdet 2.x's gaussian heatmap helpers (CornerNet, CenterNet): the targets (a gaussian per
object, ``gen_gaussian_target`` with ``gaussian_radius``) and the decoding (``get_local_maximum``,
``get_topk_from_heatmap``, ``transpose_and_gather_feat``)."""
from math import sqrt

import torch
import torch.nn.functional as F

__all__ = ['gaussian2D', 'gen_gaussian_target', 'gaussian_radius', 'get_local_maximum',
           'get_topk_from_heatmap', 'gather_feat', 'transpose_and_gather_feat']


def gaussian2D(radius, sigma=1, dtype=torch.float32, device='cpu'):
    """``(2r+1) x (2r+1)`` kernel ``exp(-(x^2 + y^2) / (2 sigma^2))``, values below
    ``eps * max`` zeroed."""
    x = torch.arange(-radius, radius + 1, dtype=dtype, device=device).view(1, -1)
    y = torch.arange(-radius, radius + 1, dtype=dtype, device=device).view(-1, 1)
    h = (-(x * x + y * y) / (2 * sigma * sigma)).exp()
    h[h < torch.finfo(h.dtype).eps * h.max()] = 0
    return h


def gen_gaussian_target(heatmap, center, radius, k=1):
    """Write ``max(heatmap, k * gaussian)`` around ``center`` (x, y ints) into ``heatmap``
    (``[H, W]``, in place; also returned), the gaussian of ``radius`` with sigma
    ``(2 radius + 1) / 6``, cut at the borders."""
    diameter = 2 * radius + 1
    kernel = gaussian2D(radius, sigma=diameter / 6, dtype=heatmap.dtype, device=heatmap.device)
    x, y = center
    height, width = heatmap.shape[:2]
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    region = heatmap[y - top:y + bottom, x - left:x + right]
    part = kernel[radius - top:radius + bottom, radius - left:radius + right]
    torch.max(region, part * k, out=region)
    return heatmap


def gaussian_radius(det_size, min_overlap):
    """The largest corner displacement keeping IoU >= ``min_overlap`` with a box of
    ``det_size`` (h, w): the least root over CornerNet's three cases (one corner in and one
    out, both in, both out; mmdet's formulas, including its first case's ``b = h + w``)."""
    height, width = det_size
    b1 = height + width
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 - sqrt(b1 ** 2 - 4 * c1)) / 2
    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    r2 = (b2 - sqrt(b2 ** 2 - 16 * c2)) / 8
    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    r3 = (b3 + sqrt(b3 ** 2 - 4 * a3 * c3)) / (2 * a3)
    return min(r1, r2, r3)


def get_local_maximum(heat, kernel=3):
    """``heat`` where it equals its ``kernel x kernel`` max pool, else 0."""
    hmax = F.max_pool2d(heat, kernel, stride=1, padding=(kernel - 1) // 2)
    return heat * (hmax == heat).float()


def get_topk_from_heatmap(scores, k=20):
    """Top ``k`` over classes and positions of ``scores [B, C, H, W]``: ``(scores, inds
    (position in H*W), classes, ys, xs (float))``, each ``[B, k]``."""
    batch, _, height, width = scores.size()
    topk_scores, topk_inds = torch.topk(scores.view(batch, -1), k)
    topk_clses = topk_inds // (height * width)
    topk_inds = topk_inds % (height * width)
    topk_ys = topk_inds // width
    topk_xs = (topk_inds % width).int().float()
    return topk_scores, topk_inds, topk_clses, topk_ys, topk_xs


def gather_feat(feat, ind, mask=None):
    """``feat [B, N, D]`` at ``ind [B, K]`` -> ``[B, K, D]`` (with ``mask``: the masked rows,
    ``[M, D]``)."""
    dim = feat.size(2)
    feat = feat.gather(1, ind.unsqueeze(2).repeat(1, 1, dim))
    if mask is not None:
        feat = feat[mask.unsqueeze(2).expand_as(feat)].view(-1, dim)
    return feat


def transpose_and_gather_feat(feat, ind):
    """``feat [B, D, H, W]`` at flat positions ``ind [B, K]`` -> ``[B, K, D]``."""
    feat = feat.permute(0, 2, 3, 1).contiguous()
    return gather_feat(feat.view(feat.size(0), -1, feat.size(3)), ind)
