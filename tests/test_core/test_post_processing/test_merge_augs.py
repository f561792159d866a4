"""Test-time augmentation merges (mmdet 2.x merge_augs): each view's boxes and masks brought
back to the original image, then averaged."""
import numpy as np
import pytest
import torch

from ckptzoo.core.post_processing import merge_aug_bboxes, merge_aug_masks, merge_aug_scores


def _metas(scale, flip, direction=None, shape=(40, 60, 3)):
    return [dict(img_shape=shape, scale_factor=np.full(4, scale, dtype=np.float32), flip=flip,
                 flip_direction=direction)]


def test_merge_aug_bboxes_maps_each_view_back_then_averages():
    # the original image is 20 x 30; view 0 is it twice as large, view 1 too, mirrored
    metas = [_metas(2., False), _metas(2., True, 'horizontal')]
    view0 = torch.tensor([[10., 4., 30., 20., 0., 0., 8., 8.]])  # two classes' boxes
    view1 = torch.tensor([[32., 4., 52., 24., 50., 0., 60., 10.]])
    scores = [torch.tensor([[.2, .5, .3]]), torch.tensor([[.4, .3, .3]])]
    bboxes, merged_scores = merge_aug_bboxes([view0, view1], scores, metas, None)
    # view 1 back: x1 = (60 - 52) / 2 = 4, x2 = (60 - 32) / 2 = 14, ...
    back1 = torch.tensor([[4., 2., 14., 12., 0., 0., 5., 5.]])
    torch.testing.assert_close(bboxes, (view0 / 2 + back1) / 2)
    torch.testing.assert_close(merged_scores, torch.tensor([[.3, .4, .3]]))
    only_boxes = merge_aug_bboxes([view0, view1], None, metas, None)
    torch.testing.assert_close(only_boxes, bboxes)
    # a meta without 'flip' is an unflipped view
    torch.testing.assert_close(merge_aug_bboxes([view0], None, [[dict(
        img_shape=(40, 60, 3), scale_factor=np.full(4, 2., dtype=np.float32))]]), view0 / 2)


def test_merge_aug_masks_flips_each_view_back_then_averages():
    mask = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4) / 24
    other = np.full_like(mask, 0.5)
    views = [mask, mask[:, :, :, ::-1], mask[:, :, ::-1, :], mask[:, :, ::-1, ::-1]]
    metas = [_metas(1., False), _metas(1., True, 'horizontal'), _metas(1., True, 'vertical'),
             _metas(1., True, 'diagonal')]
    # every view flipped back is the same mask: the mean is that mask
    np.testing.assert_allclose(merge_aug_masks(views, metas, None), mask)
    np.testing.assert_allclose(merge_aug_masks([mask, other], metas[:2], None),
                               (mask + other[:, :, :, ::-1]) / 2)
    np.testing.assert_allclose(
        merge_aug_masks([mask, other], [metas[0], metas[0]], None, weights=[3, 1]),
        (3 * mask + other) / 4)
    with pytest.raises(ValueError, match="'sideways'"):
        merge_aug_masks([mask], [_metas(1., True, 'sideways')], None)
    with pytest.raises(ValueError, match='one weight per augmentation'):
        merge_aug_masks([mask, other], metas[:2], None, weights=[1.])
    with pytest.raises(ValueError, match='one prediction per augmentation'):
        merge_aug_masks([mask], metas[:2], None)
    with pytest.raises(ValueError, match='one meta dict'):
        merge_aug_masks([mask], [metas[0] * 2], None)


def test_merge_aug_scores_tensors_and_arrays():
    scores = [torch.tensor([.2, .6]), torch.tensor([.4, .2])]
    torch.testing.assert_close(merge_aug_scores(scores), torch.tensor([.3, .4]))
    np.testing.assert_allclose(merge_aug_scores([s.numpy() for s in scores]), [.3, .4])
