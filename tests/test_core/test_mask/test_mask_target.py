"""mask_target: proposals clipped to the image, each cropped from its gt mask and resized to
``mask_size`` (binarised unless ``soft_mask_target``), images concatenated in order."""
import numpy as np
import pytest
import torch

from ckptzoo.core.mask import BitmapMasks, PolygonMasks
from ckptzoo.core.mask.mask_target import mask_target, mask_target_single


class RecordingMasks:
    """Stands in for BitmapMasks / PolygonMasks: records the crop_and_resize call and answers
    masks that encode the index and box they were cut for."""

    def __init__(self, num, height, width):
        self.num, self.height, self.width = num, height, width
        self.calls = []

    def __len__(self):
        return self.num

    def crop_and_resize(self, bboxes, out_shape, inds, device='cpu', interpolation='bilinear',
                        binarize=True):
        self.calls.append(dict(bboxes=bboxes.copy(), out_shape=out_shape, inds=inds.copy(),
                               device=device, binarize=binarize))
        out = np.zeros((len(bboxes), ) + tuple(out_shape), dtype=np.uint8 if binarize
                       else np.float64)
        out[:, 0, 0] = inds
        out[:, 0, 1] = bboxes[:, 2]
        return _Arr(out)


class _Arr:

    def __init__(self, arr):
        self.arr = arr

    def to_ndarray(self):
        return self.arr


def test_proposals_are_clipped_and_masks_cropped_by_gt_index():
    masks = RecordingMasks(3, height=20, width=30)
    proposals = torch.tensor([[-4.0, 2.0, 35.5, 25.0], [3.0, -1.0, 12.0, 8.0]])
    before = proposals.clone()
    targets = mask_target_single(proposals, torch.tensor([2, 0]), masks,
                                 dict(mask_size=(5, 7)))
    (call, ) = masks.calls
    np.testing.assert_array_equal(call['bboxes'], [[0, 2, 30, 20], [3, 0, 12, 8]])
    assert call['out_shape'] == (5, 7) and call['binarize'] is True
    np.testing.assert_array_equal(call['inds'], [2, 0])
    assert call['device'] == proposals.device
    assert targets.dtype == torch.float32 and targets.shape == (2, 5, 7)
    assert targets[:, 0, 0].tolist() == [2, 0] and targets[:, 0, 1].tolist() == [30, 12]
    torch.testing.assert_close(proposals, before)  # the sampling result's boxes are untouched


def test_images_concatenate_in_order_and_mask_size_int():
    masks = [RecordingMasks(2, 16, 16), RecordingMasks(1, 16, 16), RecordingMasks(4, 16, 16)]
    proposals = [torch.rand(3, 4) * 8 + torch.tensor([0, 0, 8, 8]), torch.zeros(0, 4),
                 torch.tensor([[1.0, 1.0, 9.0, 9.0]])]
    inds = [torch.tensor([1, 0, 1]), torch.zeros(0, dtype=torch.long), torch.tensor([3])]
    targets = mask_target(proposals, inds, masks, dict(mask_size=6))
    assert targets.shape == (4, 6, 6)
    assert targets[:, 0, 0].tolist() == [1, 0, 1, 3]
    assert masks[1].calls == []  # an image without positives asks nothing of its masks
    assert masks[0].calls[0]['out_shape'] == (6, 6)


def test_no_positives_gives_empty_targets():
    targets = mask_target_single(torch.zeros(0, 4, dtype=torch.float64),
                                 torch.zeros(0, dtype=torch.long), RecordingMasks(1, 8, 8),
                                 dict(mask_size=28))
    assert targets.shape == (0, 28, 28) and targets.dtype == torch.float64


def test_soft_mask_target_keeps_fractions():
    masks = RecordingMasks(1, 8, 8)
    mask_target_single(torch.tensor([[0.0, 0.0, 4.0, 4.0]]), torch.tensor([0]), masks,
                       dict(mask_size=4, soft_mask_target=True))
    assert masks.calls[0]['binarize'] is False


