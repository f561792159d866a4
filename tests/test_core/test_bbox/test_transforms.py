import numpy as np
import pytest
import torch

from ckptzoo.models.detectors.single_stage import bbox2result as old_path_bbox2result
from ckptzoo.core.bbox import bbox2result, bbox2roi, roi2bbox


def test_bbox2roi_drops_scores_and_numbers_images():
    a = torch.tensor([[1., 2., 3., 4., .9], [5., 6., 7., 8., .8]])
    b = torch.zeros(0, 5)
    c = torch.tensor([[9., 10., 11., 12., .7]])
    rois = bbox2roi([a, b, c])
    assert rois.tolist() == [[0., 1., 2., 3., 4.], [0., 5., 6., 7., 8.], [2., 9., 10., 11., 12.]]
    assert bbox2roi([torch.zeros(0, 4)]).shape == (0, 5)


def test_roi2bbox_groups_by_image_index_in_order():
    rois = torch.tensor([[2., 9., 10., 11., 12.], [0., 1., 2., 3., 4.], [0., 5., 6., 7., 8.]])
    out = roi2bbox(rois)
    assert len(out) == 2  # image 1 has no RoIs and no entry, as mmdet
    assert out[0].tolist() == [[1., 2., 3., 4.], [5., 6., 7., 8.]]
    assert out[1].tolist() == [[9., 10., 11., 12.]]


def test_bbox2result_per_class_and_old_import_path():
    assert old_path_bbox2result is bbox2result
    dets = torch.tensor([[0., 0., 1., 1., .9], [2., 2., 3., 3., .8], [4., 4., 5., 5., .7]])
    out = bbox2result(dets, torch.tensor([2, 0, 2]), 3)
    assert [r.shape for r in out] == [(1, 5), (0, 5), (2, 5)]
    assert out[2].dtype == np.float32 and out[2][:, 4].tolist() == [np.float32(.9),
                                                                    np.float32(.7)]
    empty = bbox2result(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long), 2)
    assert [r.shape for r in empty] == [(0, 5), (0, 5)]


def test_bbox_flip_mirrors_every_box_of_a_per_class_row():
    from ckptzoo.core.bbox import bbox_flip
    # two classes' boxes in one row, in a 100 (w) x 80 (h) image
    boxes = torch.tensor([[10., 20., 30., 60., 0., 5., 50., 40.]])
    assert bbox_flip(boxes, (80, 100)).tolist() == [[70., 20., 90., 60., 50., 5., 100., 40.]]
    assert bbox_flip(boxes, (80, 100), 'vertical').tolist() == \
        [[10., 20., 30., 60., 0., 40., 50., 75.]]
    assert bbox_flip(boxes, (80, 100), 'diagonal').tolist() == \
        [[70., 20., 90., 60., 50., 40., 100., 75.]]
    with pytest.raises(ValueError, match="'sideways'"):
        bbox_flip(boxes, (80, 100), 'sideways')
    with pytest.raises(ValueError, match='4k coordinates'):
        bbox_flip(boxes[:, :6], (80, 100))


def test_bbox_mapping_per_class_rows_round_trip_and_old_import_path():
    from ckptzoo.core.bbox import bbox_flip, bbox_mapping, bbox_mapping_back
    from ckptzoo.models.dense_heads import anchor_head
    assert (anchor_head.bbox_flip, anchor_head.bbox_mapping, anchor_head.bbox_mapping_back) \
        == (bbox_flip, bbox_mapping, bbox_mapping_back)
    boxes = torch.tensor([[10., 20., 30., 60., 0., 5., 50., 40.]])
    scale = np.array([2., 0.5, 2., 0.5], dtype=np.float32)
    # each class's box scaled by (w, h, w, h), then flipped in the 200 x 40 augmented image
    mapped = bbox_mapping(boxes, (40, 200), scale, True)
    assert mapped.tolist() == [[140., 10., 180., 30., 100., 2.5, 200., 20.]]
    torch.testing.assert_close(bbox_mapping_back(mapped, (40, 200), scale, True), boxes)
    # a float factor scales every coordinate
    assert bbox_mapping_back(boxes, (80, 100), 2.0, False).tolist() == \
        [[5., 10., 15., 30., 0., 2.5, 25., 20.]]
