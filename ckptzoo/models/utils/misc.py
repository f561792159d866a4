"""mmdet 2.x ``models/utils/misc.py`` helpers."""
import torch
import torch.nn.functional as F

__all__ = ['interpolate_as']


def interpolate_as(source, target, mode='bilinear', align_corners=False):
    """``source`` resized (``F.interpolate``) to the last two dimensions of ``target``; left
    as it is when they already agree.

    Args:
        source (Tensor): (N, H, W) or (N, C, H, W).
        target (Tensor | ndarray): any array of shape (..., target_h, target_w).
        mode (str), align_corners (bool): as ``F.interpolate``; ``align_corners`` applies to
            the interpolating modes only (mmdet passes it to every mode, and
            ``mode='nearest'`` fails there).
    """
    if not isinstance(source, torch.Tensor) or source.dim() not in (3, 4):
        raise ValueError(f'interpolate_as takes a (N, H, W) or (N, C, H, W) Tensor source, got '
                         f'{type(source).__name__} of shape {getattr(source, "shape", None)}')
    if len(target.shape) < 2:
        raise ValueError(f'interpolate_as needs a target of at least 2 dimensions (..., h, w), '
                         f'got shape {tuple(target.shape)}')
    size = tuple(int(s) for s in target.shape[-2:])
    if mode not in ('linear', 'bilinear', 'bicubic', 'trilinear'):
        align_corners = None
    if tuple(source.shape[-2:]) == size:
        return source
    if source.dim() == 3:
        return F.interpolate(source[:, None], size=size, mode=mode,
                             align_corners=align_corners)[:, 0]
    return F.interpolate(source, size=size, mode=mode, align_corners=align_corners)
