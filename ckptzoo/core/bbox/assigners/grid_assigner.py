"""mmdet 2.x ``GridAssigner`` (YOLOv3): max-IoU assignment restricted to the *responsible*
priors (those of the grid cell holding a ground truth's centre).

Every prior starts ignored (-1); a prior whose best IoU over all ground truths is within
``neg_iou_thr`` is negative (0), whatever its cell; a responsible prior whose best IoU among
responsible priors exceeds ``pos_iou_thr`` is positive; then each ground truth takes its best
responsible prior(s) when that IoU exceeds ``min_pos_iou``.
"""
import torch

from ....registry import TASK_UTILS
from ..iou_calculators import bbox_overlaps
from .assign_result import AssignResult

__all__ = ['GridAssigner']


@TASK_UTILS.register_module()
class GridAssigner:
    """Args:
        pos_iou_thr (float): a responsible prior above it is positive.
        neg_iou_thr (float | tuple[float, float]): a prior whose best IoU is in ``[0, thr]``
            (or ``(low, high]``) is negative.
        min_pos_iou (float): a ground truth takes its best responsible prior only above it.
        gt_max_assign_all (bool): every responsible prior tied at that best IoU (True) or the
            first one only.
        iou_calculator (dict): only ``dict(type='BboxOverlaps2D')``.
    """

    def __init__(self, pos_iou_thr, neg_iou_thr, min_pos_iou=.0, gt_max_assign_all=True,
                 iou_calculator=dict(type='BboxOverlaps2D')):
        if isinstance(neg_iou_thr, list):
            neg_iou_thr = tuple(neg_iou_thr)
        if isinstance(neg_iou_thr, tuple):
            if len(neg_iou_thr) != 2:
                raise ValueError(f'neg_iou_thr must be a float or a (low, high) pair, '
                                 f'got {neg_iou_thr!r}')
        elif isinstance(neg_iou_thr, (int, float)):
            neg_iou_thr = float(neg_iou_thr)
        else:
            raise TypeError(f'neg_iou_thr must be a float or a (low, high) pair, '
                            f'got {neg_iou_thr!r}')
        if not isinstance(iou_calculator, dict) or iou_calculator.get('type') != 'BboxOverlaps2D':
            raise NotImplementedError(f"iou_calculator must be dict(type='BboxOverlaps2D'), "
                                      f'got {iou_calculator!r}')
        self.pos_iou_thr = pos_iou_thr
        self.neg_iou_thr = neg_iou_thr
        self.min_pos_iou = min_pos_iou
        self.gt_max_assign_all = gt_max_assign_all

    def assign(self, bboxes, box_responsible_flags, gt_bboxes, gt_labels=None):
        """``bboxes [N, 4]`` priors, ``box_responsible_flags [N]``, ``gt_bboxes [K, 4]``;
        returns an :class:`AssignResult`."""
        num_gts, num_bboxes = gt_bboxes.size(0), bboxes.size(0)
        if box_responsible_flags.numel() != num_bboxes:
            raise ValueError(f'box_responsible_flags needs one flag per prior ({num_bboxes}), '
                             f'got {box_responsible_flags.numel()}')
        overlaps = bbox_overlaps(gt_bboxes, bboxes)
        gt_inds = overlaps.new_full((num_bboxes, ), -1, dtype=torch.long)
        if num_gts == 0 or num_bboxes == 0:
            if num_gts == 0:
                gt_inds[:] = 0
            labels = None if gt_labels is None else \
                overlaps.new_full((num_bboxes, ), -1, dtype=torch.long)
            return AssignResult(num_gts, gt_inds, overlaps.new_zeros((num_bboxes, )),
                                labels=labels)
        max_overlaps, _ = overlaps.max(dim=0)
        if isinstance(self.neg_iou_thr, float):
            gt_inds[(max_overlaps >= 0) & (max_overlaps <= self.neg_iou_thr)] = 0
        else:
            low, high = self.neg_iou_thr
            gt_inds[(max_overlaps > low) & (max_overlaps <= high)] = 0
        responsible = box_responsible_flags.bool()
        overlaps[:, ~responsible] = -1.
        max_overlaps, argmax_overlaps = overlaps.max(dim=0)
        gt_max_overlaps, gt_argmax_overlaps = overlaps.max(dim=1)
        pos = (max_overlaps > self.pos_iou_thr) & responsible
        gt_inds[pos] = argmax_overlaps[pos] + 1
        for i in range(num_gts):
            if gt_max_overlaps[i] > self.min_pos_iou:
                if self.gt_max_assign_all:
                    gt_inds[(overlaps[i, :] == gt_max_overlaps[i]) & responsible] = i + 1
                elif responsible[gt_argmax_overlaps[i]]:
                    gt_inds[gt_argmax_overlaps[i]] = i + 1
        labels = None
        if gt_labels is not None:
            labels = gt_inds.new_full((num_bboxes, ), -1)
            pos = gt_inds > 0
            labels[pos] = gt_labels[gt_inds[pos] - 1].long()
        return AssignResult(num_gts, gt_inds, max_overlaps, labels=labels)
