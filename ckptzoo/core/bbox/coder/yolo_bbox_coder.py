"""mmdet 2.x ``YOLOBBoxCoder``: YOLOv3's box encoding relative to an anchor and its stride.

``encode``: the ground-truth centre's offset inside the anchor's grid cell, ``(g - a) / stride
+ 0.5`` clamped to ``[eps, 1 - eps]`` (the target of a sigmoid), and ``log(g_wh / a_wh)``
(clamped below at ``log(eps)``). ``decode`` takes the centre already squashed to (0, 1) (the
head applies the sigmoid) and the raw log-size.
"""
import torch

from ....registry import TASK_UTILS

__all__ = ['YOLOBBoxCoder']


def _check(bboxes, other, name):
    if bboxes.size(-1) != 4 or other.size(-1) != 4:
        raise ValueError(f'YOLOBBoxCoder needs boxes of 4 numbers, got {tuple(bboxes.shape)} '
                         f'and {name} {tuple(other.shape)}')


@TASK_UTILS.register_module()
class YOLOBBoxCoder:
    """Args: ``eps`` (float): the clamp of the encoded centre and size ratio."""

    def __init__(self, eps=1e-6):
        self.eps = eps

    def encode(self, bboxes, gt_bboxes, stride):
        """``bboxes`` (anchors) and ``gt_bboxes`` ``[..., 4]``, ``stride`` per anchor or one
        number; returns ``[..., 4]`` (cx, cy in (0, 1), log w, log h)."""
        _check(bboxes, gt_bboxes, 'gt_bboxes')
        if bboxes.size(0) != gt_bboxes.size(0):
            raise ValueError(f'YOLOBBoxCoder.encode needs one gt box per anchor, got '
                             f'{bboxes.size(0)} and {gt_bboxes.size(0)}')
        gt_ctr = (gt_bboxes[..., :2] + gt_bboxes[..., 2:]) * 0.5
        gt_wh = gt_bboxes[..., 2:] - gt_bboxes[..., :2]
        ctr = (bboxes[..., :2] + bboxes[..., 2:]) * 0.5
        wh = bboxes[..., 2:] - bboxes[..., :2]
        wh_target = torch.log((gt_wh / wh).clamp(min=self.eps))
        stride = stride[..., None] if torch.is_tensor(stride) and stride.dim() else stride
        ctr_target = ((gt_ctr - ctr) / stride + 0.5).clamp(self.eps, 1 - self.eps)
        return torch.cat([ctr_target, wh_target], dim=-1)

    def decode(self, bboxes, pred_bboxes, stride):
        """``bboxes`` (anchors) ``[..., 4]``, ``pred_bboxes`` ``[..., 4]`` (sigmoid centre,
        raw log-size), ``stride`` broadcastable to ``[..., 1]``; returns x1y1x2y2."""
        _check(bboxes, pred_bboxes, 'pred_bboxes')
        ctr = (bboxes[..., :2] + bboxes[..., 2:]) * 0.5 + (pred_bboxes[..., :2] - 0.5) * stride
        half = (bboxes[..., 2:] - bboxes[..., :2]) * 0.5 * pred_bboxes[..., 2:].exp()
        return torch.cat([ctr - half, ctr + half], dim=-1)
