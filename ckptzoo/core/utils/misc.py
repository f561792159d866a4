"""mmdet 2.x's ``mmdet/core/utils/misc.py``: small tensor helpers of the heads."""
import torch

__all__ = ['unmap', 'flip_tensor']


def unmap(data, count, inds, fill=0):
    """Scatter ``data`` (for the anchors selected by the bool mask ``inds``) back to ``count``."""
    ret = data.new_full((count, ) + tuple(data.shape[1:]), fill)
    ret[inds.type(torch.bool)] = data
    return ret


def flip_tensor(src_tensor, flip_direction):
    """``[B, C, H, W]`` flipped 'horizontal'ly (W), 'vertical'ly (H) or 'diagonal'ly (both)
    (mmdet's; CenterNet's flip test-time augmentation)."""
    if src_tensor.dim() != 4:
        raise ValueError(f'flip_tensor takes a [B, C, H, W] tensor, got {src_tensor.dim()} '
                         'dimensions')
    dims = {'horizontal': [3], 'vertical': [2], 'diagonal': [2, 3]}.get(flip_direction)
    if dims is None:
        raise ValueError(f"flip_direction must be 'horizontal', 'vertical' or 'diagonal', "
                         f'got {flip_direction!r}')
    return torch.flip(src_tensor, dims)