@pytest.mark.parametrize('cfg,words', [
    (dict(), 'mask_size'),
    (dict(mask_size=0), 'positive int'),
    (dict(mask_size=(28, 28, 1)), 'pair'),
    (dict(mask_size='28'), 'mask_size'),
])
def test_bad_mask_size(cfg, words):
    with pytest.raises(ValueError, match=words):
        mask_target_single(torch.tensor([[0.0, 0.0, 4.0, 4.0]]), torch.tensor([0]),
                           RecordingMasks(1, 8, 8), cfg)


def test_lists_of_different_lengths():
    with pytest.raises(ValueError, match='one entry per image'):
        mask_target([torch.zeros(0, 4)], [], [RecordingMasks(1, 8, 8)], dict(mask_size=4))


# ---- with the real mask structures --------------------------------------------------------

def _square_bitmap():
    mask = np.zeros((1, 16, 16), dtype=np.uint8)
    mask[0, 4:12, 4:12] = 1
    return BitmapMasks(mask, 16, 16)


def test_bitmap_targets_by_hand():
    """RoIAlign (aligned) bins of the clipped proposal, thresholded at 0.5."""
    proposals = torch.tensor([[4.0, 4.0, 12.0, 12.0], [0.0, 0.0, 16.0, 16.0],
                              [-8.0, -8.0, 8.0, 8.0]])  # the last is clipped to [0, 0, 8, 8]
    targets = mask_target_single(proposals, torch.tensor([0, 0, 0]), _square_bitmap(),
                                 dict(mask_size=4))
    assert targets.dtype == torch.float32
    torch.testing.assert_close(targets[0], torch.ones(4, 4))
    edge = torch.tensor([0.0, 1.0, 1.0, 0.0])
    torch.testing.assert_close(targets[1], edge[:, None] * edge[None, :])
    corner = torch.tensor([0.0, 0.0, 1.0, 1.0])
    torch.testing.assert_close(targets[2], corner[:, None] * corner[None, :])


def test_soft_bitmap_targets_are_roi_align_averages():
    proposals = torch.tensor([[2.0, 2.0, 10.0, 10.0]])
    soft = mask_target_single(proposals, torch.tensor([0]), _square_bitmap(),
                              dict(mask_size=2, soft_mask_target=True))
    # each 4 x 4 bin: the first row / column of bins covers [2, 6) of which [4, 6) is mask
    torch.testing.assert_close(soft[0], torch.tensor([[0.25, 0.5], [0.5, 1.0]]))


def test_polygon_and_bitmap_targets_agree():
    """The same objects as polygons and as their rasterised bitmaps give the same targets
    but for pixels on the outlines (mmdet rasterises polygons after the crop)."""
    polys = [[np.array([5.0, 6.0, 40.0, 4.0, 44.0, 30.0, 20.0, 44.0, 3.0, 25.0])],
             [np.array([30.0, 30.0, 60.0, 33.0, 50.0, 60.0])]]
    poly_masks = PolygonMasks(polys, 64, 64)
    bitmaps = BitmapMasks(poly_masks.to_ndarray(), 64, 64)
    proposals = torch.tensor([[2.0, 2.0, 46.0, 46.0], [28.0, 26.0, 62.0, 62.0],
                              [10.0, 0.0, 70.0, 40.0], [0.0, 20.0, 30.0, 50.0]])
    inds = torch.tensor([0, 1, 0, 0])
    cfg = dict(mask_size=28)
    from_polys = mask_target([proposals], [inds], [poly_masks], cfg)
    from_bits = mask_target([proposals], [inds], [bitmaps], cfg)
    assert from_polys.shape == from_bits.shape == (4, 28, 28)
    assert from_polys.sum() > 0.2 * from_polys.numel()
    agree = (from_polys == from_bits).float().mean(dim=(1, 2))
    assert (agree > 0.95).all(), agree
    with pytest.raises(ValueError, match='binar'):
        mask_target([proposals], [inds], [poly_masks], dict(mask_size=28,
                                                             soft_mask_target=True))
