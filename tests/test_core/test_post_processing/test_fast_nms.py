"""YOLACT's ``fast_nms`` (mmdet 2.x ``bbox_nms.py``): per class top_k, suppression by any better
box of the class (suppressed ones included), score threshold, max_num over all classes."""
import pytest
import torch

from ckptzoo.core.post_processing import fast_nms


def test_suppressed_boxes_still_suppress_by_hand():
    # a chain: A overlaps B (IoU 0.6), B overlaps C (0.6), A and C apart (IoU 0.2): classic
    # NMS keeps A and C, fast NMS drops C too (B, itself dropped, suppresses it)
    boxes = torch.tensor([[0., 0., 10., 10.], [2.5, 0., 12.5, 10.], [5., 0., 15., 10.]])
    iou_ab = 7.5 * 10 / (2 * 100 - 75)
    assert iou_ab > 0.5
    scores = torch.tensor([[.9, 0.], [.8, 0.], [.7, 0.]])  # one class + background column
    coeffs = torch.arange(6.).view(3, 2)
    dets, labels, kept = fast_nms(boxes, scores, coeffs, score_thr=0.05, iou_thr=0.5, top_k=200)
    assert dets.shape == (1, 5) and labels.tolist() == [0]
    torch.testing.assert_close(dets[0], torch.tensor([0., 0., 10., 10., .9]))
    torch.testing.assert_close(kept, coeffs[:1])
    # a looser threshold keeps all three, best first
    dets, labels, kept = fast_nms(boxes, scores, coeffs, 0.05, 0.7, 200)
    assert dets[:, 4].tolist() == pytest.approx([.9, .8, .7])
    torch.testing.assert_close(kept, coeffs)


def test_classes_top_k_score_thr_and_max_num():
    boxes = torch.tensor([[0., 0., 10., 10.], [20., 20., 30., 30.], [40., 40., 50., 50.]])
    scores = torch.tensor([[.9, .2, 0.], [.3, .8, 0.], [.04, .6, 0.]])
    coeffs = torch.randn(3, 4)
    dets, labels, kept = fast_nms(boxes, scores, coeffs, 0.05, 0.5, top_k=200)
    # every (box, class) above 0.05 whose class has no overlapping better box: same box in
    # two classes does not suppress across classes
    assert labels.tolist() == [0, 1, 1, 0, 1]
    assert dets[:, 4].tolist() == pytest.approx([.9, .8, .6, .3, .2])
    assert torch.equal(kept[0], coeffs[0]) and torch.equal(kept[1], coeffs[1])
    dets, labels, _ = fast_nms(boxes, scores, coeffs, 0.05, 0.5, top_k=1)
    assert labels.tolist() == [0, 1]  # the best box of each class only
    dets, labels, _ = fast_nms(boxes, scores, coeffs, 0.05, 0.5, top_k=200, max_num=2)
    assert labels.tolist() == [0, 1] and dets.shape == (2, 5)


def test_no_prior_gives_empty_results():
    dets, labels, coeffs = fast_nms(torch.zeros(0, 4), torch.zeros(0, 3), torch.zeros(0, 5),
                                    0.05, 0.5, 200, 100)
    assert dets.shape == (0, 5) and labels.shape == (0, ) and coeffs.shape == (0, 5)


def test_bad_boxes():
    with pytest.raises(ValueError, match='class-agnostic boxes'):
        fast_nms(torch.zeros(2, 8), torch.zeros(2, 3), torch.zeros(2, 1), 0.05, 0.5, 200)
