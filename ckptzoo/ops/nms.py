"""Non-maximum suppression as mmcv 1.x's ``mmcv.ops.nms`` / ``batched_nms``, on
``torchvision.ops.nms`` (mmdet 2.x's ``multiclass_nms`` over it is
:mod:`ckptzoo.core.post_processing.bbox_nms`).

``batched_nms`` separates the classes as mmcv does: it shifts each box by
``idx * (max coordinate + 1)`` and runs NMS on the shifted boxes (at once below ``split_thr``
boxes, class by class from it on). ``torchvision.ops.batched_nms`` runs class by class on the
unshifted boxes above 1000 boxes (CPU), which can keep other boxes in float32, so it is not
used.

``nms_match`` is mmcv's greedy NMS that returns the groups instead of the kept boxes (PISA's
``ScoreHLRSampler`` ranks the negatives within them).
"""
import torch
from torchvision.ops import nms as tv_nms

__all__ = ['nms', 'batched_nms', 'nms_match']

NMS_KEYS = ('type', 'iou_threshold', 'iou_thr', 'offset', 'score_threshold', 'max_num',
            'class_agnostic', 'split_thr')


def nms(boxes, scores, iou_threshold, offset=0, score_threshold=0, max_num=-1):
    """mmcv's ``nms``: ``(dets [k, 5], keep [k])``, best first; boxes scoring at most
    ``score_threshold`` (when > 0) take no part; at most ``max_num`` (when > 0) are kept.
    Only ``offset=0`` (the modern box convention) is supported."""
    if offset != 0:
        raise NotImplementedError(f'nms offset must be 0 (torchvision computes areas without '
                                  f'the legacy +1), got {offset!r}')
    if boxes.dim() != 2 or boxes.size(1) != 4 or boxes.size(0) != scores.size(0):
        raise ValueError(f'nms takes boxes [n, 4] and scores [n], got {tuple(boxes.shape)} and '
                         f'{tuple(scores.shape)}')
    valid_inds = None
    if score_threshold > 0:
        valid = scores > score_threshold
        boxes, scores = boxes[valid], scores[valid]
        valid_inds = torch.nonzero(valid, as_tuple=False).squeeze(1)
    inds = tv_nms(boxes, scores, float(iou_threshold))
    if max_num > 0:
        inds = inds[:max_num]
    dets = torch.cat([boxes[inds], scores[inds].reshape(-1, 1)], dim=1)
    if valid_inds is not None:
        inds = valid_inds[inds]
    return dets, inds


def _nms_args(nms_cfg):
    cfg = dict(nms_cfg)
    unknown = sorted(set(cfg) - set(NMS_KEYS))
    if unknown:
        raise ValueError(f'unknown nms config keys {unknown} in {nms_cfg!r}; allowed: '
                         f'{", ".join(NMS_KEYS)}')
    nms_type = cfg.pop('type', 'nms')
    if nms_type != 'nms':
        raise NotImplementedError(f"nms type {nms_type!r} is not supported; use dict(type='nms', "
                                  'iou_threshold=...)')
    if 'iou_thr' in cfg:  # mmcv's deprecated name
        if 'iou_threshold' in cfg:
            raise ValueError(f'give iou_threshold or iou_thr, not both: {nms_cfg!r}')
        cfg['iou_threshold'] = cfg.pop('iou_thr')
    if 'iou_threshold' not in cfg:
        raise ValueError(f'the nms config needs iou_threshold, got {nms_cfg!r}')
    return cfg


def batched_nms(boxes, scores, idxs, nms_cfg, class_agnostic=False):
    """mmcv's ``batched_nms``: NMS within each ``idxs`` group (all at once when
    ``class_agnostic``, or ``nms_cfg['class_agnostic']``).

    Args:
        boxes (Tensor): ``[n, 4]``. scores (Tensor): ``[n]``. idxs (Tensor): ``[n]`` group ids.
        nms_cfg (dict | None): ``iou_threshold`` (or ``iou_thr``), optional ``type='nms'``,
            ``score_threshold``, ``max_num``, ``split_thr``, ``class_agnostic``. None: no NMS,
            only sorting by score.

    Returns:
        ``(dets [k, 5], keep [k])``: kept boxes with their scores, best first, and their
        indices. No boxes give empty results (mmcv fails on them).
    """
    if nms_cfg is None:
        scores, inds = scores.sort(descending=True)
        return torch.cat([boxes[inds], scores[:, None]], -1), inds
    cfg = _nms_args(nms_cfg)
    class_agnostic = cfg.pop('class_agnostic', class_agnostic)
    split_thr = cfg.pop('split_thr', 10000)
    if boxes.numel() == 0:
        return boxes.new_zeros((0, 5)), idxs.new_zeros((0, ), dtype=torch.long)
    if class_agnostic:
        boxes_for_nms = boxes
    else:
        offsets = idxs.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
        boxes_for_nms = boxes + offsets[:, None]
    if boxes_for_nms.shape[0] < split_thr:
        dets, keep = nms(boxes_for_nms, scores, **cfg)
        return torch.cat([boxes[keep], dets[:, -1:]], -1), keep
    max_num = cfg.pop('max_num', -1)
    kept = scores.new_zeros(scores.size(), dtype=torch.bool)
    for group in torch.unique(idxs):
        mask = (idxs == group).nonzero(as_tuple=False).view(-1)
        _, keep = nms(boxes_for_nms[mask], scores[mask], **cfg)
        kept[mask[keep]] = True
    keep = kept.nonzero(as_tuple=False).view(-1)
    kept_scores, order = scores[keep].sort(descending=True)
    keep = keep[order]
    if max_num > 0:
        keep, kept_scores = keep[:max_num], kept_scores[:max_num]
    return torch.cat([boxes[keep], kept_scores[:, None]], -1), keep


def nms_match(dets, iou_threshold):
    """mmcv's ``nms_match``: greedy NMS over ``dets [n, 5]`` (boxes and score) that returns,
    per kept box (best first), a long tensor of its group: the kept box, then the boxes it
    suppresses (IoU ``>=`` the threshold, areas without +1) in score order. Computed on the
    CPU in float32, as mmcv's kernel; ndarray in, list of ndarrays out."""
    import numpy as np
    is_tensor = isinstance(dets, torch.Tensor)
    if dets.shape[0] == 0:
        return []
    if dets.shape[-1] != 5:
        raise ValueError(f'nms_match takes dets [n, 5], got {tuple(dets.shape)}')
    d = dets.detach().cpu().float() if is_tensor else torch.from_numpy(np.asarray(dets)).float()
    x1, y1, x2, y2, scores = d.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.sort(0, descending=True)[1].tolist()
    # pairwise IoU in the kernel's float32 operation order
    w = (torch.minimum(x2[:, None], x2[None]) - torch.maximum(x1[:, None], x1[None])).clamp(min=0)
    h = (torch.minimum(y2[:, None], y2[None]) - torch.maximum(y1[:, None], y1[None])).clamp(min=0)
    inter = w * h
    over = (inter / (areas[:, None] + areas[None] - inter)) >= float(iou_threshold)
    over = over.tolist()
    suppressed = [False] * len(order)
    groups = []
    for pos, i in enumerate(order):
        if suppressed[i]:
            continue
        group = [i]
        for j in order[pos + 1:]:
            if not suppressed[j] and over[i][j]:
                suppressed[j] = True
                group.append(j)
        groups.append(group)
    if is_tensor:
        return [dets.new_tensor(g, dtype=torch.long) for g in groups]
    return [np.array(g, dtype=int) for g in groups]
