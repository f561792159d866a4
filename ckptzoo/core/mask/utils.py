"""mmdet 2.x's ``mmdet/core/mask/utils.py``: the test loop's mask encoding."""
import numpy as np
import pycocotools.mask as mask_utils

__all__ = ['encode_mask_results']


def encode_mask_results(mask_results):
    """A detector's masks (per class a list of bool ``(H, W)`` arrays) as COCO RLE dicts
    (mmdet's ``encode_mask_results``: the test loop keeps these, not full-size bitmaps); a
    ``(segms, mask_scores)`` tuple (mask scoring) keeps its scores."""
    segms, scores = mask_results if isinstance(mask_results, tuple) else (mask_results, None)
    encoded = [[m if isinstance(m, dict) else
                mask_utils.encode(np.array(m[:, :, None], order='F', dtype=np.uint8))[0]
                for m in cls_segms] for cls_segms in segms]
    return encoded if scores is None else (encoded, scores)


def mask2bbox(masks):
    """``(n, 4)`` float32 boxes ``x1, y1, x2 + 1, y2 + 1`` around each bool mask ``(n, H, W)``
    (zeros for an empty mask), mmdet's ``mask2bbox``, without its per-mask Python loop."""
    import torch
    n = masks.shape[0]
    bboxes = masks.new_zeros((n, 4), dtype=torch.float32)
    if n == 0:
        return bboxes
    x_any, y_any = masks.any(dim=1), masks.any(dim=2)
    nonempty = x_any.any(dim=1) & y_any.any(dim=1)
    w, h = x_any.shape[1], y_any.shape[1]
    xs = torch.arange(w, device=masks.device)
    ys = torch.arange(h, device=masks.device)
    x1 = torch.where(x_any, xs, w).min(dim=1).values
    x2 = torch.where(x_any, xs, -1).max(dim=1).values + 1
    y1 = torch.where(y_any, ys, h).min(dim=1).values
    y2 = torch.where(y_any, ys, -1).max(dim=1).values + 1
    boxes = torch.stack([x1, y1, x2, y2], dim=1).to(torch.float32)
    bboxes[nonempty] = boxes[nonempty]
    return bboxes
