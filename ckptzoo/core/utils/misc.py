"""mmdet 2.x's ``mmdet/core/utils/misc.py``: small tensor helpers of the heads."""
import functools

import torch

__all__ = ['unmap', 'flip_tensor', 'center_of_mass', 'generate_coordinate', 'multi_apply']


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


def center_of_mass(mask, esp=1e-6):
    """The centroid ``(center_h, center_w)`` of an ``(h, w)`` mask (mmdet's; SOLO's
    instance centres); an empty mask gives ``(0, 0)`` (the normaliser is clamped at
    ``esp``, mmdet's spelling)."""
    if mask.dim() != 2:
        raise ValueError(f'center_of_mass takes one (h, w) mask, got shape {tuple(mask.shape)}')
    h, w = mask.shape
    grid_h = torch.arange(h, device=mask.device)[:, None]
    grid_w = torch.arange(w, device=mask.device)
    normalizer = mask.sum().float().clamp(min=esp)
    return (mask * grid_h).sum() / normalizer, (mask * grid_w).sum() / normalizer


def generate_coordinate(featmap_sizes, device='cuda', dtype=None):
    """``(N, 2, H, W)`` normalised x, y coordinates in [-1, 1] for ``featmap_sizes``
    ``(N, C, H, W)`` (mmdet's; SOLO's CoordConv input). ``dtype`` (ours; default float32 as
    mmdet) lets a float64 head stay in float64."""
    x_range = torch.linspace(-1, 1, featmap_sizes[-1], device=device, dtype=dtype)
    y_range = torch.linspace(-1, 1, featmap_sizes[-2], device=device, dtype=dtype)
    y, x = torch.meshgrid(y_range, x_range, indexing='ij')
    y = y.expand([featmap_sizes[0], 1, -1, -1])
    x = x.expand([featmap_sizes[0], 1, -1, -1])
    return torch.cat([x, y], 1)


def multi_apply(func, *args, **kwargs):
    """mmdet's ``multi_apply``: ``func`` (with ``kwargs``) over the zipped ``args``, its tuple
    results transposed into a tuple of lists (one list per result)."""
    fn = functools.partial(func, **kwargs) if kwargs else func
    return tuple(map(list, zip(*map(fn, *args))))
