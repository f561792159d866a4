import pytest
import torch

from ckptzoo.core.bbox import MaxIoUAssigner, PseudoSampler, bbox_overlaps
from ckptzoo.registry import TASK_UTILS

GT = torch.tensor([[0., 0., 10., 10.], [50., 50., 60., 60.]])
ANCHORS = torch.tensor([
    [0., 0., 10., 10.],   # IoU 1 with gt 1        -> positive, gt 1
    [0., 0., 10., 5.],    # IoU 0.5 with gt 1      -> positive, gt 1
    [0., 0., 10., 4.4],   # IoU 0.44               -> between thresholds: ignored
    [20., 20., 30., 30.],  # IoU 0                 -> negative
    [55., 50., 65., 60.],  # IoU 1/3 with gt 2: negative, but gt 2's best -> low-quality pos
])


def _assigner(**kw):
    cfg = dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4, min_pos_iou=0,
               ignore_iof_thr=-1)
    cfg.update(kw)
    return TASK_UTILS.build(cfg)


def test_overlaps_by_hand():
    iou = bbox_overlaps(GT, ANCHORS)
    torch.testing.assert_close(iou[0], torch.tensor([1., 0.5, 0.44, 0., 0.]))
    torch.testing.assert_close(iou[1], torch.tensor([0., 0., 0., 0., 1 / 3]))
    # IoF: intersection over the first boxes' area
    iof = bbox_overlaps(torch.tensor([[0., 0., 10., 10.]]), torch.tensor([[5., 0., 20., 10.]]),
                        mode='iof')
    torch.testing.assert_close(iof, torch.tensor([[0.5]]))


def test_assign_by_hand():
    result = _assigner().assign(ANCHORS, GT, gt_labels=torch.tensor([3, 7]))
    assert result.num_gts == 2
    assert result.gt_inds.tolist() == [1, 1, -1, 0, 2]
    assert result.labels.tolist() == [3, 3, -1, -1, 7]
    torch.testing.assert_close(result.max_overlaps, torch.tensor([1., 0.5, 0.44, 0., 1 / 3]))


def test_without_low_quality_match():
    result = _assigner(match_low_quality=False).assign(ANCHORS, GT)
    assert result.gt_inds.tolist() == [1, 1, -1, 0, 0]
    assert result.labels is None


def test_min_pos_iou_limits_low_quality_match():
    result = _assigner(min_pos_iou=0.5).assign(ANCHORS, GT)
    assert result.gt_inds.tolist() == [1, 1, -1, 0, 0]


def test_neg_iou_thr_range():
    # IoU 0 is below the range [0.1, 0.4): not negative, stays ignored; 1/3 is in it
    result = _assigner(neg_iou_thr=(0.1, 0.4), match_low_quality=False).assign(ANCHORS, GT)
    assert result.gt_inds.tolist() == [1, 1, -1, -1, 0]


def test_gt_max_assign_all():
    gt = torch.tensor([[0., 0., 10., 10.]])
    anchors = torch.tensor([[0., 0., 10., 30.], [0., 0., 30., 10.], [0., 0., 20., 20.]])
    # IoUs 1/3, 1/3, 1/4: both tied best anchors become positive, or only the first
    assert _assigner().assign(anchors, gt).gt_inds.tolist() == [1, 1, 0]
    assert _assigner(gt_max_assign_all=False).assign(anchors, gt).gt_inds.tolist() == [1, 0, 0]


def test_ignore_regions():
    ignore = torch.tensor([[15., 15., 35., 35.]])
    result = _assigner(ignore_iof_thr=0.5).assign(ANCHORS, GT, gt_bboxes_ignore=ignore)
    # anchor 3 lies inside the ignore box: ignored instead of negative
    assert result.gt_inds.tolist() == [1, 1, -1, -1, 2]
    # IoF over the ignore box's area (400) is 100 / 400 < 0.5
    result = _assigner(ignore_iof_thr=0.5, ignore_wrt_candidates=False).assign(
        ANCHORS, GT, gt_bboxes_ignore=ignore)
    assert result.gt_inds.tolist() == [1, 1, -1, 0, 2]


def test_no_gt_makes_everything_negative():
    result = _assigner().assign(ANCHORS, torch.zeros(0, 4),
                                gt_labels=torch.zeros(0, dtype=torch.long))
    assert result.gt_inds.tolist() == [0] * 5
    assert result.labels.tolist() == [-1] * 5
    assert result.max_overlaps.tolist() == [0.] * 5


def test_gt_overlapping_nothing_claims_nothing():
    # mmdet makes every anchor a positive of such a box (all tie at IoU 0); we do not
    gt = torch.tensor([[200., 200., 200., 210.]])
    result = _assigner().assign(ANCHORS, gt)
    assert result.gt_inds.tolist() == [0] * 5


def test_pseudo_sampler():
    result = _assigner().assign(ANCHORS, GT, gt_labels=torch.tensor([3, 7]))
    sampling = PseudoSampler().sample(result, ANCHORS, GT)
    assert sampling.pos_inds.tolist() == [0, 1, 4]
    assert sampling.neg_inds.tolist() == [3]
    assert sampling.pos_assigned_gt_inds.tolist() == [0, 0, 1]
    torch.testing.assert_close(sampling.pos_gt_bboxes, GT[[0, 0, 1]])
    torch.testing.assert_close(sampling.pos_bboxes, ANCHORS[[0, 1, 4]])
    assert sampling.pos_gt_labels.tolist() == [3, 3, 7]


def test_bad_neg_iou_thr():
    with pytest.raises(ValueError, match='neg_iou_thr'):
        MaxIoUAssigner(pos_iou_thr=0.5, neg_iou_thr=(0.1, 0.2, 0.3))
