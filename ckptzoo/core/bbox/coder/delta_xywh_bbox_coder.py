"""mmdet 2.x ``DeltaXYWHBBoxCoder``: boxes as (dx, dy, dw, dh) relative to an anchor.

``encode``: ``dx = (gx - px) / pw``, ``dy = (gy - py) / ph``, ``dw = log(gw / pw)``,
``dh = log(gh / ph)``, then ``(delta - means) / stds``. ``decode`` inverts it, clamping
``dw, dh`` to ``|log(wh_ratio_clip)|`` (and, with ``add_ctr_clamp``, the centre shift to
``ctr_clamp`` pixels and ``dw, dh`` from above only), and clips to ``max_shape`` when
``clip_border``.
"""
import numpy as np
import torch

from ....registry import TASK_UTILS

__all__ = ['DeltaXYWHBBoxCoder', 'bbox2delta', 'delta2bbox']


def bbox2delta(proposals, gt, means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.)):
    proposals = proposals.float()
    gt = gt.float()
    pxy = (proposals[..., :2] + proposals[..., 2:]) * 0.5
    pwh = proposals[..., 2:] - proposals[..., :2]
    gxy = (gt[..., :2] + gt[..., 2:]) * 0.5
    gwh = gt[..., 2:] - gt[..., :2]
    deltas = torch.cat([(gxy - pxy) / pwh, torch.log(gwh / pwh)], dim=-1)
    return (deltas - deltas.new_tensor(means)) / deltas.new_tensor(stds)


def delta2bbox(rois, deltas, means=(0., 0., 0., 0.), stds=(1., 1., 1., 1.), max_shape=None,
               wh_ratio_clip=16 / 1000, clip_border=True, add_ctr_clamp=False, ctr_clamp=32):
    """``rois [..., N, 4]``, ``deltas [..., N, 4 * k]`` (k boxes per roi) to boxes like deltas.

    ``max_shape`` is (h, w, ...) for all, or one (h, w) per leading batch element.
    """
    if deltas.shape[-1] % 4 != 0:
        raise ValueError(f'deltas last dimension must be a multiple of 4, got {deltas.shape}')
    if deltas.numel() == 0:
        return deltas
    out_shape = deltas.shape
    k = out_shape[-1] // 4
    deltas = deltas.reshape(*out_shape[:-1], k, 4)
    rois = rois[..., None, :4]
    denorm = deltas * deltas.new_tensor(stds) + deltas.new_tensor(means)
    dxy, dwh = denorm[..., :2], denorm[..., 2:]
    pxy = (rois[..., :2] + rois[..., 2:]) * 0.5
    pwh = rois[..., 2:] - rois[..., :2]
    dxy_wh = pwh * dxy
    max_ratio = np.abs(np.log(wh_ratio_clip))
    if add_ctr_clamp:
        dxy_wh = torch.clamp(dxy_wh, max=ctr_clamp, min=-ctr_clamp)
        dwh = torch.clamp(dwh, max=max_ratio)
    else:
        dwh = dwh.clamp(min=-max_ratio, max=max_ratio)
    gxy = pxy + dxy_wh
    gwh = pwh * dwh.exp()
    bboxes = torch.cat([gxy - gwh * 0.5, gxy + gwh * 0.5], dim=-1)
    if clip_border and max_shape is not None:
        if isinstance(max_shape, torch.Tensor) or (
                isinstance(max_shape, (list, tuple)) and max_shape
                and isinstance(max_shape[0], (list, tuple, torch.Tensor))):
            # one (h, w) per batch element
            hw = torch.as_tensor([list(s[:2]) for s in max_shape], dtype=bboxes.dtype,
                                 device=bboxes.device)
            hw = hw.view(hw.shape[0], *([1] * (bboxes.dim() - 2)), 2)
        else:
            hw = bboxes.new_tensor(list(max_shape[:2]))
        upper = torch.cat([hw.flip(-1), hw.flip(-1)], dim=-1)
        bboxes = torch.min(bboxes.clamp(min=0), upper)
    return bboxes.reshape(out_shape)


@TASK_UTILS.register_module()
class DeltaXYWHBBoxCoder:
    """Args as mmdet 2.x: ``target_means``, ``target_stds`` (normalise the deltas),
    ``clip_border`` (clip decoded boxes to ``max_shape``), ``add_ctr_clamp``, ``ctr_clamp``."""

    def __init__(self, target_means=(0., 0., 0., 0.), target_stds=(1., 1., 1., 1.),
                 clip_border=True, add_ctr_clamp=False, ctr_clamp=32):
        if len(target_means) != 4 or len(target_stds) != 4:
            raise ValueError(f'target_means and target_stds need 4 values, got '
                             f'{target_means!r}, {target_stds!r}')
        self.means = tuple(float(m) for m in target_means)
        self.stds = tuple(float(s) for s in target_stds)
        self.clip_border = clip_border
        self.add_ctr_clamp = add_ctr_clamp
        self.ctr_clamp = ctr_clamp

    def encode(self, bboxes, gt_bboxes):
        """Deltas that turn ``bboxes [N, 4]`` into ``gt_bboxes [N, 4]``."""
        if bboxes.shape != gt_bboxes.shape or bboxes.shape[-1] != 4:
            raise ValueError(f'bboxes and gt_bboxes must both be [..., 4] of one shape, got '
                             f'{tuple(bboxes.shape)} and {tuple(gt_bboxes.shape)}')
        return bbox2delta(bboxes, gt_bboxes, self.means, self.stds)

    def decode(self, bboxes, pred_bboxes, max_shape=None, wh_ratio_clip=16 / 1000):
        """Boxes from ``pred_bboxes [N, 4k]`` (or ``[B, N, 4k]``) applied to ``bboxes``."""
        if pred_bboxes.shape[:-1] != bboxes.shape[:-1] and not (
                pred_bboxes.dim() == 3 and bboxes.dim() == 2
                and pred_bboxes.shape[1] == bboxes.shape[0]):
            raise ValueError(f'pred_bboxes {tuple(pred_bboxes.shape)} do not match bboxes '
                             f'{tuple(bboxes.shape)}')
        return delta2bbox(bboxes, pred_bboxes, self.means, self.stds, max_shape, wh_ratio_clip,
                          self.clip_border, self.add_ctr_clamp, self.ctr_clamp)
