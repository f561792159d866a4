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


def calc_region(bbox, ratio, featmap_size=None):
    """mmdet's: the box ``[4]`` shrunk about its centre to ``ratio``-inset edges
    (``x1' = (1 - ratio) * x1 + ratio * x2``, ...), rounded to ints and clamped to
    ``featmap_size`` (h, w) when given: ``(x1, y1, x2, y2)``, long tensors."""
    x1 = torch.round((1 - ratio) * bbox[0] + ratio * bbox[2]).long()
    y1 = torch.round((1 - ratio) * bbox[1] + ratio * bbox[3]).long()
    x2 = torch.round(ratio * bbox[0] + (1 - ratio) * bbox[2]).long()
    y2 = torch.round(ratio * bbox[1] + (1 - ratio) * bbox[3]).long()
    if featmap_size is not None:
        x1, x2 = x1.clamp(0, featmap_size[1]), x2.clamp(0, featmap_size[1])
        y1, y2 = y1.clamp(0, featmap_size[0]), y2.clamp(0, featmap_size[0])
    return x1, y1, x2, y2

__all__ += ['calc_region']
