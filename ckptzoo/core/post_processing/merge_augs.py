"""Test-time augmentation: the predictions of one image's augmentations brought back to the
original image and averaged (mmdet 2.x ``core/post_processing/merge_augs.py``).

``img_metas`` here is mmdet's test-time layout: a list over augmentations of one-image lists
of meta dicts (``img_shape``, ``scale_factor``, ``flip``, ``flip_direction``). A meta without
``flip`` is an unflipped view.
"""
import numpy as np
import torch

from ..bbox.transforms import FLIP_DIRECTIONS, bbox_mapping_back

__all__ = ['merge_aug_bboxes', 'merge_aug_scores', 'merge_aug_masks', 'aug_flip']


def aug_flip(aug_metas):
    """``(flip, flip_direction)`` of one augmentation's one-image meta list."""
    if not isinstance(aug_metas, (list, tuple)) or len(aug_metas) != 1:
        raise ValueError(f'test-time augmentation takes one image per augmentation: each '
                         f'entry of img_metas must be a list of one meta dict, got {aug_metas!r}')
    meta = aug_metas[0]
    flip = bool(meta.get('flip', False))
    return flip, (meta.get('flip_direction') or 'horizontal') if flip else None


def _check_lengths(preds, img_metas, what):
    if len(preds) != len(img_metas) or not preds:
        raise ValueError(f'{what} needs one prediction per augmentation, got {len(preds)} for '
                         f'{len(img_metas)} augmentations of img_metas')


def merge_aug_bboxes(aug_bboxes, aug_scores, img_metas, rcnn_test_cfg=None):
    """The mean of the augmentations' boxes (each ``[n, 4k]``, the same ``n`` proposals in
    each) mapped back to the original image, and the mean of their scores ``[n, c]``.

    Returns the boxes alone when ``aug_scores`` is None, else ``(bboxes, scores)``.
    ``rcnn_test_cfg`` is unused, as in mmdet.
    """
    _check_lengths(aug_bboxes, img_metas, 'merge_aug_bboxes')
    recovered = []
    for bboxes, aug_metas in zip(aug_bboxes, img_metas):
        flip, direction = aug_flip(aug_metas)
        meta = aug_metas[0]
        recovered.append(bbox_mapping_back(bboxes, meta['img_shape'], meta['scale_factor'],
                                           flip, direction or 'horizontal'))
    bboxes = torch.stack(recovered).mean(dim=0)
    if aug_scores is None:
        return bboxes
    _check_lengths(aug_scores, img_metas, 'merge_aug_bboxes')
    return bboxes, torch.stack(aug_scores).mean(dim=0)


def merge_aug_scores(aug_scores):
    """The mean of the augmentations' scores (tensors or arrays)."""
    if isinstance(aug_scores[0], torch.Tensor):
        return torch.stack(aug_scores).mean(dim=0)
    return np.mean(aug_scores, axis=0)


def merge_aug_masks(aug_masks, img_metas, rcnn_test_cfg=None, weights=None):
    """The (``weights``-weighted) mean of the augmentations' mask probabilities (each an
    ndarray ``[n, c, h, w]`` in its RoIs' frames), each flipped back first when its view was
    flipped. ``rcnn_test_cfg`` is unused, as in mmdet."""
    _check_lengths(aug_masks, img_metas, 'merge_aug_masks')
    recovered = []
    for mask, aug_metas in zip(aug_masks, img_metas):
        flip, direction = aug_flip(aug_metas)
        if flip:
            if direction not in FLIP_DIRECTIONS:
                raise ValueError(f"flip_direction must be 'horizontal', 'vertical' or "
                                 f"'diagonal', got {direction!r}")
            if direction in ('horizontal', 'diagonal'):
                mask = mask[:, :, :, ::-1]
            if direction in ('vertical', 'diagonal'):
                mask = mask[:, :, ::-1, :]
        recovered.append(mask)
    if weights is None:
        return np.mean(recovered, axis=0)
    if len(weights) != len(recovered):
        raise ValueError(f'merge_aug_masks needs one weight per augmentation '
                         f'({len(recovered)}), got {weights!r}')
    return np.average(np.array(recovered), axis=0, weights=np.array(weights))
