import pytest
import torch

from ckptzoo.core.bbox import bbox_overlaps
from ckptzoo.registry import TASK_UTILS

# a 2x2 grid of 10x10 anchors: centres (5, 5), (15, 5), (5, 15), (15, 15)
ANCHORS = torch.tensor([[0., 0., 10., 10.], [10., 0., 20., 10.], [0., 10., 10., 20.],
                        [10., 10., 20., 20.]])


def _assigner(topk=2):
    return TASK_UTILS.build(dict(type='TaskAlignedAssigner', topk=topk))


def test_topk_alignment_metric_by_hand():
    """metric = score**alpha * IoU**beta of the predicted boxes; the topk (2) largest whose
    anchor centre is inside the gt are positives, with their metric."""
    gt = torch.tensor([[0., 0., 20., 12.]])  # centres (5, 5), (15, 5) inside
    preds = torch.tensor([[0., 0., 12., 12.], [8., 0., 20., 12.], [0., 0., 20., 12.],
                          [0., 8., 20., 20.]])
    scores = torch.tensor([[0.2, 0.9], [0.6, 0.1], [0.9, 0.9], [0.5, 0.5]])
    res = _assigner().assign(scores, preds, ANCHORS, gt, gt_labels=torch.tensor([0]),
                             alpha=1, beta=2)
    metric = scores[:, 0] * bbox_overlaps(preds, gt)[:, 0]**2
    # anchor 2 has the best metric (IoU 1) but its centre (5, 15) is outside the gt
    assert metric.argmax().item() == 2
    top2 = metric.topk(2).indices.tolist()
    assert sorted(top2) == [1, 2]
    assert res.gt_inds.tolist() == [0, 1, 0, 0] and res.labels.tolist() == [-1, 0, -1, -1]
    torch.testing.assert_close(res.assign_metrics, torch.tensor([0., metric[1], 0., 0.]))
    assert res.max_overlaps[1].item() == pytest.approx(bbox_overlaps(preds, gt)[1, 0].item())
    # topk 3 also takes anchor 0
    res = _assigner(3).assign(scores, preds, ANCHORS, gt, gt_labels=torch.tensor([0]),
                              alpha=1, beta=2)
    assert res.gt_inds.tolist() == [1, 1, 0, 0]


def test_shared_positive_goes_to_the_higher_iou_and_empty_gt():
    gts = torch.tensor([[0., 0., 12., 12.], [0., 0., 14., 14.]])
    preds = ANCHORS.clone()
    scores = torch.full((4, 2), 0.5)
    res = _assigner(1).assign(scores, preds, ANCHORS, gts, gt_labels=torch.tensor([0, 1]))
    # both gts take anchor 0; IoU 100/144 beats 100/196
    assert res.gt_inds.tolist() == [1, 0, 0, 0]
    res = _assigner().assign(scores, preds, ANCHORS, torch.zeros(0, 4),
                             gt_labels=torch.zeros(0).long())
    assert res.gt_inds.tolist() == [0] * 4 and res.labels.tolist() == [-1] * 4
    assert res.assign_metrics.tolist() == [0.] * 4


def test_bad_arguments():
    with pytest.raises(ValueError, match='topk must be a positive int, got 0'):
        _assigner(0)
    with pytest.raises(ValueError, match='needs gt_labels'):
        _assigner().assign(torch.ones(4, 2), ANCHORS, ANCHORS, ANCHORS[:1])
