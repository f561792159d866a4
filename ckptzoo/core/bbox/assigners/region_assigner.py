"""mmdet 2.x ``RegionAssigner``: Cascade RPN's first-stage assignment by anchor *centres*
inside regions of each ground truth, on the pyramid level its size picks (no IoU)."""
import torch

from ....registry import TASK_UTILS
from ...anchor import anchor_inside_flags
from .assign_result import AssignResult

__all__ = ['RegionAssigner', 'calc_region', 'anchor_ctr_inside_region_flags']


def calc_region(bbox, ratio, stride, featmap_size=None):
    """The box shrunk by ``ratio`` from each edge, on the feature map (rounded, clamped to
    ``featmap_size`` (h, w))."""
    f = bbox / stride
    x1 = torch.round((1 - ratio) * f[0] + ratio * f[2])
    y1 = torch.round((1 - ratio) * f[1] + ratio * f[3])
    x2 = torch.round(ratio * f[0] + (1 - ratio) * f[2])
    y2 = torch.round(ratio * f[1] + (1 - ratio) * f[3])
    if featmap_size is not None:
        x1, x2 = x1.clamp(0, featmap_size[1]), x2.clamp(0, featmap_size[1])
        y1, y2 = y1.clamp(0, featmap_size[0]), y2.clamp(0, featmap_size[0])
    return x1, y1, x2, y2


def anchor_ctr_inside_region_flags(anchors, stride, region):
    """Whether each anchor's centre (on the feature map) lies in ``region`` (edges included)."""
    x1, y1, x2, y2 = region
    f = anchors / stride
    x = (f[:, 0] + f[:, 2]) * 0.5
    y = (f[:, 1] + f[:, 3]) * 0.5
    return (x >= x1) & (x <= x2) & (y >= y1) & (y <= y2)


@TASK_UTILS.register_module()
class RegionAssigner:
    """Assigns each anchor -1 (ignored), 0 (negative) or a 1-based ground-truth index.

    A ground truth of scale ``s = sqrt(w * h)`` belongs to level
    ``floor(log2(s / (anchor_scale * strides[0])) + 0.5)`` (clamped); there, anchors centred
    in its ``ignore_ratio`` region are ignored, those in its ``center_ratio`` region positive,
    and on the two adjacent levels its ignore region is ignored. Anchors outside the image
    (``allowed_border``) are ignored last.

    Args:
        center_ratio (float): size of the positive region, as a fraction of the box.
        ignore_ratio (float): size of the ignored region.
    """

    def __init__(self, center_ratio=0.2, ignore_ratio=0.5):
        self.center_ratio = center_ratio
        self.ignore_ratio = ignore_ratio

    def assign(self, mlvl_anchors, mlvl_valid_flags, gt_bboxes, img_meta, featmap_sizes,
               anchor_scale, anchor_strides, gt_bboxes_ignore=None, gt_labels=None,
               allowed_border=0):
        """An :class:`AssignResult` over the anchors of all levels (``max_overlaps`` None, as
        mmdet's: no IoU is computed). ``gt_bboxes_ignore`` is not supported (as mmdet)."""
        if gt_bboxes_ignore is not None:
            raise NotImplementedError('RegionAssigner does not support gt_bboxes_ignore')
        num_gts = gt_bboxes.shape[0]
        num_bboxes = sum(a.shape[0] for a in mlvl_anchors)
        if num_gts == 0 or num_bboxes == 0:
            labels = None if gt_labels is None else \
                gt_bboxes.new_full((num_bboxes, ), -1, dtype=torch.long)
            return AssignResult(num_gts, gt_bboxes.new_zeros((num_bboxes, ), dtype=torch.long),
                                gt_bboxes.new_zeros((num_bboxes, )), labels=labels)
        num_lvls = len(mlvl_anchors)
        r1 = (1 - self.center_ratio) / 2
        r2 = (1 - self.ignore_ratio) / 2
        scale = torch.sqrt((gt_bboxes[:, 2] - gt_bboxes[:, 0]) *
                           (gt_bboxes[:, 3] - gt_bboxes[:, 1]))
        min_anchor_size = scale.new_full((1, ), float(anchor_scale * anchor_strides[0]))
        target_lvls = torch.floor(torch.log2(scale) - torch.log2(min_anchor_size) + 0.5)
        target_lvls = target_lvls.clamp(min=0, max=num_lvls - 1).long()

        gt_inds, adjacent = [], []
        for lvl in range(num_lvls):
            h, w = featmap_sizes[lvl]
            if h * w != mlvl_anchors[lvl].shape[0]:
                raise ValueError(f'level {lvl}: {mlvl_anchors[lvl].shape[0]} anchors for a '
                                 f'{h}x{w} feature map (RegionAssigner takes one anchor per '
                                 'location)')
            gt_inds.append(gt_bboxes.new_zeros((h * w, ), dtype=torch.long))
            adjacent.append(gt_bboxes.new_zeros((h * w, ), dtype=torch.long))
        for gt_id in range(num_gts):
            lvl = target_lvls[gt_id].item()
            gt_bbox = gt_bboxes[gt_id, :4]
            stride, size = anchor_strides[lvl], featmap_sizes[lvl]
            ignore = anchor_ctr_inside_region_flags(mlvl_anchors[lvl], stride,
                                                    calc_region(gt_bbox, r2, stride, size))
            gt_inds[lvl][ignore] = -1
            pos = anchor_ctr_inside_region_flags(mlvl_anchors[lvl], stride,
                                                 calc_region(gt_bbox, r1, stride, size))
            gt_inds[lvl][pos] = gt_id + 1
            for other in (lvl - 1, lvl + 1):
                if 0 <= other < num_lvls:
                    o_stride, o_size = anchor_strides[other], featmap_sizes[other]
                    flags = anchor_ctr_inside_region_flags(
                        mlvl_anchors[other], o_stride,
                        calc_region(gt_bbox, r2, o_stride, o_size))
                    adjacent[other][flags] = 1
        for lvl in range(num_lvls):
            # mmdet 2.28.2 indexes with these 0/1 *long* flags (not a mask): the anchors at
            # positions 0 and 1 of the level are ignored, not the adjacent regions; kept as
            # is, except that index 1 of a one-location level (mmdet's IndexError) is dropped
            idx = adjacent[lvl]
            gt_inds[lvl][idx[idx < idx.numel()]] = -1
        flat_gt_inds = torch.cat(gt_inds)
        inside = anchor_inside_flags(torch.cat(mlvl_anchors), torch.cat(mlvl_valid_flags),
                                     img_meta['img_shape'], allowed_border)
        flat_gt_inds[~inside] = -1
        labels = None
        if gt_labels is not None:  # mmdet's mask here is one level's: it fails on several
            labels = torch.zeros_like(flat_gt_inds)
            pos = flat_gt_inds > 0
            labels[pos] = gt_labels[flat_gt_inds[pos] - 1]
        return AssignResult(num_gts, flat_gt_inds, None, labels=labels)
