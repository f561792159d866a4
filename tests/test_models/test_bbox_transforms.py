import numpy as np
import torch

from ckptzoo.models.detectors.single_stage import bbox2result as old_path_bbox2result
from ckptzoo.models.task_modules import bbox2result, bbox2roi, roi2bbox


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
