"""FilterAnnotations (mmdet 2.x): small boxes dropped with their labels; keep_empty=True
returns None for an image left empty."""
import numpy as np
import pytest

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.datasets.pipelines import FilterAnnotations


def _res():
    masks = np.zeros((3, 8, 8), np.uint8)
    masks[0, :4, :4] = 1
    masks[2, 0, 0] = 1
    return dict(gt_bboxes=np.array([[0, 0, 4, 4], [0, 0, 1, 5], [2, 2, 8, 3.5]], np.float32),
                gt_labels=np.array([1, 2, 3]), gt_masks=BitmapMasks(masks, 8, 8))


def test_filters_by_box_and_mask():
    out = FilterAnnotations(min_gt_bbox_wh=(1, 1))(_res())
    assert out['gt_labels'].tolist() == [1, 3] and len(out['gt_masks']) == 2
    out = FilterAnnotations(by_box=False, by_mask=True, min_gt_mask_area=2)(_res())
    assert out['gt_labels'].tolist() == [1]
    out = FilterAnnotations(by_mask=True, min_gt_mask_area=1)(_res())
    assert out['gt_labels'].tolist() == [1, 3]


def test_keep_empty_and_errors():
    assert FilterAnnotations(min_gt_bbox_wh=(10, 10))(_res()) is None
    out = FilterAnnotations(min_gt_bbox_wh=(10, 10), keep_empty=False)(_res())
    assert out['gt_bboxes'].shape == (0, 4) and len(out['gt_labels']) == 0
    empty = dict(gt_bboxes=np.zeros((0, 4), np.float32), gt_labels=np.zeros(0))
    assert FilterAnnotations()(empty) is empty
    with pytest.raises(ValueError, match='by_box=True or by_mask=True'):
        FilterAnnotations(by_box=False)
    with pytest.raises(KeyError, match="'gt_masks'"):
        FilterAnnotations(by_mask=True)(dict(gt_bboxes=np.zeros((1, 4))))
