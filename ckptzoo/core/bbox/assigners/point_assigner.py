"""mmdet 2.x ``PointAssigner`` (RepPoints' initial stage): each ground truth claims the
``pos_num`` points nearest to its centre on the one pyramid level its size maps to."""
import torch

from ....registry import TASK_UTILS
from .assign_result import AssignResult

__all__ = ['PointAssigner']


@TASK_UTILS.register_module()
class PointAssigner:
    """A ground truth of size ``w x h`` belongs to level ``int((log2(w / scale) +
    log2(h / scale)) / 2)`` (clamped to the levels present), i.e. the points of stride
    ``2 ** level``. On that level it claims the ``pos_num`` points nearest its centre in the
    box-normalised distance ``|(p - c) / (w, h)|``, unless a ground truth handled earlier is
    nearer to the point. Every other point is negative (0); nothing is ignored.

    Args:
        scale (int | float): the box side that maps to level 0 (stride 1).
        pos_num (int): points each ground truth claims. mmdet fails when a level has fewer
            points than ``pos_num``; here the ground truth then claims all of them.
    """

    def __init__(self, scale=4, pos_num=3):
        if isinstance(pos_num, bool) or not isinstance(pos_num, int) or pos_num < 1:
            raise ValueError(f'PointAssigner pos_num must be a positive int, got {pos_num!r}')
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale <= 0:
            raise ValueError(f'PointAssigner scale must be a positive number, got {scale!r}')
        self.scale = scale
        self.pos_num = pos_num

    def assign(self, points, gt_bboxes, gt_bboxes_ignore=None, gt_labels=None):
        """``points``: ``[n, 3+]`` rows ``(x, y, stride, ...)``; ``gt_bboxes``: ``[k, 4]``;
        ``gt_bboxes_ignore`` is unused (as mmdet). Returns an :class:`AssignResult` with
        ``max_overlaps`` None."""
        if points.dim() != 2 or points.size(1) < 3:
            raise ValueError(f'PointAssigner needs points as [n, 3+] rows (x, y, stride, ...), '
                             f'got {tuple(points.shape)}')
        num_points, num_gts = points.size(0), gt_bboxes.size(0)
        gt_inds = points.new_zeros((num_points, ), dtype=torch.long)
        if num_gts == 0 or num_points == 0:
            labels = None if gt_labels is None else points.new_full((num_points, ), -1,
                                                                     dtype=torch.long)
            return AssignResult(num_gts, gt_inds, None, labels=labels)
        points_xy = points[:, :2]
        points_lvl = torch.log2(points[:, 2]).int()
        gt_xy = (gt_bboxes[:, :2] + gt_bboxes[:, 2:]) / 2
        gt_wh = (gt_bboxes[:, 2:] - gt_bboxes[:, :2]).clamp(min=1e-6)
        gt_lvl = ((torch.log2(gt_wh[:, 0] / self.scale) +
                   torch.log2(gt_wh[:, 1] / self.scale)) / 2).int()
        gt_lvl = gt_lvl.clamp(min=points_lvl.min(), max=points_lvl.max())
        assigned_dist = points.new_full((num_points, ), float('inf'))
        all_inds = torch.arange(num_points, device=points.device)
        for idx in range(num_gts):
            on_level = gt_lvl[idx] == points_lvl
            level_inds = all_inds[on_level]
            dist = ((points_xy[on_level] - gt_xy[[idx]]) / gt_wh[[idx]]).norm(dim=1)
            min_dist, nearest = torch.topk(dist, min(self.pos_num, dist.numel()),
                                           largest=False)
            nearest = level_inds[nearest]
            closer = min_dist < assigned_dist[nearest]
            gt_inds[nearest[closer]] = idx + 1
            assigned_dist[nearest[closer]] = min_dist[closer]
        labels = None
        if gt_labels is not None:
            labels = gt_inds.new_full((num_points, ), -1)
            pos = gt_inds > 0
            labels[pos] = gt_labels[gt_inds[pos] - 1].long()
        return AssignResult(num_gts, gt_inds, None, labels=labels)
