import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def _assigner(**kw):
    cfg = dict(type='CenterRegionAssigner', pos_scale=0.2, neg_scale=0.5, min_pos_iof=0.01)
    cfg.update(kw)
    return TASK_UTILS.build(cfg)


def test_mmdets_docstring_example():
    res = _assigner(neg_scale=0.2).assign(torch.tensor([[0., 0., 10., 10.], [10., 10., 20., 20.]]),
                                          torch.tensor([[0., 0., 10., 10.]]))
    assert res.gt_inds.tolist() == [1, 0] and res.max_overlaps is None


def test_core_shadow_and_priority():
    """gt 0 [0, 0, 40, 40] (core [16, 16, 24, 24], shadow [10, 10, 30, 30]); gt 1
    [10, 10, 30, 30] is smaller (priority higher), core [18, 18, 22, 22]."""
    priors = torch.tensor([[16., 16., 24., 24.],   # both cores: the smaller gt 1 wins
                           [10., 10., 14., 14.],   # gt 0's shadow only
                           [50., 50., 60., 60.],   # nothing
                           [0., 0., 4., 4.]])      # centre in gt 0, outside core and shadow
    gts = torch.tensor([[0., 0., 40., 40.], [10., 10., 30., 30.]])
    res = _assigner().assign(priors, gts, gt_labels=torch.tensor([2, 1]))
    assert res.gt_inds.tolist() == [2, 0, 0, 0]
    assert res.labels.tolist() == [1, -1, -1, -1]
    # prior 0 lost gt 0's core (class 2), prior 1 lies in gt 0's shadow (class 2); prior 1 is
    # also in gt 1's shadow? its IoF with [15, 15, 25, 25] is 0: no
    assert sorted(map(tuple, res.shadowed_labels.tolist())) == [(0, 2), (1, 2)]
    # without labels: the 1-based gt indices
    res = _assigner().assign(priors, gts)
    assert sorted(map(tuple, res.shadowed_labels.tolist())) == [(0, 1), (1, 1)]


def test_same_class_shadow_overrides_unless_foreground_dominates():
    priors = torch.tensor([[16., 16., 24., 24.]])
    gts = torch.tensor([[0., 0., 40., 40.], [10., 10., 30., 30.]])
    labels = torch.tensor([1, 1])
    res = _assigner().assign(priors, gts, gt_labels=labels)
    assert res.gt_inds.tolist() == [0] and res.labels.tolist() == [-1]
    res = _assigner(foreground_dominate=True).assign(priors, gts, gt_labels=labels)
    assert res.gt_inds.tolist() == [2] and res.shadowed_labels.shape == (0, 2)


def test_ignored_boxes_and_no_gt():
    priors = torch.tensor([[16., 16., 24., 24.], [50., 50., 60., 60.]])
    res = _assigner().assign(priors, torch.zeros(0, 4),
                             gt_bboxes_ignore=torch.tensor([[40., 40., 70., 70.]]),
                             gt_labels=torch.zeros(0, dtype=torch.long))
    assert res.gt_inds.tolist() == [0, -1] and res.num_gts == 0


def test_only_bbox_overlaps_2d():
    with pytest.raises(NotImplementedError, match='BboxOverlaps2D'):
        _assigner(iou_calculator=dict(type='BboxOverlaps3D'))
