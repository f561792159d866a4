"""mmdet 2.x's ``multiclass_nms`` (``mmdet/core/post_processing/bbox_nms.py``) over mmcv's
``batched_nms`` (:mod:`ckptzoo.ops.nms`), and YOLACT's ``fast_nms``."""
import torch

from ...ops.nms import batched_nms

__all__ = ['multiclass_nms', 'fast_nms']


def multiclass_nms(multi_bboxes, multi_scores, score_thr, nms_cfg, max_num=-1,
                   score_factors=None, return_inds=False):
    """mmdet 2.x's ``multiclass_nms``: class-wise NMS of every (box, class) scoring above
    ``score_thr``.

    Args:
        multi_bboxes (Tensor): ``[n, 4 * num_classes]`` (a box per class) or ``[n, 4]``.
        multi_scores (Tensor): ``[n, num_classes + 1]``; the last column (background) is
            dropped.
        score_thr (float): a (box, class) takes part when its score is above it.
        nms_cfg (dict): :func:`batched_nms`'s config.
        max_num (int): keep at most this many (when > 0).
        score_factors (Tensor | None): ``[n]`` factors applied to the scores after the
            threshold.
        return_inds (bool): also return each kept detection's index into the flattened
            ``[n * num_classes]`` (box, class) pairs.

    Returns:
        ``(dets [k, 5], labels [k])`` (and ``inds [k]``), best first.
    """
    num_classes = multi_scores.size(1) - 1
    if multi_bboxes.shape[1] > 4:
        bboxes = multi_bboxes.view(multi_scores.size(0), -1, 4)
    else:
        bboxes = multi_bboxes[:, None].expand(multi_scores.size(0), num_classes, 4)
    scores = multi_scores[:, :-1]
    labels = torch.arange(num_classes, dtype=torch.long, device=scores.device)
    labels = labels.view(1, -1).expand_as(scores)
    bboxes = bboxes.reshape(-1, 4)
    scores = scores.reshape(-1)
    labels = labels.reshape(-1)
    valid_mask = scores > score_thr
    if score_factors is not None:
        score_factors = score_factors.view(-1, 1).expand(multi_scores.size(0), num_classes)
        scores = scores * score_factors.reshape(-1)
    inds = valid_mask.nonzero(as_tuple=False).squeeze(1)
    bboxes, scores, labels = bboxes[inds], scores[inds], labels[inds]
    if bboxes.numel() == 0:
        dets = torch.cat([bboxes, scores[:, None]], -1)
        return (dets, labels, inds) if return_inds else (dets, labels)
    dets, keep = batched_nms(bboxes, scores, labels, nms_cfg)
    if max_num > 0:
        dets, keep = dets[:max_num], keep[:max_num]
    return (dets, labels[keep], inds[keep]) if return_inds else (dets, labels[keep])


def _batched_iou(boxes1, boxes2, eps=1e-6):
    """``[..., n, m]`` IoU of ``boxes1 [..., n, 4]`` with ``boxes2 [..., m, 4]`` in their own
    dtype (mmdet's batched ``bbox_overlaps``: the union clamped to ``eps``)."""
    area1 = (boxes1[..., 2] - boxes1[..., 0]) * (boxes1[..., 3] - boxes1[..., 1])
    area2 = (boxes2[..., 2] - boxes2[..., 0]) * (boxes2[..., 3] - boxes2[..., 1])
    lt = torch.max(boxes1[..., :, None, :2], boxes2[..., None, :, :2])
    rb = torch.min(boxes1[..., :, None, 2:], boxes2[..., None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    overlap = wh[..., 0] * wh[..., 1]
    union = area1[..., :, None] + area2[..., None, :] - overlap
    return overlap / union.clamp(min=eps)


def fast_nms(multi_bboxes, multi_scores, multi_coeffs, score_thr, iou_thr, top_k, max_num=-1):
    """mmdet 2.x's ``fast_nms`` (YOLACT): per class the ``top_k`` best boxes; a box is dropped
    when a better box of its class overlaps it by more than ``iou_thr``, even one that is
    itself dropped (so every decision is one matrix operation), or when its score is not above
    ``score_thr``; then the ``max_num`` best over all classes (every one when ``max_num`` <= 0).

    Args:
        multi_bboxes (Tensor): ``[n, 4]``, one box per prior (class-agnostic).
        multi_scores (Tensor): ``[n, num_classes + 1]``; the last column (background) is
            dropped.
        multi_coeffs (Tensor): ``[n, d]`` mask coefficients, kept along with their boxes.

    Returns:
        ``(dets [k, 5], labels [k], coeffs [k, d])``, best first.
    """
    if multi_bboxes.dim() != 2 or multi_bboxes.size(-1) != 4:
        raise ValueError(f'fast_nms takes class-agnostic boxes [n, 4], got '
                         f'{tuple(multi_bboxes.shape)}')
    scores, idx = multi_scores[:, :-1].t().sort(1, descending=True)  # [classes, n]
    idx = idx[:, :top_k].contiguous()
    scores = scores[:, :top_k]
    num_classes, num_dets = idx.shape
    boxes = multi_bboxes[idx.view(-1)].view(num_classes, num_dets, 4)
    coeffs = multi_coeffs[idx.view(-1)].view(num_classes, num_dets, multi_coeffs.size(-1))
    iou = _batched_iou(boxes, boxes).triu_(diagonal=1)
    # no prior at all: nothing to keep (mmdet fails taking the max over an empty dimension)
    iou_max = iou.max(dim=1).values if num_dets else scores
    keep = (iou_max <= iou_thr) & (scores > score_thr)
    classes = torch.arange(num_classes, device=boxes.device)[:, None].expand_as(keep)[keep]
    boxes, coeffs, scores = boxes[keep], coeffs[keep], scores[keep]
    scores, order = scores.sort(0, descending=True)
    if max_num > 0:
        order, scores = order[:max_num], scores[:max_num]
    return torch.cat([boxes[order], scores[:, None]], dim=1), classes[order], coeffs[order]
