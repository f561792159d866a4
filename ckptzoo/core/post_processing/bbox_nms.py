"""mmdet 2.x's ``multiclass_nms`` (``mmdet/core/post_processing/bbox_nms.py``) over mmcv's
``batched_nms`` (:mod:`ckptzoo.ops.nms`)."""
import torch

from ...ops.nms import batched_nms

__all__ = ['multiclass_nms']


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
