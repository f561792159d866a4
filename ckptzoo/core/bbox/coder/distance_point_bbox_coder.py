"""mmdet 2.x ``DistancePointBBoxCoder``: a box as the distances (left, top, right, bottom) from
a point to its sides (FCOS, GFL, TOOD). ``distance2bbox`` / ``bbox2distance`` (mmdet keeps them
in ``core/bbox/transforms.py``) live here with the coder that is their only user."""
import torch

from ....registry import TASK_UTILS

__all__ = ['DistancePointBBoxCoder', 'distance2bbox', 'bbox2distance']


def distance2bbox(points, distance, max_shape=None):
    """Boxes ``[..., 4]`` x1y1x2y2 from ``points [..., 2]`` and ``distance [..., 4]``
    (l, t, r, b); with ``max_shape`` ((h, w, ...), or one per image of a ``[B, N, 4]`` batch)
    clipped to ``[0, w] x [0, h]``."""
    bboxes = torch.stack([points[..., 0] - distance[..., 0], points[..., 1] - distance[..., 1],
                          points[..., 0] + distance[..., 2], points[..., 1] + distance[..., 3]],
                         -1)
    if max_shape is None:
        return bboxes
    if bboxes.dim() == 2:
        h, w = max_shape[0], max_shape[1]
        return torch.stack([bboxes[:, 0].clamp(min=0, max=w), bboxes[:, 1].clamp(min=0, max=h),
                            bboxes[:, 2].clamp(min=0, max=w), bboxes[:, 3].clamp(min=0, max=h)],
                           -1)
    shape = max_shape if isinstance(max_shape, torch.Tensor) else bboxes.new_tensor(
        [list(s[:2]) for s in max_shape] if isinstance(max_shape[0], (list, tuple))
        else list(max_shape[:2]))
    hw = shape[..., :2].to(bboxes)
    if hw.dim() == 2:
        if hw.size(0) != bboxes.size(0):
            raise ValueError(f'max_shape needs one (h, w) per image ({bboxes.size(0)}), got '
                             f'{hw.size(0)}')
        hw = hw[:, None, :]
    upper = torch.cat([hw.flip(-1), hw.flip(-1)], -1)
    zero = bboxes.new_tensor(0)
    bboxes = torch.where(bboxes < zero, zero, bboxes)
    return torch.where(bboxes > upper, upper, bboxes)


def bbox2distance(points, bbox, max_dis=None, eps=0.1):
    """``(l, t, r, b)`` of each ``points [N, 2]`` to its box ``bbox [N, 4]``; with ``max_dis``
    clamped to ``[0, max_dis - eps]`` (strictly below ``max_dis``, GFL's last bin)."""
    dist = torch.stack([points[:, 0] - bbox[:, 0], points[:, 1] - bbox[:, 1],
                        bbox[:, 2] - points[:, 0], bbox[:, 3] - points[:, 1]], -1)
    if max_dis is not None:
        dist = dist.clamp(min=0, max=max_dis - eps)
    return dist


@TASK_UTILS.register_module()
class DistancePointBBoxCoder:
    """Args (mmdet's): ``clip_border`` (clip decoded boxes to ``max_shape``)."""

    def __init__(self, clip_border=True):
        self.clip_border = clip_border

    def encode(self, points, gt_bboxes, max_dis=None, eps=0.1):
        """``points [N, 2]``, ``gt_bboxes [N, 4]`` -> distances ``[N, 4]``."""
        if points.size(0) != gt_bboxes.size(0) or points.size(-1) != 2 \
                or gt_bboxes.size(-1) != 4:
            raise ValueError(f'points must be [N, 2] and gt_bboxes [N, 4], got '
                             f'{tuple(points.shape)} and {tuple(gt_bboxes.shape)}')
        return bbox2distance(points, gt_bboxes, max_dis, eps)

    def decode(self, points, pred_bboxes, max_shape=None):
        """``points [(B,) N, 2]``, distances ``pred_bboxes [(B,) N, 4]`` -> boxes."""
        if points.size(0) != pred_bboxes.size(0) or points.size(-1) != 2 \
                or pred_bboxes.size(-1) != 4:
            raise ValueError(f'points must be [(B,) N, 2] and pred_bboxes [(B,) N, 4], got '
                             f'{tuple(points.shape)} and {tuple(pred_bboxes.shape)}')
        return distance2bbox(points, pred_bboxes, max_shape if self.clip_border else None)
