"""mmdet 2.x ``mask_target``: the mask head's training targets, each positive proposal's
ground-truth mask cropped to the proposal and resized to ``mask_size``.

The proposals are clipped to the image (the masks' ``width`` x ``height``) first; the crop
itself is the masks' own ``crop_and_resize`` (RoIAlign for bitmaps, rasterised polygons), so
bitmap and polygon annotations of one object give the same targets up to rasterisation.
"""
import numpy as np
import torch

from ...utils.cfg_get import cfg_get

__all__ = ['mask_target', 'mask_target_single', 'mask_target_size']


def mask_target_size(cfg):
    """``cfg.mask_size`` as an (h, w) pair of positive ints."""
    size = cfg_get(cfg, 'mask_size')
    if size is None:
        raise ValueError('the rcnn train_cfg needs mask_size (the side of the mask targets, '
                         f'28 for Mask R-CNN) to train a mask head, got {cfg!r}')
    pair = (size, size) if isinstance(size, int) else tuple(size) \
        if isinstance(size, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in pair):
        raise ValueError(f'mask_size must be a positive int or a pair (h, w) of them, '
                         f'got {size!r}')
    return pair


def mask_target(pos_proposals_list, pos_assigned_gt_inds_list, gt_masks_list, cfg):
    """Mask targets of the positive proposals of several images, concatenated.

    Args:
        pos_proposals_list (list[Tensor]): (n_i, 4) positive proposals per image.
        pos_assigned_gt_inds_list (list[Tensor]): (n_i, ) the 0-based gt index of each.
        gt_masks_list (list[BitmapMasks | PolygonMasks]): the ground-truth masks per image.
        cfg (dict): the rcnn train_cfg: ``mask_size``, and ``soft_mask_target`` (keep the
            resized masks' fractional values instead of thresholding them at 0.5).

    Returns:
        Tensor: (sum n_i, h, w) float targets on the proposals' device (an empty list for no
        images, as mmdet).
    """
    if not len(pos_proposals_list) == len(pos_assigned_gt_inds_list) == len(gt_masks_list):
        raise ValueError(f'mask_target needs one entry per image in each list, got '
                         f'{len(pos_proposals_list)} proposal sets, '
                         f'{len(pos_assigned_gt_inds_list)} index sets and '
                         f'{len(gt_masks_list)} mask sets')
    targets = [mask_target_single(proposals, inds, gt_masks, cfg) for proposals, inds, gt_masks
               in zip(pos_proposals_list, pos_assigned_gt_inds_list, gt_masks_list)]
    return torch.cat(targets) if targets else targets


def mask_target_single(pos_proposals, pos_assigned_gt_inds, gt_masks, cfg):
    """Mask targets of one image's positive proposals: (n, h, w) float."""
    mask_size = mask_target_size(cfg)
    binarize = not cfg_get(cfg, 'soft_mask_target', False)
    device = pos_proposals.device
    num_pos = pos_proposals.size(0)
    if num_pos == 0:
        return pos_proposals.new_zeros((0, ) + mask_size)
    if pos_assigned_gt_inds.numel() != num_pos:
        raise ValueError(f'one gt index per positive proposal is needed, got {num_pos} '
                         f'proposals and {pos_assigned_gt_inds.numel()} indices')
    # a copy: the sampling result's boxes stay unclipped (mmdet clips them in place on CPU)
    proposals = pos_proposals.detach().cpu().numpy().copy()
    proposals[:, [0, 2]] = np.clip(proposals[:, [0, 2]], 0, gt_masks.width)
    proposals[:, [1, 3]] = np.clip(proposals[:, [1, 3]], 0, gt_masks.height)
    inds = pos_assigned_gt_inds.detach().cpu().numpy()
    targets = gt_masks.crop_and_resize(proposals, mask_size, device=device, inds=inds,
                                       binarize=binarize).to_ndarray()
    return torch.from_numpy(targets).float().to(device)
