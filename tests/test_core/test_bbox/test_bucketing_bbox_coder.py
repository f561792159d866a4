"""BucketingBBoxCoder (SABL): targets by hand on a proposal of one-pixel buckets, decoding a
perfect prediction recovers the ground truth, clipping, and the localisation confidence."""
import pytest
import torch

from ckptzoo.core.bbox import BucketingBBoxCoder, bbox_rescale
from ckptzoo.registry import TASK_UTILS

PROPOSAL = torch.tensor([[0., 0., 14., 14.]])  # 14 buckets of width 1, 7 per side
GT = torch.tensor([[2.3, 0.9, 10.9, 13.6]])


def test_bbox_rescale_about_the_centre_keeps_the_roi_index():
    torch.testing.assert_close(bbox_rescale(torch.tensor([[2., 4., 6., 8.]]), 2.0),
                               torch.tensor([[0., 2., 8., 10.]]))
    torch.testing.assert_close(bbox_rescale(torch.tensor([[3., 2., 4., 6., 8.]]), 0.5),
                               torch.tensor([[3., 3., 5., 5., 7.]]))


def test_encode_by_hand():
    coder = TASK_UTILS.build(dict(type='BucketingBBoxCoder', num_buckets=14, scale_factor=1.0))
    offsets, offset_w, labels, cls_w = coder.encode(PROPOSAL, GT)
    assert offsets.shape == offset_w.shape == labels.shape == cls_w.shape == (1, 28)
    centres = 0.5 + torch.arange(7.)
    # left side: centres 0.5..6.5 from x=0; the gt edge 2.3 is nearest bucket 2, then 1
    torch.testing.assert_close(offsets[0, :7], centres - 2.3)
    # right side counted inwards from x=14: 13.5, 12.5, ...; edge 10.9 nearest bucket 3 (10.5)
    torch.testing.assert_close(offsets[0, 7:14], (14 - centres) - 10.9)
    assert labels[0].view(4, 7).argmax(1).tolist() == [2, 3, 0, 0]
    assert labels.sum() == 4
    # offset targets on the nearest and the second nearest when within one bucket
    left_w = offset_w[0, :7]
    assert left_w.tolist() == [0, 1, 1, 0, 0, 0, 0]  # second nearest |1.5 - 2.3| = 0.8 < 1
    top_w = offset_w[0, 14:21]  # edge 0.9: bucket 0 (0.4 away), then 1 (0.6)
    assert top_w.sum() == 2 and top_w[:2].tolist() == [1, 1]
    # bucket classification ignores the other buckets within one width of the edge
    assert cls_w[0, :7].tolist() == [1, 0, 1, 1, 1, 1, 1]
    plain = BucketingBBoxCoder(14, 1.0, cls_ignore_neighbor=False)
    assert plain.encode(PROPOSAL, GT)[3].eq(1).all()
    strict = BucketingBBoxCoder(14, 1.0, offset_upperbound=0.5)
    assert strict.encode(PROPOSAL, GT)[1][0, :7].tolist() == [0, 0, 1, 0, 0, 0, 0]


def _perfect(coder, proposals, gt):
    offsets, _, labels, _ = coder.encode(proposals, gt)
    return labels * 20 - 10, offsets  # a confident bucket and its exact offset


def test_decode_of_a_perfect_prediction_is_the_ground_truth():
    torch.manual_seed(0)
    xy = torch.rand(30, 2) * 50
    gt = torch.cat([xy, xy + 8 + torch.rand(30, 2) * 30], 1)
    proposals = gt + torch.randn(30, 4) * 2
    for scale in (1.0, 1.7):
        coder = BucketingBBoxCoder(14, scale)
        bboxes, conf = coder.decode(proposals, _perfect(coder, proposals, gt))
        torch.testing.assert_close(bboxes, gt, rtol=0, atol=1e-4)
        assert conf.shape == (30, ) and (conf > 0.99).all()


def test_decode_clips_to_the_image_minus_one_and_confidence_adds_neighbours():
    coder = BucketingBBoxCoder(14, 1.0)
    gt = torch.tensor([[-3., 2., 13.5, 20.]])
    box, _ = coder.decode(PROPOSAL, _perfect(coder, PROPOSAL, gt), max_shape=(12, 13))
    torch.testing.assert_close(box, torch.tensor([[0., 2., 12., 11.]]))
    free = BucketingBBoxCoder(14, 1.0, clip_border=False)
    box, _ = free.decode(PROPOSAL, _perfect(free, PROPOSAL, gt), max_shape=(12, 13))
    torch.testing.assert_close(box, gt, rtol=0, atol=1e-4)
    # two equal best buckets: neighbours count both, far apart only the first
    cls = torch.full((1, 28), -30.)
    cls[0, [0, 1, 7, 9, 14, 15, 21, 23]] = 0.
    _, conf = coder.decode(PROPOSAL, (cls, torch.zeros(1, 28)))
    torch.testing.assert_close(conf, torch.tensor([(1 + 0.5 + 1 + 0.5) / 4]))


def test_bad_inputs_are_refused():
    coder = BucketingBBoxCoder(14, 1.0)
    with pytest.raises(ValueError, match='encode needs'):
        coder.encode(PROPOSAL, torch.zeros(2, 4))
    with pytest.raises(ValueError, match='predictions for'):
        coder.decode(PROPOSAL, (torch.zeros(2, 28), torch.zeros(2, 28)))
