import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def test_encode_decode_round_trip_and_clipping():
    coder = TASK_UTILS.build(dict(type='DistancePointBBoxCoder'))
    points = torch.tensor([[10., 10.], [30., 20.]])
    boxes = torch.tensor([[4., 2., 20., 16.], [25., 5., 40., 35.]])
    dist = coder.encode(points, boxes)
    torch.testing.assert_close(dist, torch.tensor([[6., 8., 10., 6.], [5., 15., 10., 15.]]))
    torch.testing.assert_close(coder.decode(points, dist), boxes)
    # max_dis: clamped to [0, max_dis - eps]
    torch.testing.assert_close(coder.encode(points, boxes, max_dis=8, eps=0.1),
                               torch.tensor([[6., 7.9, 7.9, 6.], [5., 7.9, 7.9, 7.9]]))
    # clipped to (h, w) = (30, 36)
    torch.testing.assert_close(coder.decode(points, dist, max_shape=(30, 36, 3)),
                               torch.tensor([[4., 2., 20., 16.], [25., 5., 36., 30.]]))
    # a batch with one shape per image
    batched = coder.decode(points[None].expand(2, 2, 2), dist[None].expand(2, 2, 4),
                           max_shape=[(30, 36), (100, 100)])
    torch.testing.assert_close(batched[0], torch.tensor([[4., 2., 20., 16.], [25., 5., 36., 30.]]))
    torch.testing.assert_close(batched[1], boxes)
    no_clip = TASK_UTILS.build(dict(type='DistancePointBBoxCoder', clip_border=False))
    torch.testing.assert_close(no_clip.decode(points, dist, max_shape=(30, 36)), boxes)
    with pytest.raises(ValueError, match=r'points must be \[N, 2\]'):
        coder.encode(points, boxes[:1])
