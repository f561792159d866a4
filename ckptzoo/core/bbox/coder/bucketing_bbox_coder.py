"""mmdet 2.x ``BucketingBBoxCoder`` (SABL, https://arxiv.org/abs/1912.04260).

Each side of a proposal (rescaled by ``scale_factor`` about its centre) is covered by
``ceil(num_buckets / 2)`` buckets of width ``w / num_buckets`` counted inwards from that side.
A box is coded per side as the bucket nearest the ground-truth edge (a one-hot label) and the
offsets of the edge from every bucket centre, in bucket widths. Decoding takes the best bucket
of each side plus its offset; the localisation confidence (bucketing-guided rescoring) is the
mean over the sides of the top bucket score, plus the second one when it is a neighbour.
Side order everywhere is left, right, top, down.
"""
import math

import torch
import torch.nn.functional as F

from ....registry import TASK_UTILS
from ..transforms import bbox_rescale

__all__ = ['BucketingBBoxCoder', 'generat_buckets', 'bbox2bucket', 'bucket2bbox']


def _side_num(num_buckets):
    return int(math.ceil(num_buckets / 2.0))


def generat_buckets(proposals, num_buckets, scale_factor=1.0):
    """mmdet's (name kept): ``(bucket_w [n], bucket_h [n], l, r, t, d)``, each side's
    bucket centres ``[n, ceil(num_buckets / 2)]``, counted inwards from that side."""
    proposals = bbox_rescale(proposals, scale_factor)
    x1, y1, x2, y2 = proposals.unbind(-1)
    bucket_w = (x2 - x1) / num_buckets
    bucket_h = (y2 - y1) / num_buckets
    steps = 0.5 + torch.arange(_side_num(num_buckets)).to(proposals).float()
    return (bucket_w, bucket_h, x1[:, None] + steps * bucket_w[:, None],
            x2[:, None] - steps * bucket_w[:, None], y1[:, None] + steps * bucket_h[:, None],
            y2[:, None] - steps * bucket_h[:, None])


def bbox2bucket(proposals, gt, num_buckets, scale_factor, offset_topk=2, offset_upperbound=1.0,
                cls_ignore_neighbor=True):
    """Targets ``(offsets, offset_weights, bucket_labels, cls_weights)``, each
    ``[n, 4 * ceil(num_buckets / 2)]``: the offsets of the edges from every bucket; weight 1
    on the nearest bucket and on the next ``offset_topk - 1`` nearest when closer than
    ``offset_upperbound``; the nearest bucket one-hot; the bucket-classification weights (the
    other buckets within one width ignored when ``cls_ignore_neighbor``)."""
    if proposals.size() != gt.size():
        raise ValueError(f'proposals {tuple(proposals.shape)} and gt {tuple(gt.shape)} differ')
    proposals, gt = proposals.float(), gt.float()
    bucket_w, bucket_h, l, r, t, d = generat_buckets(proposals, num_buckets, scale_factor)
    n, side_num = l.shape
    size = torch.stack([bucket_w, bucket_w, bucket_h, bucket_h], 1)[..., None]  # [n, 4, 1]
    offsets = (torch.stack([l, r, t, d], 1) - gt[:, [0, 2, 1, 3], None]) / size  # [n, 4, s]
    topk, label = offsets.abs().topk(offset_topk, dim=2, largest=False, sorted=True)
    offset_weights = offsets.new_zeros(offsets.shape)
    offset_weights.scatter_(2, label[..., :1], 1.0)
    if offset_topk > 1:
        offset_weights.scatter_(2, label[..., 1:], (topk[..., 1:] < offset_upperbound).float())
    bucket_labels = F.one_hot(label[..., 0].reshape(-1), side_num).view(n, -1).float()
    offsets, offset_weights = offsets.view(n, -1), offset_weights.view(n, -1)
    if cls_ignore_neighbor:
        near = offsets.abs() < 1
        cls_weights = (~(near & (bucket_labels == 0))).float()
    else:
        cls_weights = torch.ones_like(offsets)
    return offsets, offset_weights, bucket_labels, cls_weights


