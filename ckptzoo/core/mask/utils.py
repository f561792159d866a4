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
