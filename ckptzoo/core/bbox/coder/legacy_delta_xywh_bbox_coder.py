"""mmdet 2.x ``LegacyDeltaXYWHBBoxCoder``: the deltas of mmdet 1.x, for its checkpoints
(``configs/legacy_1.x``).

As :class:`DeltaXYWHBBoxCoder` but with mmdet 1.x's pixel convention: widths and heights are
``x2 - x1 + 1`` (a box covers its last pixel), and decoded boxes are clipped to
``[0, W - 1] x [0, H - 1]``; there is no ``clip_border`` or centre clamp.
"""
import numpy as np
import torch

from ....registry import TASK_UTILS

__all__ = ['LegacyDeltaXYWHBBoxCoder', 'legacy_bbox2delta', 'legacy_delta2bbox']


def _centre_size(boxes):
    return (boxes[..., :2] + boxes[..., 2:]) * 0.5, boxes[..., 2:] - boxes[..., :2] + 1.0


def legacy_bbox2delta(proposals, gt, means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.)):
    """``(dx, dy, dw, dh)`` of ``gt`` from ``proposals`` (both ``[..., 4]``), normalised."""
    if proposals.size() != gt.size():
        raise ValueError(f'proposals and gt must have one shape, got {tuple(proposals.shape)} '
                         f'and {tuple(gt.shape)}')
    pxy, pwh = _centre_size(proposals.float())
    gxy, gwh = _centre_size(gt.float())
    deltas = torch.cat([(gxy - pxy) / pwh, torch.log(gwh / pwh)], dim=-1)
    return (deltas - deltas.new_tensor(means)) / deltas.new_tensor(stds)


def legacy_delta2bbox(rois, deltas, means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.),
                      max_shape=None, wh_ratio_clip=16 / 1000):
    """Boxes ``[N, 4k]`` from ``deltas [N, 4k]`` applied to ``rois [N, 4]``; ``dw, dh``
    clamped to ``|log(wh_ratio_clip)|``, boxes clipped to ``max_shape`` (h, w) when given."""
    if deltas.dim() != 2 or deltas.size(1) % 4 != 0:
        raise ValueError(f'deltas must be [N, 4k], got {tuple(deltas.shape)}')
    num = deltas.size(0)
    d = deltas.view(num, deltas.size(1) // 4, 4)  # (no -1: a level may keep no box)
    d = d * deltas.new_tensor(stds) + deltas.new_tensor(means)
    max_ratio = np.abs(np.log(wh_ratio_clip))
    dwh = d[..., 2:].clamp(min=-max_ratio, max=max_ratio)
    pxy, pwh = _centre_size(rois[:, None, :4])
    gxy = pxy + pwh * d[..., :2]
    gwh = pwh * dwh.exp()
    lt, rb = gxy - gwh * 0.5, gxy + gwh * 0.5
    if max_shape is not None:
        upper = lt.new_tensor([max_shape[1] - 1, max_shape[0] - 1])
        lt = torch.min(lt.clamp(min=0), upper)
        rb = torch.min(rb.clamp(min=0), upper)
    return torch.cat([lt, rb], dim=-1).view_as(deltas)


@TASK_UTILS.register_module()
class LegacyDeltaXYWHBBoxCoder:
    """Args as mmdet 2.x: ``target_means``, ``target_stds``."""

    def __init__(self, target_means=(0., 0., 0., 0.), target_stds=(1., 1., 1., 1.)):
        if len(target_means) != 4 or len(target_stds) != 4:
            raise ValueError(f'target_means and target_stds need 4 values, got '
                             f'{target_means!r}, {target_stds!r}')
        self.means = target_means
        self.stds = target_stds

    def encode(self, bboxes, gt_bboxes):
        """Deltas that turn ``bboxes [N, 4]`` into ``gt_bboxes [N, 4]``."""
        if bboxes.size(0) != gt_bboxes.size(0) or not \
                bboxes.size(-1) == gt_bboxes.size(-1) == 4:
            raise ValueError(f'bboxes and gt_bboxes must both be [N, 4], got '
                             f'{tuple(bboxes.shape)} and {tuple(gt_bboxes.shape)}')
        return legacy_bbox2delta(bboxes, gt_bboxes, self.means, self.stds)

    def decode(self, bboxes, pred_bboxes, max_shape=None, wh_ratio_clip=16 / 1000):
        """Boxes from ``pred_bboxes [N, 4k]`` applied to ``bboxes [N, 4]``."""
        if pred_bboxes.size(0) != bboxes.size(0):
            raise ValueError(f'pred_bboxes {tuple(pred_bboxes.shape)} do not match bboxes '
                             f'{tuple(bboxes.shape)}')
        return legacy_delta2bbox(bboxes, pred_bboxes, self.means, self.stds, max_shape,
                                 wh_ratio_clip)
