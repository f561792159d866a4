"""Pairwise IoU / IoF of x1y1x2y2 boxes (mmdet's ``BboxOverlaps2D`` without the +1).

IoU is ``torchvision.ops.box_iou``; IoF (intersection over the first box's area, used to
ignore anchors inside ``gt_bboxes_ignore``) has no torchvision counterpart.
"""
import torch
from torchvision.ops import box_area, box_iou

__all__ = ['bbox_overlaps']


def _intersection(boxes1, boxes2):
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    return wh[..., 0] * wh[..., 1]


def bbox_overlaps(boxes1, boxes2, mode='iou', eps=1e-6):
    """``[N, M]`` overlaps of ``boxes1 [N, 4]`` with ``boxes2 [M, 4]`` in float32.

    ``mode='iof'`` divides by the area of ``boxes1`` (clamped to ``eps``, as mmdet).
    """
    if mode not in ('iou', 'iof'):
        raise ValueError(f"mode must be 'iou' or 'iof', got {mode!r}")
    boxes1 = boxes1[:, :4].float()
    boxes2 = boxes2[:, :4].float()
    if boxes1.numel() == 0 or boxes2.numel() == 0:
        return boxes1.new_zeros((boxes1.shape[0], boxes2.shape[0]))
    if mode == 'iou':
        return box_iou(boxes1, boxes2)
    return _intersection(boxes1, boxes2) / box_area(boxes1).clamp(min=eps)[:, None]
