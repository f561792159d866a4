"""mmdet 2.x ``CenterRegionAssigner`` (FSAF): a prior is positive for a ground truth when its
centre lies in the box and it covers (IoF > ``min_pos_iof``) the box's core, the box scaled by
``pos_scale``; the smaller box wins where cores overlap. A prior that covers the shadow (the box
scaled by ``neg_scale``) but not the core, or a core it lost to a smaller box, is *shadowed*:
negative, with that box's class ignored in its classification loss.

The result's ``shadowed_labels`` attribute (mmdet's extra property of that name) holds
``[k, 2]`` pairs (prior index, class label) once ``gt_labels`` are given, else (prior index,
1-based gt index)."""
import torch

from ....registry import TASK_UTILS
from ..iou_calculators.iou2d_calculator import bbox_overlaps
from .assign_result import AssignResult

__all__ = ['CenterRegionAssigner', 'scale_boxes', 'is_located_in', 'bboxes_area']


def scale_boxes(bboxes, scale):
    """``[m, 4]`` boxes scaled by ``scale`` about their centres."""
    w_half = (bboxes[:, 2] - bboxes[:, 0]) * .5
    h_half = (bboxes[:, 3] - bboxes[:, 1]) * .5
    x_c = (bboxes[:, 2] + bboxes[:, 0]) * .5
    y_c = (bboxes[:, 3] + bboxes[:, 1]) * .5
    w_half = w_half * scale
    h_half = h_half * scale
    return torch.stack([x_c - w_half, y_c - h_half, x_c + w_half, y_c + h_half], dim=1)


def is_located_in(points, bboxes):
    """``[m, n]``: point ``i`` strictly inside box ``j``."""
    x, y = points[:, 0:1], points[:, 1:2]
    return (x > bboxes[:, 0]) & (x < bboxes[:, 2]) & (y > bboxes[:, 1]) & (y < bboxes[:, 3])


def bboxes_area(bboxes):
    return (bboxes[:, 2] - bboxes[:, 0]) * (bboxes[:, 3] - bboxes[:, 1])


@TASK_UTILS.register_module()
class CenterRegionAssigner:
    """Args (mmdet's):
        pos_scale (float): the core's scale of a box (positives).
        neg_scale (float): the shadow's scale (shadowed, ignored for that class).
        min_pos_iof (float): least IoF of a prior with a core or shadow.
        ignore_gt_scale (float): priors whose centres lie in an ignored box scaled by this
            are ignored.
        foreground_dominate (bool): a prior positive for a class stays positive where a box of
            the same class shadows it (default: it becomes negative with that class ignored).
        iou_calculator (dict): only ``dict(type='BboxOverlaps2D')``.
    """

    def __init__(self, pos_scale, neg_scale, min_pos_iof=1e-2, ignore_gt_scale=0.5,
                 foreground_dominate=False, iou_calculator=dict(type='BboxOverlaps2D')):
        if not isinstance(iou_calculator, dict) or \
                iou_calculator.get('type') != 'BboxOverlaps2D':
            raise NotImplementedError(f"iou_calculator must be dict(type='BboxOverlaps2D'), "
                                      f'got {iou_calculator!r}')
        self.pos_scale = pos_scale
        self.neg_scale = neg_scale
        self.min_pos_iof = min_pos_iof
        self.ignore_gt_scale = ignore_gt_scale
        self.foreground_dominate = foreground_dominate

    @staticmethod
    def get_gt_priorities(gt_bboxes):
        """Priority of each box: smaller boxes get larger priorities."""
        _, sort_idx = bboxes_area(gt_bboxes).sort(descending=True)
        return sort_idx.argsort()

    def assign(self, bboxes, gt_bboxes, gt_bboxes_ignore=None, gt_labels=None):
        if bboxes.size(1) != 4:
            raise ValueError(f'bboxes must be [n, 4], got {tuple(bboxes.shape)}')
        gt_core = scale_boxes(gt_bboxes, self.pos_scale)
        gt_shadow = scale_boxes(gt_bboxes, self.neg_scale)
        centers = (bboxes[:, 2:4] + bboxes[:, 0:2]) / 2
        in_core = is_located_in(centers, gt_bboxes) & (
            bbox_overlaps(bboxes, gt_core, mode='iof') > self.min_pos_iof)
        in_shadow = (bbox_overlaps(bboxes, gt_shadow, mode='iof') > self.min_pos_iof) & ~in_core
        num_gts, num_bboxes = gt_bboxes.size(0), bboxes.size(0)
        if num_gts == 0 or num_bboxes == 0:
            gt_ids = in_core.new_zeros((num_bboxes, ), dtype=torch.long)
            shadowed = gt_ids.new_empty((0, 2))
        else:
            gt_ids, shadowed = self.assign_one_hot_gt_indices(
                in_core, in_shadow, gt_priority=self.get_gt_priorities(gt_bboxes))
        if gt_bboxes_ignore is not None and gt_bboxes_ignore.numel() > 0:
            ignored = is_located_in(centers, scale_boxes(gt_bboxes_ignore,
                                                         self.ignore_gt_scale)).any(dim=1)
            gt_ids[ignored] = -1
        labels = None
        if gt_labels is not None:
            labels = gt_ids.new_full((num_bboxes, ), -1)
            pos = gt_ids > 0
            labels[pos] = gt_labels[gt_ids[pos] - 1]
            shadowed = shadowed.clone()
            if shadowed.numel() > 0:
                pixel_idx, gt_idx = shadowed[:, 0], shadowed[:, 1]
                shadowed[:, 1] = gt_labels[gt_idx - 1]
                override = labels[pixel_idx] == shadowed[:, 1]
                if self.foreground_dominate:
                    shadowed = shadowed[~override]
                else:
                    labels[pixel_idx[override]] = -1
                    gt_ids[pixel_idx[override]] = 0
        result = AssignResult(num_gts, gt_ids, None, labels=labels)
        result.shadowed_labels = shadowed
        return result

    @staticmethod
    def assign_one_hot_gt_indices(is_bbox_in_gt_core, is_bbox_in_gt_shadow, gt_priority=None):
        """Each prior to the highest-priority box whose core it is in: ``(assigned 1-based gt
        index or 0 [num_prior], shadowed (prior, 1-based gt) pairs [k, 2])``; the cores a prior
        lost count as shadows."""
        num_bboxes, num_gts = is_bbox_in_gt_core.shape
        if gt_priority is None:
            gt_priority = torch.arange(num_gts, device=is_bbox_in_gt_core.device)
        assigned = is_bbox_in_gt_core.new_zeros((num_bboxes, ), dtype=torch.long)
        shadowed = torch.nonzero(is_bbox_in_gt_shadow, as_tuple=False)
        if is_bbox_in_gt_core.sum() == 0:
            shadowed[:, 1] += 1
            return assigned, shadowed
        priority = is_bbox_in_gt_core.new_full((num_bboxes, num_gts), -1, dtype=torch.long)
        matched = torch.any(is_bbox_in_gt_core, dim=1)
        priority[is_bbox_in_gt_core] = gt_priority[
            torch.nonzero(is_bbox_in_gt_core, as_tuple=False)[:, 1]]
        _, best = priority[matched].max(dim=1)
        assigned[matched] = best + 1
        lost = is_bbox_in_gt_core.clone()
        lost[matched, best] = False
        shadowed = torch.cat((shadowed, torch.nonzero(lost, as_tuple=False)), dim=0)
        if shadowed.numel() > 0:
            shadowed[:, 1] += 1
        return assigned, shadowed
