import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def _assigner(**kw):
    return TASK_UTILS.build(dict(dict(type='GridAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                                      min_pos_iou=0), **kw))


PRIORS = torch.tensor([[0., 0., 10., 10.], [0., 0., 20., 20.], [8., 8., 18., 18.],
                       [30., 30., 40., 40.]])
GT = torch.tensor([[0., 0., 18., 18.]])  # IoUs 0.309, 0.81, 0.309, 0


def test_only_responsible_priors_become_positive():
    res = _assigner().assign(PRIORS, torch.tensor([1, 0, 1, 0], dtype=torch.uint8), GT,
                             torch.tensor([4]))
    # prior 1 (IoU 0.81) is not responsible: neither positive nor negative (its IoU > 0.5)
    # the gt's best responsible prior (0, IoU 0.309 > min_pos_iou) is positive; prior 2 ties
    # with it and gt_max_assign_all takes it too; prior 3 is negative
    assert res.gt_inds.tolist() == [1, -1, 1, 0]
    assert res.labels.tolist() == [4, -1, 4, -1]
    res = _assigner(gt_max_assign_all=False).assign(
        PRIORS, torch.tensor([1, 0, 1, 0], dtype=torch.uint8), GT)
    assert res.gt_inds.tolist() == [1, -1, 0, 0] and res.labels is None


def test_responsible_prior_above_pos_iou_thr():
    res = _assigner(min_pos_iou=0.9).assign(PRIORS, torch.tensor([0, 1, 0, 0]), GT)
    assert res.gt_inds.tolist() == [0, 1, 0, 0]


def test_neg_iou_range_and_no_gt():
    res = _assigner(neg_iou_thr=(0.1, 0.5), min_pos_iou=0.9).assign(
        PRIORS, torch.zeros(4, dtype=torch.uint8), GT)
    assert res.gt_inds.tolist() == [0, -1, 0, -1]  # IoU 0 is not in (0.1, 0.5]
    res = _assigner().assign(PRIORS, torch.zeros(4), torch.zeros(0, 4), torch.zeros(0))
    assert res.gt_inds.tolist() == [0, 0, 0, 0] and res.labels.tolist() == [-1] * 4


def test_bad_arguments():
    with pytest.raises(ValueError, match='one flag per prior'):
        _assigner().assign(PRIORS, torch.zeros(3), GT)
    with pytest.raises(TypeError, match='neg_iou_thr'):
        _assigner(neg_iou_thr='0.5')
    with pytest.raises(NotImplementedError, match='BboxOverlaps2D'):
        _assigner(iou_calculator=dict(type='BboxOverlaps3D'))
