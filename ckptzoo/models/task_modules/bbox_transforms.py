"""Boxes as RoIs and back, and detections as per-class arrays (mmdet 2.x
``core/bbox/transforms.py``)."""
import numpy as np
import torch

__all__ = ['bbox2roi', 'roi2bbox', 'bbox2result']


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
