"""mmcv 1.x's point ops of PointRend (``mmcv/ops/point_sample.py``) in plain PyTorch.

mmcv's own path is already pure PyTorch (``F.grid_sample``), so the values are mmcv's exactly:
``point_sample`` reads features at points in ``[0, 1] x [0, 1]``, the ``rel_roi_point_*``
helpers map RoI-relative points into an image or feature map, and ``SimpleRoIAlign`` samples a
regular grid of points per RoI (faster than ``RoIAlign``; PointRend's mask RoI layer). The
ONNX-export branches of mmcv are left out.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

__all__ = ['point_sample', 'rel_roi_point_to_abs_img_point', 'abs_img_point_to_rel_img_point',
           'rel_roi_point_to_rel_img_point', 'generate_grid', 'SimpleRoIAlign']


def generate_grid(num_grid, size, device):
    """``(num_grid, h * w, 2)``: the centres of an ``h x w`` grid over ``[0, 1]^2`` (x, y),
    the same for every grid (an expanded view)."""
    theta = torch.tensor([[[1., 0., 0.], [0., 1., 0.]]], device=device)
    grid = F.affine_grid(theta, torch.Size((1, 1, *size)), align_corners=False)
    grid = (grid + 1.0) / 2.0
    return grid.view(1, -1, 2).expand(num_grid, -1, -1)


def rel_roi_point_to_abs_img_point(rois, rel_roi_points):
    """RoI-relative points ``(n, p, 2)`` in ``[0, 1]`` to image pixels, for ``rois`` of
    ``(n, 4)`` boxes or ``(n, 5)`` (image index first). No gradient flows (as mmcv)."""
    with torch.no_grad():
        if rel_roi_points.dim() != 3 or rel_roi_points.size(2) != 2 or \
                rel_roi_points.size(0) != rois.size(0) or rois.dim() != 2:
            raise ValueError(f'rel_roi_points must be (n, p, 2) for (n, 4 or 5) rois, got '
                             f'{tuple(rel_roi_points.shape)} and {tuple(rois.shape)}')
        if rois.size(1) == 5:
            rois = rois[:, 1:]
        xs = rel_roi_points[:, :, 0] * (rois[:, None, 2] - rois[:, None, 0]) + rois[:, None, 0]
        ys = rel_roi_points[:, :, 1] * (rois[:, None, 3] - rois[:, None, 1]) + rois[:, None, 1]
        return torch.stack([xs, ys], dim=2)


def abs_img_point_to_rel_img_point(abs_img_points, img, spatial_scale=1.):
    """Image pixels to ``[0, 1]`` coordinates of ``img``: an ``(h, w)`` tuple or a
    ``(n, c, h, w)`` tensor, whose size is taken after ``spatial_scale``."""
    if isinstance(img, tuple) and len(img) == 2:
        h, w = img
        scale = torch.tensor([w, h], dtype=torch.float, device=abs_img_points.device)
    elif isinstance(img, torch.Tensor) and img.dim() == 4:
        scale = torch.tensor(img.shape[2:]).flip(0).to(abs_img_points.device).float()
    else:
        raise TypeError(f'img must be an (h, w) tuple or an (n, c, h, w) tensor, got {img!r}')
    return abs_img_points / scale.view(1, 1, 2) * spatial_scale


def rel_roi_point_to_rel_img_point(rois, rel_roi_points, img, spatial_scale=1.):
    """RoI-relative points to ``[0, 1]`` coordinates of ``img`` (see the two steps)."""
    abs_img_points = rel_roi_point_to_abs_img_point(rois, rel_roi_points)
    return abs_img_point_to_rel_img_point(abs_img_points, img, spatial_scale)


def point_sample(input, points, align_corners=False, **kwargs):
    """Bilinear features of ``input (n, c, h, w)`` at ``points`` in ``[0, 1]^2`` (x, y):
    ``(n, p, 2) -> (n, c, p)`` or ``(n, hg, wg, 2) -> (n, c, hg, wg)``; zero outside."""
    add_dim = points.dim() == 3
    if add_dim:
        points = points.unsqueeze(2)
    output = F.grid_sample(input, points * 2.0 - 1.0, align_corners=align_corners, **kwargs)
    return output.squeeze(3) if add_dim else output


class SimpleRoIAlign(nn.Module):
    """mmcv's ``SimpleRoIAlign``: per RoI an ``output_size`` grid of bin centres, each read by
    :func:`point_sample` (one sample per bin). ``aligned=False`` is mmdet's legacy sampling
    (``align_corners=True``)."""

    def __init__(self, output_size, spatial_scale, aligned=True):
        super().__init__()
        self.output_size = _pair(output_size)
        self.spatial_scale = float(spatial_scale)
        self.use_torchvision = False
        self.aligned = aligned

    def forward(self, features, rois):
        """``features (b, c, h, w)``, ``rois (k, 5)`` -> ``(k, c, *output_size)``."""
        num_rois = rois.size(0)
        rel_roi_points = generate_grid(num_rois, self.output_size, device=rois.device)
        point_feats = []
        for batch_ind in range(features.size(0)):
            feat = features[batch_ind].unsqueeze(0)
            inds = rois[:, 0].long() == batch_ind
            if inds.any():
                rel_img_points = rel_roi_point_to_rel_img_point(
                    rois[inds], rel_roi_points[inds], feat, self.spatial_scale).unsqueeze(0)
                point_feat = point_sample(feat, rel_img_points, align_corners=not self.aligned)
                point_feats.append(point_feat.squeeze(0).transpose(0, 1))
        # as mmcv, rows are grouped by image: RoIs must come sorted by image index
        point_feats = torch.cat(point_feats, dim=0)
        return point_feats.reshape(num_rois, features.size(1), *self.output_size)

    def __repr__(self):
        return (f'{type(self).__name__}(output_size={self.output_size}, '
                f'spatial_scale={self.spatial_scale})')
