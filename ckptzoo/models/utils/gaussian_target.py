"""mmdet 2.x's ``models/utils/gaussian_target.py``: Gaussian heatmap targets of keypoint heads
(CenterNet, CornerNet) and the decoding helpers (local maxima, top-k, gathering per-point
features)."""
from math import sqrt

import torch
import torch.nn.functional as F

__all__ = ['gaussian2D', 'gen_gaussian_target', 'gaussian_radius', 'get_local_maximum',
           'get_topk_from_heatmap', 'gather_feat', 'transpose_and_gather_feat']


def gaussian2D(radius, sigma=1, dtype=torch.float32, device='cpu'):
    """``[2r + 1, 2r + 1]`` unnormalised Gaussian (1 at the centre), values below
    ``eps * max`` set to 0."""
    x = torch.arange(-radius, radius + 1, dtype=dtype, device=device).view(1, -1)
    y = torch.arange(-radius, radius + 1, dtype=dtype, device=device).view(-1, 1)
    h = (-(x * x + y * y) / (2 * sigma * sigma)).exp()
    h[h < torch.finfo(h.dtype).eps * h.max()] = 0
    return h


def gen_gaussian_target(heatmap, center, radius, k=1):
    """Draw ``k`` times a Gaussian of ``radius`` (sigma = diameter / 6) at the integer
    ``center (x, y)`` into the ``[H, W]`` ``heatmap``, keeping the elementwise maximum, in
    place; returns ``heatmap``."""
    diameter = 2 * radius + 1
    gaussian = gaussian2D(radius, sigma=diameter / 6, dtype=heatmap.dtype,
                          device=heatmap.device)
    x, y = center
    height, width = heatmap.shape[:2]
    left, right = min(x, radius), min(width - x, radius + 1)
    top, bottom = min(y, radius), min(height - y, radius + 1)
    region = heatmap[y - top:y + bottom, x - left:x + right]
    patch = gaussian[radius - top:radius + bottom, radius - left:radius + right]
    torch.max(region, patch * k, out=heatmap[y - top:y + bottom, x - left:x + right])
    return heatmap


def gaussian_radius(det_size, min_overlap):
    """The largest corner displacement ``r`` whose box keeps IoU >= ``min_overlap`` with the
    ``(height, width)`` box, over CornerNet's three cases (one corner in, both in, both out):
    the smallest root of each quadratic."""
    height, width = det_size
    b1 = height + width
    c1 = width * height * (1 - min_overlap) / (1 + min_overlap)
    r1 = (b1 - sqrt(b1 ** 2 - 4 * c1)) / 2
    b2 = 2 * (height + width)
    c2 = (1 - min_overlap) * width * height
    r2 = (b2 - sqrt(b2 ** 2 - 4 * 4 * c2)) / (2 * 4)
    a3 = 4 * min_overlap
    b3 = -2 * min_overlap * (height + width)
    c3 = (min_overlap - 1) * width * height
    r3 = (b3 + sqrt(b3 ** 2 - 4 * a3 * c3)) / (2 * a3)
    return min(r1, r2, r3)


def get_local_maximum(heat, kernel=3):
    """``heat`` where it is the maximum of its ``kernel`` window, 0 elsewhere."""
    hmax = F.max_pool2d(heat, kernel, stride=1, padding=(kernel - 1) // 2)
    return heat * (hmax == heat).float()


def get_topk_from_heatmap(scores, k=20):
    """The ``k`` best of ``[B, C, H, W]`` scores over classes and positions:
    ``(scores, position indices, classes, ys, xs (float))``, each ``[B, k]``."""
    batch, _, height, width = scores.size()
    topk_scores, topk_inds = torch.topk(scores.view(batch, -1), k)
    topk_clses = topk_inds // (height * width)
    topk_inds = topk_inds % (height * width)
    topk_ys = topk_inds // width
    topk_xs = (topk_inds % width).int().float()
    return topk_scores, topk_inds, topk_clses, topk_ys, topk_xs


def gather_feat(feat, ind, mask=None):
    """``feat [B, N, D]`` rows at ``ind [B, K]`` -> ``[B, K, D]`` (``[M, D]`` of the masked
    ones with ``mask``)."""
    dim = feat.size(2)
    feat = feat.gather(1, ind.unsqueeze(2).repeat(1, 1, dim))
    if mask is not None:
        feat = feat[mask.unsqueeze(2).expand_as(feat)].view(-1, dim)
    return feat


def transpose_and_gather_feat(feat, ind):
    """``[B, D, H, W]`` features at flat positions ``ind [B, K]`` -> ``[B, K, D]``."""
    feat = feat.permute(0, 2, 3, 1).contiguous()
    return gather_feat(feat.view(feat.size(0), -1, feat.size(3)), ind)
