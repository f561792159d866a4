import pytest
import torch

from ckptzoo.registry import TASK_UTILS


def _assigner(**kw):
    cfg = dict(type='UniformAssigner', pos_ignore_thr=0.15, neg_ignore_thr=0.7, match_times=1)
    cfg.update(kw)
    return TASK_UTILS.build(cfg)


def test_nearest_by_prediction_and_by_anchor():
    anchors = torch.tensor([[0., 0., 10., 10.], [20., 20., 30., 30.], [0., 0., 30., 30.]])
    preds = torch.tensor([[19., 19., 31., 31.], [0., 0., 10., 10.], [40., 40., 50., 50.]])
    gts = torch.tensor([[0., 0., 12., 12.]])
    res = _assigner().assign(preds, anchors, gts, gt_labels=torch.tensor([2]))
    # nearest prediction: prior 1 (its anchor IoU with the gt 0: ignored, -1);
    # nearest anchor: prior 0 (anchor IoU 100/144: positive)
    assert res.gt_inds.tolist() == [1, -1, 0]
    assert res.labels.tolist() == [2, -1, -1]
    assert res.pos_idx.tolist() == [False, True]
    torch.testing.assert_close(res.pos_predicted_boxes, preds[[1, 0]])
    torch.testing.assert_close(res.target_boxes, gts[[0, 0]])


def test_predictions_overlapping_a_gt_are_ignored_negatives():
    anchors = torch.tensor([[0., 0., 10., 10.], [100., 100., 110., 110.],
                            [200., 200., 210., 210.]])
    preds = torch.tensor([[0., 0., 10., 10.], [0., 0., 10., 11.], [300., 300., 310., 310.]])
    res = _assigner().assign(preds, anchors, torch.tensor([[0., 0., 10., 10.]]))
    # prior 1 predicts the gt (IoU 10/11 > 0.7) without being matched: ignored
    assert res.gt_inds.tolist() == [1, -1, 0] and res.labels is None


def test_no_gt():
    res = _assigner().assign(torch.zeros(3, 4), torch.zeros(3, 4), torch.zeros(0, 4))
    assert res.gt_inds.tolist() == [0, 0, 0] and res.pos_predicted_boxes.shape == (0, 4)
    assert res.pos_idx.shape == (0, )


def test_bad_arguments():
    with pytest.raises(ValueError, match='match_times must be a positive int'):
        _assigner(match_times=0)
    with pytest.raises(NotImplementedError, match='BboxOverlaps2D'):
        _assigner(iou_calculator=dict(type='BboxOverlaps3D'))
    with pytest.raises(ValueError, match='match_times=4 priors per gt, got 3 priors'):
        _assigner(match_times=4).assign(torch.zeros(3, 4), torch.zeros(3, 4),
                                        torch.ones(1, 4))