def bucket2bbox(proposals, cls_preds, offset_preds, num_buckets, scale_factor=1.0,
                max_shape=None, clip_border=True):
    """Boxes ``[n, 4]`` from each side's best bucket and its offset (clipped to
    ``max_shape - 1`` when ``clip_border``), and the localisation confidence ``[n]``."""
    side_num = _side_num(num_buckets)
    scores = F.softmax(cls_preds.view(-1, side_num), dim=1)
    score_topk, score_label = scores.topk(2, dim=1, largest=True, sorted=True)
    x1, y1, x2, y2 = bbox_rescale(proposals, scale_factor).unbind(-1)
    bucket_w = (x2 - x1) / num_buckets
    bucket_h = (y2 - y1) / num_buckets
    best = score_label[:, 0].view(-1, 4)  # [n, 4]: l, r, t, d
    offsets = offset_preds.view(-1, 4, side_num).gather(2, best[..., None])[..., 0]
    centre = 0.5 + best.float()
    new_x1 = x1 + centre[:, 0] * bucket_w - offsets[:, 0] * bucket_w
    new_x2 = x2 - centre[:, 1] * bucket_w - offsets[:, 1] * bucket_w
    new_y1 = y1 + centre[:, 2] * bucket_h - offsets[:, 2] * bucket_h
    new_y2 = y2 - centre[:, 3] * bucket_h - offsets[:, 3] * bucket_h
    if clip_border and max_shape is not None:
        new_x1 = new_x1.clamp(min=0, max=max_shape[1] - 1)
        new_y1 = new_y1.clamp(min=0, max=max_shape[0] - 1)
        new_x2 = new_x2.clamp(min=0, max=max_shape[1] - 1)
        new_y2 = new_y2.clamp(min=0, max=max_shape[0] - 1)
    bboxes = torch.stack([new_x1, new_y1, new_x2, new_y2], dim=-1)
    neighbour = ((score_label[:, 0] - score_label[:, 1]).abs() == 1).float()
    confidence = (score_topk[:, 0] + score_topk[:, 1] * neighbour).view(-1, 4).mean(dim=1)
    return bboxes, confidence


@TASK_UTILS.register_module()
class BucketingBBoxCoder:
    """Args (mmdet 2.x's): ``num_buckets``, ``scale_factor`` (of the proposals spanned by
    the buckets), ``offset_topk`` (buckets given an offset target), ``offset_upperbound``
    (the furthest such a bucket may be, in widths), ``cls_ignore_neighbor``, ``clip_border``.
    """

    def __init__(self, num_buckets, scale_factor, offset_topk=2, offset_upperbound=1.0,
                 cls_ignore_neighbor=True, clip_border=True):
        self.num_buckets = num_buckets
        self.scale_factor = scale_factor
        self.offset_topk = offset_topk
        self.offset_upperbound = offset_upperbound
        self.cls_ignore_neighbor = cls_ignore_neighbor
        self.clip_border = clip_border

    def encode(self, bboxes, gt_bboxes):
        """``(offsets, offset_weights, bucket_labels, cls_weights)``: :func:`bbox2bucket`."""
        if bboxes.size(0) != gt_bboxes.size(0) or bboxes.size(-1) != 4 \
                or gt_bboxes.size(-1) != 4:
            raise ValueError(f'encode needs [n, 4] boxes and gt, got {tuple(bboxes.shape)} '
                             f'and {tuple(gt_bboxes.shape)}')
        return bbox2bucket(bboxes, gt_bboxes, self.num_buckets, self.scale_factor,
                           self.offset_topk, self.offset_upperbound, self.cls_ignore_neighbor)

    def decode(self, bboxes, pred_bboxes, max_shape=None):
        """``pred_bboxes = (cls_preds, offset_preds)``, each ``[n, 4 * side_num]`` ->
        ``(bboxes [n, 4], loc_confidence [n])``: :func:`bucket2bbox`."""
        if len(pred_bboxes) != 2:
            raise ValueError('decode needs (cls_preds, offset_preds)')
        cls_preds, offset_preds = pred_bboxes
        if cls_preds.size(0) != bboxes.size(0) or offset_preds.size(0) != bboxes.size(0):
            raise ValueError(f'{bboxes.size(0)} boxes but predictions for '
                             f'{cls_preds.size(0)} and {offset_preds.size(0)}')
        return bucket2bbox(bboxes, cls_preds, offset_preds, self.num_buckets,
                           self.scale_factor, max_shape, self.clip_border)
