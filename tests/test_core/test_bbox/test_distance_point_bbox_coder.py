import pytest
import torch

from ckptzoo.core.bbox import DistancePointBBoxCoder, bbox2distance, distance2bbox
from ckptzoo.registry import TASK_UTILS


def test_encode_decode_round_trip_by_hand():
    coder = TASK_UTILS.build(dict(type='DistancePointBBoxCoder'))
    points = torch.tensor([[10., 20.], [5., 5.]])
    boxes = torch.tensor([[4., 8., 30., 25.], [0., 1., 9., 6.]])
    dist = coder.encode(points, boxes)
    assert dist.tolist() == [[6, 12, 20, 5], [5, 4, 4, 1]]
    assert torch.equal(coder.decode(points, dist), boxes)


def test_decode_clips_to_the_image_unless_told_not_to():
    points = torch.tensor([[10., 10.]])
    dist = torch.tensor([[20., 5., 50., 3.]])
    assert DistancePointBBoxCoder().decode(points, dist, (12, 40, 3)).tolist() == \
        [[0, 5, 40, 12]]
    assert DistancePointBBoxCoder(clip_border=False).decode(points, dist, (12, 40)).tolist() \
        == [[-10, 5, 60, 13]]


def test_batched_decode_clips_each_image_to_its_shape():
    points = torch.tensor([[[10., 10.]], [[10., 10.]]])
    dist = torch.full((2, 1, 4), 30.)
    out = distance2bbox(points, dist, [(20, 25), (35, 15)])
    assert out.tolist() == [[[0, 0, 25, 20]], [[0, 0, 15, 35]]]


def test_max_dis_clamps_the_distances():
    points = torch.tensor([[10., 10.]])
    boxes = torch.tensor([[12., -20., 40., 11.]])
    assert torch.allclose(bbox2distance(points, boxes, max_dis=16),
                          torch.tensor([[0., 15.9, 15.9, 1.]]))


def test_shapes_are_checked():
    with pytest.raises(ValueError, match=r'\[n, 2\] points'):
        DistancePointBBoxCoder().encode(torch.zeros(2, 3), torch.zeros(2, 4))
