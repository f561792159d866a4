"""soft_nms (mmcv's CPU kernel's algorithm) by hand and through batched_nms."""
import math

import pytest
import torch

from ckptzoo.ops.nms import batched_nms, soft_nms

BOXES = torch.tensor([[0., 0., 10., 10.], [1., 1., 11., 11.], [20., 20., 30., 30.],
                      [0., 0., 10., 9.]])
SCORES = torch.tensor([0.9, 0.8, 0.7, 0.3])


def _iou(a, b):
    w = max(0., min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0., min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    area = lambda t: (t[2] - t[0]) * (t[3] - t[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def test_gaussian_by_hand():
    dets, keep = soft_nms(BOXES, SCORES, iou_threshold=0.5, sigma=0.5, min_score=1e-3,
                          method='gaussian')
    b = BOXES.tolist()
    s1 = 0.8 * math.exp(-_iou(b[0], b[1]) ** 2 / 0.5)
    s3 = 0.3 * math.exp(-_iou(b[0], b[3]) ** 2 / 0.5)
    s3 *= math.exp(-_iou(b[1], b[3]) ** 2 / 0.5)  # box 1 (0.61) outranks box 3 after box 0
    assert keep.tolist() == [0, 2, 1, 3]
    torch.testing.assert_close(dets[:, 4], torch.tensor([0.9, 0.7, s1, s3]))
    torch.testing.assert_close(dets[:, :4], BOXES[keep])


def test_linear_naive_and_min_score():
    _, keep = soft_nms(BOXES, SCORES, iou_threshold=0.5, method='naive')
    assert keep.tolist() == [0, 2]  # boxes 1 and 3 overlap box 0 by >= 0.5: zeroed, dropped
    dets, keep = soft_nms(BOXES, SCORES, iou_threshold=0.9, method='linear', min_score=0.5)
    assert keep.tolist() == [0, 1, 2]  # nothing reaches IoU 0.9; 0.3 < min_score is dropped
    torch.testing.assert_close(dets[:, 4], torch.tensor([0.9, 0.8, 0.7]))
    with pytest.raises(ValueError, match='method'):
        soft_nms(BOXES, SCORES, method='cubic')


def test_through_batched_nms_per_class():
    cfg = dict(type='soft_nms', iou_threshold=0.5, method='gaussian')
    dets, keep = batched_nms(BOXES, SCORES, torch.tensor([0, 1, 0, 0]), cfg)
    assert keep.tolist() == [0, 1, 2, 3]  # box 1 is another class: untouched
    assert dets[1, 4] == pytest.approx(0.8)
    with pytest.raises(ValueError, match='soft_nms'):
        batched_nms(BOXES, SCORES, torch.zeros(4), dict(type='nms', iou_threshold=0.5,
                                                         sigma=0.5))
    assert soft_nms(BOXES[:0], SCORES[:0])[0].shape == (0, 5)
