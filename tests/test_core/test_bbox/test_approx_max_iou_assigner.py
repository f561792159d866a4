"""ApproxMaxIoUAssigner (mmdet 2.x's): a square is assigned by the best IoU of its approxes."""
import pytest
import torch

from ckptzoo.core.bbox import ApproxMaxIoUAssigner, MaxIoUAssigner
from ckptzoo.registry import TASK_UTILS


def _assigner(**kw):
    return TASK_UTILS.build(dict(dict(type='ApproxMaxIoUAssigner', pos_iou_thr=0.5,
                                      neg_iou_thr=0.4, min_pos_iou=0.0), **kw))


def test_by_the_best_approx_by_hand():
    squares = torch.tensor([[0., 0., 10., 10.], [20., 0., 30., 10.], [40., 40., 50., 50.]])
    # two approxes per square: the square itself and one twice as wide
    wide = squares.clone()
    wide[:, 2] += 10
    approxs = torch.stack([squares, wide], 1).reshape(-1, 4)
    gt = torch.tensor([[0., 0., 20., 10.], [20., 0., 30., 10.]])
    result = _assigner().assign(approxs, squares, 2, gt)
    # square 0: IoU 1/2 alone, 1 with its wide approx -> gt 1 (index 0)
    # square 1: IoU 1 with gt 2; square 2: nothing -> negative
    assert result.gt_inds.tolist() == [1, 2, 0]
    torch.testing.assert_close(result.max_overlaps, torch.tensor([1., 1., 0.]))
    # the squares alone would leave square 0 below pos_iou_thr
    plain = MaxIoUAssigner(pos_iou_thr=0.6, neg_iou_thr=0.4).assign(squares, gt)
    assert plain.gt_inds.tolist()[0] == 1  # only through the low-quality match
    assert isinstance(_assigner(), ApproxMaxIoUAssigner)


def test_ignored_regions_are_judged_by_the_squares_and_labels_follow():
    squares = torch.tensor([[0., 0., 10., 10.], [20., 0., 30., 10.]])
    approxs = squares.repeat_interleave(3, dim=0)
    gt = torch.tensor([[20., 0., 30., 10.]])
    ignore = torch.tensor([[0., 0., 12., 12.]])
    result = _assigner(ignore_iof_thr=0.5).assign(approxs, squares, 3, gt, ignore,
                                                  gt_labels=torch.tensor([4]))
    assert result.gt_inds.tolist() == [-1, 1] and result.labels.tolist() == [-1, 4]


def test_empty_inputs_and_bad_counts():
    squares = torch.tensor([[0., 0., 10., 10.]])
    result = _assigner().assign(squares.repeat(2, 1), squares, 2, torch.zeros(0, 4))
    assert result.gt_inds.tolist() == [0] and result.num_gts == 0
    result = _assigner().assign(torch.zeros(0, 4), torch.zeros(0, 4), 2, squares)
    assert result.gt_inds.numel() == 0
    with pytest.raises(ValueError, match='approxes for 1 squares'):
        _assigner().assign(squares.repeat(3, 1), squares, 2, squares)
    with pytest.raises(ValueError, match='approxs_per_octave'):
        _assigner().assign(squares, squares, 0, squares)


def test_assigning_on_the_cpu_above_gpu_assign_thr_is_the_same():
    squares = torch.tensor([[0., 0., 10., 10.], [20., 0., 30., 10.]])
    approxs = squares.repeat_interleave(2, dim=0)
    gt = torch.tensor([[0., 0., 9., 10.], [21., 0., 30., 10.]])
    labels = torch.tensor([1, 0])
    ref = _assigner().assign(approxs, squares, 2, gt, gt_labels=labels)
    got = _assigner(gpu_assign_thr=1).assign(approxs, squares, 2, gt, gt_labels=labels)
    assert got.gt_inds.tolist() == ref.gt_inds.tolist() == [1, 2]
    assert got.labels.tolist() == ref.labels.tolist() == [1, 0]
