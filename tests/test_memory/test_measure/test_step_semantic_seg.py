"""The planner's probe batch fits a full-resolution ``gt_semantic_seg`` (Panoptic FPN's) to
the probe shape with the image: padded with the ignore label, cropped; a map of another size
(HTC's 1/8 one) is left alone."""
import torch

from ckptzoo.memory.measure.step import _fit_shape


def _batch(seg_hw=(8, 10)):
    return dict(img=torch.ones(2, 3, 8, 10),
                img_metas=[dict(img_shape=(8, 10, 3)), dict(img_shape=(6, 9, 3))],
                gt_semantic_seg=torch.arange(2 * seg_hw[0] * seg_hw[1]).reshape(
                    2, 1, *seg_hw) % 7)


def test_full_resolution_semantic_labels_are_padded_and_cropped_with_the_image():
    batch = _batch()
    seg = batch['gt_semantic_seg'].clone()
    _fit_shape(batch, (12, 16))
    assert batch['gt_semantic_seg'].shape == (2, 1, 12, 16)
    assert torch.equal(batch['gt_semantic_seg'][..., :8, :10], seg)
    assert (batch['gt_semantic_seg'][..., 8:, :] == 255).all()
    assert (batch['gt_semantic_seg'][..., :, 10:] == 255).all()
    batch = _batch()
    _fit_shape(batch, (4, 5))
    assert torch.equal(batch['gt_semantic_seg'], seg[..., :4, :5])


def test_a_map_of_another_size_is_left_alone():
    batch = _batch(seg_hw=(1, 2))
    seg = batch['gt_semantic_seg'].clone()
    _fit_shape(batch, (12, 16))
    assert torch.equal(batch['gt_semantic_seg'], seg)
