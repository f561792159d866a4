"""mmdet 2.x's ``mmdet/core/utils/misc.py``: small tensor helpers of the heads."""
import torch

__all__ = ['unmap']


def unmap(data, count, inds, fill=0):
    """Scatter ``data`` (for the anchors selected by the bool mask ``inds``) back to ``count``."""
    ret = data.new_full((count, ) + tuple(data.shape[1:]), fill)
    ret[inds.type(torch.bool)] = data
    return ret
