"""Boxes as RoIs and back, detections as per-class arrays, and boxes between an original
image and its test-time augmentations (mmdet 2.x ``core/bbox/transforms.py``)."""
import numpy as np
import torch

__all__ = ['bbox2roi', 'bbox_rescale', 'roi2bbox', 'bbox2result', 'bbox_flip', 'bbox_mapping',
           'bbox_mapping_back', 'distance2bbox', 'bbox2distance']

FLIP_DIRECTIONS = ('horizontal', 'vertical', 'diagonal')


def bbox2roi(bbox_list):
    """Per-image boxes ``[n_i, >=4]`` to one ``[sum n_i, 5]`` tensor of
    ``(image index, x1, y1, x2, y2)``; extra columns (scores) are dropped."""
    rois = []
    for img_id, bboxes in enumerate(bbox_list):
        if bboxes.size(0) > 0:
            rois.append(torch.cat([bboxes.new_full((bboxes.size(0), 1), img_id),
                                   bboxes[:, :4]], dim=-1))
        else:
            rois.append(bboxes.new_zeros((0, 5)))
    return torch.cat(rois, 0)


def roi2bbox(rois):
    """``[n, 5]`` RoIs to a list of ``[n_i, 4]`` boxes, one per image index present, in
    increasing image index (an image without RoIs has no entry, as in mmdet)."""
    return [rois[rois[:, 0] == img_id.item(), 1:]
            for img_id in torch.unique(rois[:, 0].cpu(), sorted=True)]


def bbox2result(bboxes, labels, num_classes):
    """Detections ``[k, 5]`` and labels ``[k]`` to a list over classes of float32 numpy
    arrays ``[k_c, 5]`` (mmdet 2.x's result format)."""
    if bboxes.shape[0] == 0:
        return [np.zeros((0, 5), dtype=np.float32) for _ in range(num_classes)]
    if isinstance(bboxes, torch.Tensor):
        bboxes = bboxes.detach().float().cpu().numpy()
        labels = labels.detach().cpu().numpy()
    return [bboxes[labels == i, :] for i in range(num_classes)]


def bbox_flip(bboxes, img_shape, direction='horizontal'):
    """``bboxes [..., 4k]`` (one box per class too) mirrored in an image of ``img_shape``."""
    if direction not in FLIP_DIRECTIONS:
        raise ValueError(f"flip_direction must be 'horizontal', 'vertical' or 'diagonal', "
                         f'got {direction!r}')
    if bboxes.shape[-1] % 4:
        raise ValueError(f'bbox_flip needs boxes of 4k coordinates, got shape '
                         f'{tuple(bboxes.shape)}')
    h, w = img_shape[:2]
    flipped = bboxes.clone()
    if direction in ('horizontal', 'diagonal'):
        flipped[..., 0::4] = w - bboxes[..., 2::4]
        flipped[..., 2::4] = w - bboxes[..., 0::4]
    if direction in ('vertical', 'diagonal'):
        flipped[..., 1::4] = h - bboxes[..., 3::4]
        flipped[..., 3::4] = h - bboxes[..., 1::4]
    return flipped


def _scaled(bboxes, scale_factor, divide):
    """Each box of ``bboxes [..., 4k]`` times (or divided by) the ``(w, h, w, h)`` factors
    (or one float)."""
    boxes = bboxes.reshape(-1, 4)
    factor = boxes.new_tensor(scale_factor)
    return (boxes / factor if divide else boxes * factor).reshape(bboxes.shape)


def bbox_mapping(bboxes, img_shape, scale_factor, flip, flip_direction='horizontal'):
    """Boxes ``[..., 4k]`` of the original image in an augmented one (resized by
    ``scale_factor``, then flipped in ``img_shape`` when ``flip``)."""
    bboxes = _scaled(bboxes, scale_factor, divide=False)
    return bbox_flip(bboxes, img_shape, flip_direction) if flip else bboxes


def bbox_mapping_back(bboxes, img_shape, scale_factor, flip, flip_direction='horizontal'):
    """Boxes ``[..., 4k]`` of an augmented image back in the original: :func:`bbox_mapping`
    undone."""
    if flip:
        bboxes = bbox_flip(bboxes, img_shape, flip_direction)
    return _scaled(bboxes, scale_factor, divide=True)


def bbox_rescale(bboxes, scale_factor=1.0):
    """Boxes ``[n, 4]`` (or RoIs ``[n, 5]``, index kept) scaled about their centres by
    ``scale_factor`` (mmdet 2.x's; SABL's buckets span the rescaled proposal)."""
    rois = bboxes.size(1) == 5
    boxes = bboxes[:, 1:] if rois else bboxes
    cx = (boxes[:, 0] + boxes[:, 2]) * 0.5
    cy = (boxes[:, 1] + boxes[:, 3]) * 0.5
    w = (boxes[:, 2] - boxes[:, 0]) * scale_factor
    h = (boxes[:, 3] - boxes[:, 1]) * scale_factor
    out = [cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h]
    return torch.stack(([bboxes[:, 0]] if rois else []) + out, dim=-1)


def distance2bbox(points, distance, max_shape=None):
    """Points ``[..., 2]`` and distances to the four sides ``(left, top, right, bottom)`` to
    boxes, clipped to ``max_shape`` ``(h, w, ...)`` (one per image for batched points)."""
    x1 = points[..., 0] - distance[..., 0]
    y1 = points[..., 1] - distance[..., 1]
    x2 = points[..., 0] + distance[..., 2]
    y2 = points[..., 1] + distance[..., 3]
    bboxes = torch.stack([x1, y1, x2, y2], -1)
    if max_shape is None:
        return bboxes
    if not isinstance(max_shape, torch.Tensor):
        max_shape = x1.new_tensor(max_shape)
    max_shape = max_shape[..., :2].type_as(x1)
    if max_shape.ndim == 2 and (bboxes.ndim != 3 or max_shape.size(0) != bboxes.size(0)):
        raise ValueError(f'one max_shape per image: got {max_shape.size(0)} for boxes of shape '
                         f'{tuple(bboxes.shape)}')
    max_xy = torch.cat([max_shape, max_shape], dim=-1).flip(-1).unsqueeze(-2)
    return torch.minimum(bboxes.clamp(min=0), max_xy)


def bbox2distance(points, bbox, max_dis=None, eps=0.1):
    """Boxes to the distances from ``points`` to their four sides, clipped to
    ``[0, max_dis - eps]`` when ``max_dis`` is given (GFL's distributions)."""
    dist = torch.stack([points[:, 0] - bbox[:, 0], points[:, 1] - bbox[:, 1],
                        bbox[:, 2] - points[:, 0], bbox[:, 3] - points[:, 1]], -1)
    if max_dis is not None:
        dist = dist.clamp(min=0, max=max_dis - eps)
    return dist


def bbox_cxcywh_to_xyxy(bbox):
    """(cx, cy, w, h) -> (x1, y1, x2, y2) (mmdet's)."""
    cx, cy, w, h = bbox.split((1, 1, 1, 1), dim=-1)
    return torch.cat([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def bbox_xyxy_to_cxcywh(bbox):
    """(x1, y1, x2, y2) -> (cx, cy, w, h) (mmdet's)."""
    x1, y1, x2, y2 = bbox.split((1, 1, 1, 1), dim=-1)
    return torch.cat([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


__all__ += ['bbox_cxcywh_to_xyxy', 'bbox_xyxy_to_cxcywh']
