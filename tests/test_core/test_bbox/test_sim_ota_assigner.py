"""SimOTAAssigner (mmdet 2.x, YOLOX): candidates by centre, dynamic-k cheapest priors per gt,
a prior taken twice goes to its cheaper gt."""
import pytest
import torch

from ckptzoo.core.bbox import SimOTAAssigner
from ckptzoo.registry import TASK_UTILS


def _priors(n=4, stride=8.):
    """An n x n grid of cell centres (offset 0.5) at ``stride``: (cx, cy, sw, sh)."""
    ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing='ij')
    c = torch.stack([xs.reshape(-1), ys.reshape(-1)], 1).float() * stride + stride / 2
    return torch.cat([c, torch.full_like(c, stride)], 1)


def test_built_from_config_with_mmdet_defaults():
    a = TASK_UTILS.build(dict(type='SimOTAAssigner'))
    assert (a.center_radius, a.candidate_topk, a.iou_weight, a.cls_weight) == (2.5, 10, 3., 1.)


def test_candidates_are_inside_the_box_or_its_centre_square():
    a = SimOTAAssigner(center_radius=0.5)
    priors = _priors()
    gt = torch.tensor([[0., 0., 20., 12.]])  # centre (10, 6), square +-4
    valid, both = a.get_in_gt_and_in_center_info(priors, gt)
    # inside the box: centres (4,4), (12,4); inside the square [6,14]x[2,10]: (12,4)
    assert valid.nonzero().flatten().tolist() == [0, 1]
    assert both.flatten().tolist() == [False, True]


def test_perfect_prediction_is_the_positive_with_its_iou():
    a = SimOTAAssigner()
    priors = _priors()
    gt = torch.tensor([[8., 8., 16., 16.]])
    boxes = torch.tensor([[0., 0., 100., 100.]]).repeat(16, 1)
    boxes[5] = gt[0]  # prior 5 is at (12, 12): its prediction is the gt
    scores = torch.full((16, 2), 0.1)
    scores[5, 1] = 0.9
    res = a.assign(scores, priors, boxes, gt, torch.tensor([1]))
    # dynamic k = int(sum of the top-10 IoUs) = int(1 + 9 * 64 / 10000) = 1
    assert res.gt_inds.tolist() == [0] * 5 + [1] + [0] * 10
    assert res.labels.tolist() == [-1] * 5 + [1] + [-1] * 10
    assert res.max_overlaps[5] == 1 and (res.max_overlaps[torch.arange(16) != 5] == -1e5).all()
    assert res.num_gts == 1


def test_a_prior_taken_by_two_gts_goes_to_the_cheaper():
    a = SimOTAAssigner(center_radius=10.)
    priors = _priors(2)
    gts = torch.tensor([[0., 0., 16., 16.], [0., 0., 15., 15.]])
    boxes = torch.tensor([[0., 0., 15., 15.]]).repeat(4, 1)  # every prior predicts gt 1
    scores = torch.full((4, 2), 0.5)
    res = a.assign(scores, priors, boxes, gts, torch.tensor([0, 1]))
    # both gts' k: int(4 * IoU) = 3 and 4; every prior is taken by gt 1 (IoU 1 is cheaper)
    assert res.gt_inds.tolist() == [2, 2, 2, 2]
    assert res.labels.tolist() == [1, 1, 1, 1]


def test_without_gt_or_candidates_everything_is_background():
    a = SimOTAAssigner()
    priors = _priors()
    boxes = priors[:, :2].repeat(1, 2) + torch.tensor([-4., -4., 4., 4.])
    res = a.assign(torch.rand(16, 3), priors, boxes, torch.zeros(0, 4),
                   torch.zeros(0, dtype=torch.long))
    assert (res.gt_inds == 0).all() and (res.labels == -1).all() and res.num_gts == 0
    assert (res.max_overlaps == 0).all()
    far = torch.tensor([[500., 500., 510., 510.]])
    res = a.assign(torch.rand(16, 3), priors, boxes, far, torch.tensor([2]))
    assert (res.gt_inds == 0).all() and (res.labels == -1).all() and res.num_gts == 1


def test_keeps_the_dtype_of_its_inputs():
    a = SimOTAAssigner()
    priors = _priors().double()
    boxes = (priors[:, :2].repeat(1, 2) + torch.tensor([-6., -6., 6., 6.])).double()
    res = a.assign(torch.rand(16, 2, dtype=torch.float64), priors, boxes,
                   torch.tensor([[2., 2., 20., 20.]], dtype=torch.float64), torch.tensor([0]))
    assert res.max_overlaps.dtype == torch.float32 and (res.gt_inds > 0).any()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='candidate_topk must be a positive int, got 0'):
        SimOTAAssigner(candidate_topk=0)
    with pytest.raises(ValueError, match='center_radius must be > 0'):
        SimOTAAssigner(center_radius=0)
