import pytest
import torch

from ckptzoo.core.bbox import bbox_overlaps
from ckptzoo.registry import TASK_UTILS

# one level, a 2x2 grid of 10x10 anchors: centres (5, 5), (15, 5), (5, 15), (15, 15)
GRID = torch.tensor([[0., 0., 10., 10.], [10., 0., 20., 10.], [0., 10., 10., 20.],
                     [10., 10., 20., 20.]])


def _assigner(**kw):
    return TASK_UTILS.build(dict(dict(type='ATSSAssigner', topk=9), **kw))


def test_mean_plus_std_threshold_by_hand():
    """gt [0, 0, 12, 12] (centre (6, 6)): the 3 closest anchors are 0, 1, 2 with IoUs 100/144
    and 20/224 twice; the threshold mean + std (unbiased) keeps anchor 0 only."""
    gt = torch.tensor([[0., 0., 12., 12.]])
    res = _assigner(topk=3).assign(GRID, [4], gt, gt_labels=torch.tensor([2]))
    ious = torch.tensor([100 / 144, 20 / 224, 20 / 224])
    assert ious[0] >= ious.mean() + ious.std() > ious[1]
    assert res.gt_inds.tolist() == [1, 0, 0, 0] and res.labels.tolist() == [2, -1, -1, -1]
    assert res.num_gts == 1
    assert res.max_overlaps[0].item() == pytest.approx(100 / 144)
    # topk=4 adds anchor 3 (IoU 4/240): a lower mean + std, anchors 0 still the only one
    assert _assigner(topk=4).assign(GRID, [4], gt).gt_inds.tolist() == [1, 0, 0, 0]


def test_centre_must_lie_inside_the_gt():
    # anchor 0 overlaps most (IoU 25/175) but its centre (5, 5) is outside [5.5, 5.5, 20, 20]
    gt = torch.tensor([[5.5, 5.5, 20., 20.]])
    res = _assigner(topk=4).assign(GRID, [4], gt)
    iou = bbox_overlaps(GRID, gt)[:, 0]
    assert iou.argmax().item() == 3  # anchor 3 is fully inside: IoU 100/210
    assert res.gt_inds.tolist() == [0, 0, 0, 1]


def test_highest_iou_wins_and_topk_is_per_level():
    """Both gts take anchor 0 (IoU 100/144 and 100/196, above mean + std of their 4
    candidates); it goes to gt 1, the higher. Repeating the 4 anchors as a second level with
    topk=4 gives the same candidates twice: the same positives, at both levels."""
    anchors = torch.tensor([[10., 10., 20., 20.], [0., 0., 10., 10.], [30., 30., 40., 40.],
                            [0., 30., 10., 40.]])
    gts = torch.tensor([[9., 9., 21., 21.], [10., 10., 24., 24.]])
    res = _assigner(topk=4).assign(anchors, [4], gts)
    assert res.gt_inds.tolist() == [1, 0, 0, 0]
    assert res.max_overlaps[0].item() == pytest.approx(100 / 144)
    res = _assigner(topk=4).assign(torch.cat([anchors, anchors]), [4, 4], gts)
    assert res.gt_inds.tolist() == [1, 0, 0, 0, 1, 0, 0, 0]
    with pytest.raises(ValueError, match='add up to the 8 bboxes'):
        _assigner().assign(torch.cat([anchors, anchors]), [4, 2], gts)


def test_ignored_anchors_and_empty_inputs():
    gt = torch.tensor([[0., 0., 12., 12.]])
    res = _assigner(topk=3, ignore_iof_thr=0.5).assign(
        GRID, [4], gt, gt_bboxes_ignore=torch.tensor([[0., 0., 10., 10.]]))
    # anchor 0 is ignored and no candidate: the threshold is set by anchors 1, 2, 3
    assert res.gt_inds[0].item() == -1
    res = _assigner().assign(GRID, [4], torch.zeros(0, 4), gt_labels=torch.zeros(0).long())
    assert res.gt_inds.tolist() == [0] * 4 and res.labels.tolist() == [-1] * 4
    assert res.max_overlaps.tolist() == [0.] * 4


def test_a_single_candidate_is_kept():
    """mmdet's sample std of one value is NaN and drops the candidate; here it is 0."""
    res = _assigner(topk=1).assign(GRID, [4], torch.tensor([[0., 0., 12., 12.]]))
    assert res.gt_inds.tolist() == [1, 0, 0, 0]


def test_alpha_cost_of_ddod():
    """With alpha the overlaps are sigmoid(score)^(1-alpha) * IoU(pred, gt)^alpha: anchor 1
    (confident, IoU 60/232) beats anchor 0 (IoU 100/192, but score sigmoid(-5))."""
    gt = torch.tensor([[0., 0., 16., 12.]])
    scores = torch.full((4, 3), -5.)
    scores[1, 0] = 5.
    preds = GRID.clone()
    res = _assigner(topk=4, alpha=0.5).assign(GRID, [4], gt, gt_labels=torch.tensor([0]),
                                               cls_scores=scores, bbox_preds=preds)
    cost = scores[:, 0].sigmoid()**0.5 * bbox_overlaps(preds, gt)[:, 0]**0.5
    assert res.gt_inds.tolist() == [0, 1, 0, 0]
    assert res.max_overlaps[1].item() == pytest.approx(cost[1].item(), rel=1e-6)
    assert _assigner(topk=4).assign(GRID, [4], gt).gt_inds.tolist() == [1, 0, 0, 0]
    with pytest.raises(ValueError, match='needs cls_scores, bbox_preds and gt_labels'):
        _assigner(alpha=0.5).assign(GRID, [4], gt)
    with pytest.raises(ValueError, match='without alpha'):
        _assigner().assign(GRID, [4], gt, cls_scores=scores, bbox_preds=preds)


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match='topk must be a positive int, got 0'):
        _assigner(topk=0)
    with pytest.raises(ValueError, match='alpha must be None or a float'):
        _assigner(alpha=2)
    with pytest.raises(NotImplementedError, match='BboxOverlaps2D'):
        _assigner(iou_calculator=dict(type='BboxOverlaps3D'))
