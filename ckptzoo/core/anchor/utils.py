"""mmdet 2.x's ``mmdet/core/anchor/utils.py``: anchors inside the image, per-image targets
regrouped per level."""
import torch

__all__ = ['anchor_inside_flags', 'images_to_levels']


def images_to_levels(target, num_levels):
    """``[per image: Tensor[A, ...]]`` to ``[per level: Tensor[B, A_level, ...]]``."""
    target = torch.stack(target, 0)
    out, start = [], 0
    for n in num_levels:
        out.append(target[:, start:start + n])
        start += n
    return out


def anchor_inside_flags(flat_anchors, valid_flags, img_shape, allowed_border=0):
    """Valid anchors lying within the image extended by ``allowed_border`` pixels
    (a negative ``allowed_border`` keeps every valid anchor)."""
    img_h, img_w = img_shape[:2]
    if allowed_border < 0:
        return valid_flags
    return (valid_flags & (flat_anchors[:, 0] >= -allowed_border)
            & (flat_anchors[:, 1] >= -allowed_border)
            & (flat_anchors[:, 2] < img_w + allowed_border)
            & (flat_anchors[:, 3] < img_h + allowed_border))
