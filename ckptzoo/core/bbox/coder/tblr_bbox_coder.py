"""mmdet 2.x ``TBLRBBoxCoder`` (FSAF): a box as its (top, bottom, left, right) distances from
the prior's centre, each divided by the prior's height (top, bottom) or width (left, right),
then by ``normalizer``."""
import torch

from ....registry import TASK_UTILS

__all__ = ['TBLRBBoxCoder', 'bboxes2tblr', 'tblr2bboxes']


def _normalizer(normalizer, device):
    if isinstance(normalizer, float):
        return normalizer
    normalizer = torch.tensor(normalizer, device=device)
    if normalizer.numel() != 4:
        raise ValueError(f'TBLRBBoxCoder normalizer must be a float or 4 numbers, got '
                         f'{normalizer.tolist()}')
    return normalizer


def bboxes2tblr(priors, gts, normalizer=4.0, normalize_by_wh=True):
    """``priors``, ``gts`` ``[N, 4]`` x1y1x2y2 -> ``[N, 4]`` (t, b, l, r)."""
    normalizer = _normalizer(normalizer, priors.device)
    if priors.size(0) != gts.size(0):
        raise ValueError(f'priors and gts need the same length, got {priors.size(0)} and '
                         f'{gts.size(0)}')
    centers = (priors[:, 0:2] + priors[:, 2:4]) / 2
    xmin, ymin, xmax, ymax = gts.split(1, dim=1)
    loc = torch.cat((centers[:, 1:2] - ymin, ymax - centers[:, 1:2],
                     centers[:, 0:1] - xmin, xmax - centers[:, 0:1]), dim=1)
    if normalize_by_wh:
        w, h = torch.split(priors[:, 2:4] - priors[:, 0:2], 1, dim=1)
        loc[:, :2] /= h
        loc[:, 2:] /= w
    return loc / normalizer


def tblr2bboxes(priors, tblr, normalizer=4.0, normalize_by_wh=True, max_shape=None,
                clip_border=True):
    """``priors``, ``tblr`` ``[N, 4]`` or ``[B, N, 4]`` -> x1y1x2y2, clipped to ``max_shape``
    ((h, w), or one per image for ``[B, N, 4]``) when ``clip_border``."""
    normalizer = _normalizer(normalizer, priors.device)
    if priors.size(0) != tblr.size(0):
        raise ValueError(f'priors and tblr need the same length, got {priors.size(0)} and '
                         f'{tblr.size(0)}')
    loc = tblr * normalizer
    centers = (priors[..., 0:2] + priors[..., 2:4]) / 2
    if normalize_by_wh:
        w, h = torch.split(priors[..., 2:4] - priors[..., 0:2], 1, dim=-1)
        loc = torch.cat([h * loc[..., :2], w * loc[..., 2:]], dim=-1)
    top, bottom, left, right = loc.split((1, 1, 1, 1), dim=-1)
    cx, cy = centers[..., 0].unsqueeze(-1), centers[..., 1].unsqueeze(-1)
    bboxes = torch.cat((cx - left, cy - top, cx + right, cy + bottom), dim=-1)
    if clip_border and max_shape is not None:
        if not isinstance(max_shape, torch.Tensor):
            max_shape = priors.new_tensor(max_shape)
        max_shape = max_shape[..., :2].type_as(priors)
        if max_shape.ndim == 2 and (bboxes.ndim != 3 or max_shape.size(0) != bboxes.size(0)):
            raise ValueError('one max_shape per image needs [B, N, 4] boxes of B images')
        min_xy = priors.new_tensor(0)
        max_xy = torch.cat([max_shape, max_shape], dim=-1).flip(-1).unsqueeze(-2)
        bboxes = torch.where(bboxes < min_xy, min_xy, bboxes)
        bboxes = torch.where(bboxes > max_xy, max_xy, bboxes)
    return bboxes


@TASK_UTILS.register_module()
class TBLRBBoxCoder:
    """Args (mmdet's): ``normalizer`` (float, or 4 numbers for t, b, l, r; default 4.0),
    ``clip_border`` (clip decoded boxes to the image)."""

    def __init__(self, normalizer=4.0, clip_border=True):
        _normalizer(normalizer, 'cpu')
        self.normalizer = normalizer
        self.clip_border = clip_border

    def encode(self, bboxes, gt_bboxes):
        if bboxes.size(-1) != 4 or gt_bboxes.size(-1) != 4:
            raise ValueError(f'boxes must be [N, 4], got {tuple(bboxes.shape)} and '
                             f'{tuple(gt_bboxes.shape)}')
        return bboxes2tblr(bboxes, gt_bboxes, normalizer=self.normalizer)

    def decode(self, bboxes, pred_bboxes, max_shape=None):
        return tblr2bboxes(bboxes, pred_bboxes, normalizer=self.normalizer,
                           max_shape=max_shape, clip_border=self.clip_border)
