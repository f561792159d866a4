"""mmdet 2.x ``mmdet/models/utils/point_sample.py``: PointRend's choice of points.

Training points are drawn with ``torch.rand`` on the default generator, in mmdet's order and
shapes (the oversampled candidates, then the random rest), so a seeded run draws the same
points as mmdet's.
"""
import torch

from ...ops import point_sample

__all__ = ['get_uncertainty', 'get_uncertain_point_coords_with_randomness']


def get_uncertainty(mask_pred, labels):
    """``-|logit|`` of each RoI's class (``labels``), ``(n, 1, ...)``: highest where the mask
    is least certain. A one-channel (class-agnostic) prediction is used as it is."""
    if mask_pred.shape[1] == 1:
        logits = mask_pred.clone()
    else:
        inds = torch.arange(mask_pred.shape[0], device=mask_pred.device)
        logits = mask_pred[inds, labels].unsqueeze(1)
    return -torch.abs(logits)


def get_uncertain_point_coords_with_randomness(mask_pred, labels, num_points, oversample_ratio,
                                               importance_sample_ratio):
    """``(n, num_points, 2)`` RoI-relative points: ``num_points * oversample_ratio`` uniform
    candidates, the ``importance_sample_ratio`` share of ``num_points`` most uncertain of them
    (uncertainty of the *sampled* logits), then uniform random points for the rest."""
    if oversample_ratio < 1:
        raise ValueError(f'oversample_ratio must be >= 1, got {oversample_ratio!r}')
    if not 0 <= importance_sample_ratio <= 1:
        raise ValueError(f'importance_sample_ratio must be in [0, 1], got '
                         f'{importance_sample_ratio!r}')
    num_rois = mask_pred.shape[0]
    num_sampled = int(num_points * oversample_ratio)
    point_coords = torch.rand(num_rois, num_sampled, 2, device=mask_pred.device)
    point_logits = point_sample(mask_pred, point_coords)
    uncertainties = get_uncertainty(point_logits, labels)
    num_uncertain = int(importance_sample_ratio * num_points)
    num_random = num_points - num_uncertain
    idx = torch.topk(uncertainties[:, 0, :], k=num_uncertain, dim=1)[1]
    idx = idx + num_sampled * torch.arange(num_rois, dtype=torch.long,
                                           device=mask_pred.device)[:, None]
    point_coords = point_coords.view(-1, 2)[idx.view(-1), :].view(num_rois, num_uncertain, 2)
    if num_random > 0:
        rand_coords = torch.rand(num_rois, num_random, 2, device=mask_pred.device)
        point_coords = torch.cat((point_coords, rand_coords), dim=1)
    return point_coords
