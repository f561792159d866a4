import pytest
import torch
from torchvision.ops import batched_nms as tv_batched_nms

from ckptzoo.core.post_processing import multiclass_nms
from ckptzoo.models.dense_heads import AnchorHead
from ckptzoo.ops import batched_nms, nms

NMS = dict(type='nms', iou_threshold=0.5)


def test_nms_strictly_above_threshold_suppresses():
    boxes = torch.tensor([[0., 0., 10., 10.], [0., 0., 10., 5.], [0., 6., 10., 10.]])
    scores = torch.tensor([.9, .8, .7])
    dets, keep = nms(boxes, scores, 0.5)  # IoUs with box 0: 0.5 (exactly: kept), 0.4
    assert keep.tolist() == [0, 1, 2]
    dets, keep = nms(boxes, scores, 0.45)
    assert keep.tolist() == [0, 2] and dets[:, 4].tolist() == pytest.approx([.9, .7])
    # score_threshold drops boxes first (indices stay those of the input); max_num
    dets, keep = nms(boxes, scores, 0.45, score_threshold=0.75)
    assert keep.tolist() == [0]
    assert nms(boxes, scores, 0.6, max_num=2)[1].tolist() == [0, 1]


def test_multiclass_nms_per_class_boxes_and_background_dropped():
    """Two RoIs, 2 classes, a box per class (8 columns). Class 0: the boxes overlap
    (IoU 0.9 > 0.5), the weaker goes; class 1: the same boxes but only one scores above
    score_thr. The background column is never a detection."""
    b0 = [[0., 0., 10., 10.], [0., 0., 10., 9.]]
    b1 = [[20., 20., 30., 30.], [20., 20., 30., 29.]]
    multi_bboxes = torch.tensor([b0[0] + b1[0], b0[1] + b1[1]])
    multi_scores = torch.tensor([[.6, .3, .99],
                                 [.5, .04, .99]])
    dets, labels = multiclass_nms(multi_bboxes, multi_scores, 0.05, NMS)
    assert labels.tolist() == [0, 1]
    torch.testing.assert_close(dets, torch.tensor([b0[0] + [.6], b1[0] + [.3]]))
    dets, labels, inds = multiclass_nms(multi_bboxes, multi_scores, 0.05, NMS, max_num=1,
                                        return_inds=True)
    assert labels.tolist() == [0] and inds.tolist() == [0]  # index of (roi 0, class 0)


def test_multiclass_nms_shared_boxes_kept_per_class():
    boxes = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]])
    scores = torch.tensor([[.9, .8, 0.], [.7, .6, 0.]])
    dets, labels, inds = multiclass_nms(boxes, scores, 0.0, NMS, return_inds=True)
    assert labels.tolist() == [0, 1] and inds.tolist() == [0, 1]
    dets, labels = multiclass_nms(boxes, scores, 0.0, dict(NMS, class_agnostic=True))
    assert labels.tolist() == [0] and dets[:, 4].tolist() == pytest.approx([.9])


def test_score_factors_apply_after_the_threshold():
    boxes = torch.tensor([[0., 0., 10., 10.], [20., 20., 30., 30.]])
    scores = torch.tensor([[.6, 0.], [.4, 0.]])
    dets, labels = multiclass_nms(boxes, scores, 0.5, NMS, score_factors=torch.tensor([.5, 1.]))
    assert dets[:, 4].tolist() == pytest.approx([.3])  # .4 fails the threshold despite x1


def test_multiclass_nms_nothing_above_threshold():
    dets, labels, inds = multiclass_nms(torch.rand(3, 8), torch.full((3, 3), .01), 0.05, NMS,
                                        return_inds=True)
    assert dets.shape == (0, 5) and labels.shape == (0, ) and inds.shape == (0, )


# float32 boxes whose IoU is 0.5 in exact arithmetic: computed in place it is just above 0.5,
# shifted by the class offset (201) just below it
BOXES = torch.tensor([[24.8, 38.4, 30.2, 46.0], [24.8, 38.4, 30.2, 42.2], [0., 0., 200., 200.]])
SCORES = torch.tensor([.9, .8, .1])
IDXS = torch.tensor([1, 1, 0])


def test_batched_nms_runs_on_class_shifted_boxes_as_mmcv():
    """mmcv shifts the classes apart (idx * (max coordinate + 1)) and runs NMS on the shifted
    boxes, at once below split_thr (10000) boxes, per class from it on: box 1 survives both
    ways. torchvision's batched_nms runs per class on unshifted boxes above 1000 boxes (CPU)
    and suppresses it."""
    dets, keep = batched_nms(BOXES, SCORES, IDXS, NMS)
    assert keep.tolist() == [0, 1, 2]
    torch.testing.assert_close(dets[:, :4], BOXES)  # unshifted boxes are returned
    assert batched_nms(BOXES, SCORES, IDXS, dict(NMS, split_thr=3))[1].tolist() == [0, 1, 2]
    assert batched_nms(BOXES, SCORES, IDXS,
                       dict(NMS, split_thr=3, max_num=2))[1].tolist() == [0, 1]
    far = torch.tensor([[100., 100., 101., 101.]]).repeat(1200, 1) \
        + 2 * torch.arange(1200.)[:, None]
    boxes = torch.cat([BOXES, far])
    scores = torch.cat([SCORES, torch.full((1200, ), .05)])
    idxs = torch.cat([IDXS, torch.zeros(1200, dtype=torch.long)])
    keep = batched_nms(boxes, scores, idxs, NMS)[1]
    assert keep.numel() == 1203 and keep[:3].tolist() == [0, 1, 2]
    assert 1 not in tv_batched_nms(boxes, scores, idxs, 0.5).tolist()
    # the dense heads' NMS is the same routine (mmdet's dense heads call mmcv's batched_nms)
    dets, labels = AnchorHead._nms(None, boxes, scores, idxs, dict(nms=NMS, max_per_img=3))
    torch.testing.assert_close(dets, torch.cat([BOXES, SCORES[:, None]], 1))
    assert labels.tolist() == [1, 1, 0]


def test_batched_nms_without_config_sorts_and_empty():
    dets, keep = batched_nms(BOXES, torch.tensor([.1, .9, .5]), IDXS, None)
    assert keep.tolist() == [1, 2, 0]
    dets, keep = batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0), NMS)
    assert dets.shape == (0, 5) and keep.shape == (0, )


def test_iou_thr_alias_and_bad_configs():
    assert batched_nms(BOXES, SCORES, IDXS, dict(iou_thr=0.5))[1].tolist() == [0, 1, 2]
    with pytest.raises(NotImplementedError, match='nms_rotated'):  # soft_nms is supported
        batched_nms(BOXES, SCORES, IDXS, dict(type='nms_rotated', iou_threshold=0.5))
    with pytest.raises(ValueError, match='iou_treshold'):
        batched_nms(BOXES, SCORES, IDXS, dict(iou_treshold=0.5))
    with pytest.raises(NotImplementedError, match='offset'):
        batched_nms(BOXES, SCORES, IDXS, dict(NMS, offset=1))
