"""mmdet 2.x ``IoUBalancedNegSampler`` (Libra R-CNN): negatives drawn evenly over bins of
their largest IoU with a ground truth, so that the hard (higher-IoU) ones are not swamped by
the many easy ones.

The candidate lists are built as mmdet's are (Python sets of indices, whose iteration order
decides which elements a draw picks), so a seeded run keeps mmdet's negatives.
"""
import numbers

import numpy as np
import torch

from ....registry import TASK_UTILS
from .random_sampler import RandomSampler

__all__ = ['IoUBalancedNegSampler']


def _as_inds(values):
    return np.array(values, dtype=np.int64)  # mmdet's np.int, gone from numpy >= 1.24


@TASK_UTILS.register_module()
class IoUBalancedNegSampler(RandomSampler):
    """Args (mmdet's): ``num``, ``pos_fraction``, ``floor_thr`` (-1, or >= 0: negatives with
    IoU below it are drawn at random, apart from the binned ones), ``floor_fraction`` (their
    share), ``num_bins`` (IoU bins between ``floor_thr`` and the largest IoU), and
    :class:`RandomSampler`'s.

    As mmdet's, the first draw with ``floor_thr=-1`` sets ``floor_thr`` to 0: from the next
    image on, negatives of IoU 0 are floor negatives (with ``floor_fraction`` 0: the fill-up).
    """

    def __init__(self, num, pos_fraction, floor_thr=-1, floor_fraction=0, num_bins=3,
                 **kwargs):
        super().__init__(num, pos_fraction, **kwargs)
        if not (isinstance(floor_thr, numbers.Real) and (floor_thr >= 0 or floor_thr == -1)):
            raise ValueError(f'IoUBalancedNegSampler floor_thr must be >= 0 or -1, got '
                             f'{floor_thr!r}')
        if not (isinstance(floor_fraction, numbers.Real) and 0 <= floor_fraction <= 1):
            raise ValueError(f'IoUBalancedNegSampler floor_fraction must be in [0, 1], got '
                             f'{floor_fraction!r}')
        if not (isinstance(num_bins, numbers.Integral) and num_bins >= 1):
            raise ValueError(f'IoUBalancedNegSampler num_bins must be an int >= 1, got '
                             f'{num_bins!r}')
        self.floor_thr = floor_thr
        self.floor_fraction = floor_fraction
        self.num_bins = num_bins

    def _fill_up(self, sampled, pool, num_expected):
        """``sampled`` topped up to ``num_expected`` with random others of the set ``pool``."""
        if len(sampled) < num_expected:
            extra = _as_inds(list(pool - set(sampled)))
            if len(extra) > num_expected - len(sampled):
                extra = self.random_choice(extra, num_expected - len(sampled))
            sampled = np.concatenate([sampled, extra])
        return sampled

    def sample_via_interval(self, max_overlaps, full_set, num_expected):
        """``num_expected`` of the indices in ``full_set``, an equal share from each of
        ``num_bins`` IoU intervals from ``floor_thr`` to the largest IoU, then filled up."""
        interval = (max_overlaps.max() - self.floor_thr) / self.num_bins
        per_bin = int(num_expected / self.num_bins)
        sampled = []
        for i in range(self.num_bins):
            start = self.floor_thr + i * interval
            end = self.floor_thr + (i + 1) * interval
            in_bin = list(set(np.where((max_overlaps >= start) & (max_overlaps < end))[0]) &
                          full_set)
            sampled.append(self.random_choice(in_bin, per_bin) if len(in_bin) > per_bin
                           else _as_inds(in_bin))
        return self._fill_up(np.concatenate(sampled), full_set, num_expected)

    def _sample_neg(self, assign_result, num_expected, **kwargs):
        neg_inds = torch.nonzero(assign_result.gt_inds == 0, as_tuple=False).flatten()
        if len(neg_inds) <= num_expected:
            return neg_inds
        max_overlaps = assign_result.max_overlaps.cpu().numpy()
        neg_set = set(neg_inds.cpu().numpy())
        if self.floor_thr > 0:
            floor_set = set(np.where((max_overlaps >= 0) & (max_overlaps < self.floor_thr))[0])
            iou_set = set(np.where(max_overlaps >= self.floor_thr)[0])
        elif self.floor_thr == 0:
            floor_set = set(np.where(max_overlaps == 0)[0])
            iou_set = set(np.where(max_overlaps > self.floor_thr)[0])
        else:
            floor_set = set()
            iou_set = set(np.where(max_overlaps > self.floor_thr)[0])
            self.floor_thr = 0  # mmdet's: kept for the next images (see the class docstring)
        floor_neg = list(floor_set & neg_set)
        iou_neg = list(iou_set & neg_set)
        num_iou = int(num_expected * (1 - self.floor_fraction))
        if len(iou_neg) > num_iou:
            iou_sampled = self.sample_via_interval(max_overlaps, set(iou_neg), num_iou) \
                if self.num_bins >= 2 else self.random_choice(iou_neg, num_iou)
        else:
            iou_sampled = _as_inds(iou_neg)
        num_floor = num_expected - len(iou_sampled)
        floor_sampled = self.random_choice(floor_neg, num_floor) \
            if len(floor_neg) > num_floor else _as_inds(floor_neg)
        sampled = self._fill_up(np.concatenate((floor_sampled, iou_sampled)), neg_set,
                                num_expected)
        return torch.from_numpy(sampled).long().to(assign_result.gt_inds.device)
