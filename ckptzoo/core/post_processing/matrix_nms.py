"""mmdet 2.x ``mask_matrix_nms`` (SOLO / SOLOv2): soft suppression of masks in one matrix
step, plain PyTorch.

Each mask's score decays by its IoU with every higher-scoring mask of its class, compensated
by how much that higher mask was itself suppressed (SOLOv2's Matrix NMS). Memory: the
``(n, n)`` IoU matrix and one ``(n, h*w)`` float copy of the masks, ``n <= nms_pre``.
"""
import torch

__all__ = ['mask_matrix_nms']

KERNELS = ('gaussian', 'linear')


def _empty(scores, labels, masks):
    return (scores.new_zeros(0), labels.new_zeros(0), masks.new_zeros(0, *masks.shape[-2:]),
            labels.new_zeros(0))


def mask_matrix_nms(masks, labels, scores, filter_thr=-1, nms_pre=-1, max_num=-1,
                    kernel='gaussian', sigma=2.0, mask_area=None):
    """Args (mmdet's): ``masks (n, h, w)`` binary, ``labels (n,)``, ``scores (n,)``;
    ``filter_thr`` score threshold after the decay (<= 0: none), ``nms_pre`` / ``max_num``
    top-k before / after (<= 0: all), ``kernel`` 'gaussian' (``exp(-sigma * iou**2)``) or
    'linear' (``1 - iou``), ``mask_area (n,)`` the masks' pixel counts if known.

    Returns ``(scores, labels, masks, keep_inds)``, sorted by decayed score; ``keep_inds``
    index the input masks."""
    if kernel not in KERNELS:
        raise ValueError(f'mask_matrix_nms kernel must be one of {KERNELS}, got {kernel!r}')
    if not len(labels) == len(masks) == len(scores):
        raise ValueError(f'masks, labels and scores must be as many, got {len(masks)}, '
                         f'{len(labels)} and {len(scores)}')
    if len(labels) == 0:
        return _empty(scores, labels, masks)
    if mask_area is None:
        mask_area = masks.sum((1, 2)).float()
    elif len(mask_area) != len(masks):
        raise ValueError(f'mask_area must hold one area per mask ({len(masks)}), got '
                         f'{len(mask_area)}')

    scores, order = torch.sort(scores, descending=True)
    if 0 < nms_pre < len(order):
        order, scores = order[:nms_pre], scores[:nms_pre]
    keep_inds = order
    masks, mask_area, labels = masks[order], mask_area[order], labels[order]

    n = len(labels)
    flat = masks.reshape(n, -1).float()
    inter = flat @ flat.t()
    area = mask_area.expand(n, n)
    # iou[i, j]: mask i (higher score) against mask j, upper triangle only
    iou = (inter / (area + area.t() - inter)).triu(diagonal=1)
    lab = labels.expand(n, n)
    same_class = (lab == lab.t()).triu(diagonal=1)
    decay_iou = iou * same_class
    # how much each mask i was itself suppressed: its largest IoU with a higher mask
    compensate_iou = decay_iou.max(0)[0].expand(n, n).t()
    if kernel == 'gaussian':
        decay = (torch.exp(-1 * sigma * decay_iou ** 2) /
                 torch.exp(-1 * sigma * compensate_iou ** 2)).min(0)[0]
    else:
        decay = ((1 - decay_iou) / (1 - compensate_iou)).min(0)[0]
    scores = scores * decay

    if filter_thr > 0:
        keep = scores >= filter_thr
        if not keep.any():
            return _empty(scores, labels, masks)
        keep_inds, masks, scores, labels = keep_inds[keep], masks[keep], scores[keep], \
            labels[keep]

    scores, order = torch.sort(scores, descending=True)
    if 0 < max_num < len(order):
        order, scores = order[:max_num], scores[:max_num]
    return scores, labels[order], masks[order], keep_inds[order]
