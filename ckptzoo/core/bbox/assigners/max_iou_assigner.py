"""mmdet 2.x ``MaxIoUAssigner``: each prior to the ground truth it overlaps most.

One fix over mmdet: with ``match_low_quality`` and ``min_pos_iou=0`` (RetinaNet's setting),
mmdet makes every prior a positive of a ground truth box that overlaps no prior at all
(a degenerate or off-image box has max IoU 0, and every prior "ties" at 0). Here a ground
truth with no overlap at all gets no low-quality match.
"""
import torch

from ....registry import TASK_UTILS
from .assign_result import AssignResult
from ..iou_calculators.iou2d_calculator import bbox_overlaps

__all__ = ['MaxIoUAssigner']


@TASK_UTILS.register_module()
class MaxIoUAssigner:
    """Assign priors to ground truth by IoU, as mmdet 2.x.

    Each prior starts ignored (-1). Its max IoU ``m`` with any ground truth decides:
    ``m < neg_iou_thr`` (or within ``[lo, hi)`` for a tuple) makes it negative (0);
    ``m >= pos_iou_thr`` makes it a positive of that ground truth. With ``match_low_quality``,
    each ground truth then also claims its best prior(s) if that IoU is at least
    ``min_pos_iou`` (all tied priors when ``gt_max_assign_all``), overriding the above.
    Priors whose IoF with ``gt_bboxes_ignore`` exceeds ``ignore_iof_thr`` (when > 0) take
    part with IoU -1, i.e. they stay ignored unless claimed by a low-quality match.

    Args:
        ignore_wrt_candidates (bool): IoF over the prior's area (True) or the ignore box's.
        gpu_assign_thr (int): assign on the CPU when there are more ground truths than this
            (> 0), to save GPU memory.
        iou_calculator (dict): only ``dict(type='BboxOverlaps2D')``.
    """

    def __init__(self, pos_iou_thr, neg_iou_thr, min_pos_iou=.0, gt_max_assign_all=True,
                 ignore_iof_thr=-1, ignore_wrt_candidates=True, match_low_quality=True,
                 gpu_assign_thr=-1, iou_calculator=dict(type='BboxOverlaps2D')):
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
        self.ignore_iof_thr = ignore_iof_thr
        self.ignore_wrt_candidates = ignore_wrt_candidates
        self.match_low_quality = match_low_quality
        self.gpu_assign_thr = gpu_assign_thr

    def assign(self, bboxes, gt_bboxes, gt_bboxes_ignore=None, gt_labels=None):
        """``bboxes [N, 4]`` priors, ``gt_bboxes [K, 4]``; returns an :class:`AssignResult`."""
        on_cpu = self.gpu_assign_thr > 0 and gt_bboxes.shape[0] > self.gpu_assign_thr
        device = bboxes.device
        if on_cpu:
            bboxes, gt_bboxes = bboxes.cpu(), gt_bboxes.cpu()
            gt_bboxes_ignore = None if gt_bboxes_ignore is None else gt_bboxes_ignore.cpu()
            gt_labels = None if gt_labels is None else gt_labels.cpu()
        overlaps = bbox_overlaps(gt_bboxes, bboxes)
        if (self.ignore_iof_thr > 0 and gt_bboxes_ignore is not None
                and gt_bboxes_ignore.numel() > 0 and bboxes.numel() > 0):
            if self.ignore_wrt_candidates:
                ignore = bbox_overlaps(bboxes, gt_bboxes_ignore, mode='iof').max(dim=1)[0]
            else:
                ignore = bbox_overlaps(gt_bboxes_ignore, bboxes, mode='iof').max(dim=0)[0]
            overlaps[:, ignore > self.ignore_iof_thr] = -1
        result = self.assign_wrt_overlaps(overlaps, gt_labels)
        if on_cpu:
            result.gt_inds = result.gt_inds.to(device)
            result.max_overlaps = result.max_overlaps.to(device)
            if result.labels is not None:
                result.labels = result.labels.to(device)
        return result

    def assign_wrt_overlaps(self, overlaps, gt_labels=None):
        """Assign from ``overlaps [K, N]`` (ground truths x priors)."""
        num_gts, num_bboxes = overlaps.shape
        gt_inds = overlaps.new_full((num_bboxes, ), -1, dtype=torch.long)
        if num_gts == 0 or num_bboxes == 0:
            max_overlaps = overlaps.new_zeros((num_bboxes, ))
            if num_gts == 0:
                gt_inds[:] = 0
            labels = None if gt_labels is None else \
                overlaps.new_full((num_bboxes, ), -1, dtype=torch.long)
            return AssignResult(num_gts, gt_inds, max_overlaps, labels=labels)

        max_overlaps, argmax_overlaps = overlaps.max(dim=0)
        gt_max_overlaps, gt_argmax_overlaps = overlaps.max(dim=1)
        if isinstance(self.neg_iou_thr, float):
            gt_inds[(max_overlaps >= 0) & (max_overlaps < self.neg_iou_thr)] = 0
        else:
            low, high = self.neg_iou_thr
            gt_inds[(max_overlaps >= low) & (max_overlaps < high)] = 0
        pos = max_overlaps >= self.pos_iou_thr
        gt_inds[pos] = argmax_overlaps[pos] + 1
        if self.match_low_quality:
            for i in range(num_gts):
                if gt_max_overlaps[i] >= self.min_pos_iou and gt_max_overlaps[i] > 0:
                    if self.gt_max_assign_all:
                        gt_inds[overlaps[i, :] == gt_max_overlaps[i]] = i + 1
                    else:
                        gt_inds[gt_argmax_overlaps[i]] = i + 1

        labels = None
        if gt_labels is not None:
            labels = gt_inds.new_full((num_bboxes, ), -1)
            pos = gt_inds > 0
            labels[pos] = gt_labels[gt_inds[pos] - 1].long()
        return AssignResult(num_gts, gt_inds, max_overlaps, labels=labels)
