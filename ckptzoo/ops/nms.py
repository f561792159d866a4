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

__all__ = ['nms', 'batched_nms', 'nms_match', 'soft_nms']

NMS_KEYS = ('type', 'iou_threshold', 'iou_thr', 'offset', 'score_threshold', 'max_num',
            'class_agnostic', 'split_thr', 'sigma', 'min_score', 'method')
SOFT_NMS_KEYS = ('iou_threshold', 'sigma', 'min_score', 'method', 'offset')


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
    if nms_type not in ('nms', 'soft_nms'):
        raise NotImplementedError(f"nms type {nms_type!r} is not supported; use dict(type='nms' "
                                  "or 'soft_nms', iou_threshold=...)")
    if nms_type == 'soft_nms':
        bad = sorted(set(cfg) - set(SOFT_NMS_KEYS) - {'iou_thr', 'class_agnostic', 'split_thr'})
        if bad:
            raise ValueError(f'soft_nms takes no {bad} (allowed: {", ".join(SOFT_NMS_KEYS)}), '
                             f'got {nms_cfg!r}')
        cfg['_op'] = soft_nms
    elif set(cfg) & {'sigma', 'min_score', 'method'}:
        raise ValueError(f"sigma / min_score / method are soft_nms arguments; use "
                         f"type='soft_nms', got {nms_cfg!r}")
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
    op = cfg.pop('_op', nms)
    if boxes_for_nms.shape[0] < split_thr:
        dets, keep = op(boxes_for_nms, scores, **cfg)
        return torch.cat([boxes[keep], dets[:, -1:]], -1), keep
    max_num = cfg.pop('max_num', -1)
    kept = scores.new_zeros(scores.size(), dtype=torch.bool)
    after = scores.clone()  # soft-NMS lowers the kept scores
    for group in torch.unique(idxs):
        mask = (idxs == group).nonzero(as_tuple=False).view(-1)
        dets, keep = op(boxes_for_nms[mask], scores[mask], **cfg)
        kept[mask[keep]] = True
        after[mask[keep]] = dets[:, -1].to(after.dtype)
    keep = kept.nonzero(as_tuple=False).view(-1)
    kept_scores, order = after[keep].sort(descending=True)
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


def soft_nms(boxes, scores, iou_threshold=0.3, sigma=0.5, min_score=1e-3, method='linear',
             offset=0):
    """mmcv's ``soft_nms`` (Bodla et al. 2017), its CPU kernel's algorithm: repeatedly take the
    best remaining box, lower the others' scores by their IoU with it (``'naive'``: to 0 at
    IoU >= ``iou_threshold``; ``'linear'``: times ``1 - IoU`` there; ``'gaussian'``: times
    ``exp(-IoU^2 / sigma)``) and drop those below ``min_score``. Returns ``(dets [k, 5]``
    with the lowered scores, in selection order, ``keep [k])``. Runs in float32 on the CPU,
    as mmcv."""
    methods = {'naive': 0, 'linear': 1, 'gaussian': 2}
    if method not in methods:
        raise ValueError(f'soft_nms method must be one of {", ".join(methods)}, got {method!r}')
    if boxes.dim() != 2 or boxes.size(1) != 4 or boxes.size(0) != scores.size(0):
        raise ValueError(f'soft_nms takes boxes [n, 4] and scores [n], got '
                         f'{tuple(boxes.shape)} and {tuple(scores.shape)}')
    device = boxes.device
    b = boxes.detach().float().cpu().clone()
    sc = scores.detach().float().cpu().clone()
    inds = torch.arange(b.size(0))
    areas = (b[:, 2] - b[:, 0] + offset) * (b[:, 3] - b[:, 1] + offset)
    n = b.size(0)
    dets = b.new_zeros((n, 5))
    i = 0
    while i < n:
        m = i + int(torch.argmax(sc[i:n]))  # the first of the best, as the kernel's strict <
        for t in (b, sc, areas, inds):
            t[[i, m]] = t[[m, i]]
        dets[i, :4], dets[i, 4] = b[i], sc[i]
        if i + 1 < n:
            rest = b[i + 1:n]
            w = (torch.min(b[i, 2], rest[:, 2]) - torch.max(b[i, 0], rest[:, 0]) + offset)
            h = (torch.min(b[i, 3], rest[:, 3]) - torch.max(b[i, 1], rest[:, 1]) + offset)
            inter = w.clamp(min=0) * h.clamp(min=0)
            ovr = inter / (areas[i] + areas[i + 1:n] - inter)
            if method == 'naive':
                weight = torch.where(ovr >= iou_threshold, 0., 1.)
            elif method == 'linear':
                weight = torch.where(ovr >= iou_threshold, 1 - ovr, 1.)
            else:
                weight = torch.exp(-(ovr * ovr) / sigma)
            sc[i + 1:n] *= weight
            # the kernel drops a box below min_score by moving the last box into its place
            pos = i + 1
            while pos < n:
                if sc[pos] < min_score:
                    for t in (b, sc, areas, inds):
                        t[pos] = t[n - 1].clone()
                    n -= 1
                    continue
                pos += 1
        i += 1
    return dets[:n].to(device=device, dtype=boxes.dtype), inds[:n].to(device)
