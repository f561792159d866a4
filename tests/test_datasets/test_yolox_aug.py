"""RandomAffine and YOLOXHSVRandomAug (mmdet 2.x)."""
import cv2
import numpy as np
import pytest

from ckptzoo.datasets.pipelines import RandomAffine, YOLOXHSVRandomAug
from ckptzoo.datasets.pipelines import yolox_aug


def _res(boxes, h=40, w=60):
    img = np.random.RandomState(0).randint(0, 255, (h, w, 3)).astype(np.uint8)
    return dict(img=img, img_shape=img.shape, gt_bboxes=np.array(boxes, np.float32),
                gt_labels=np.arange(len(boxes)), bbox_fields=['gt_bboxes'])


def test_random_affine_scale_and_translate_by_hand(monkeypatch):
    # rotation 0, scale 2, no shear, translation (0.1 * 40, -0.1 * 30) with border (-5, -10)
    draws = [0.0, 2.0, 0.0, 0.0, 0.1, -0.1]
    monkeypatch.setattr(yolox_aug.random, 'uniform', lambda *a: draws.pop(0))
    out = RandomAffine(border=(-5, -10))(_res([[1, 1, 5, 3], [30, 30, 40, 38]]))
    assert out['img'].shape == (30, 40, 3) and out['img_shape'] == (30, 40, 3)
    # box 0: (2 + 4, 2 - 3, 10 + 4, 6 - 3) clipped; box 1 lands outside and is dropped
    np.testing.assert_allclose(out['gt_bboxes'], [[6, 0, 14, 3]])
    assert out['gt_labels'].tolist() == [0]


def test_random_affine_filter_and_errors():
    np.random.seed(3)
    out = RandomAffine(skip_filter=False, min_bbox_size=100)(_res([[1, 1, 20, 20]]))
    assert len(out['gt_bboxes']) == 0 and len(out['gt_labels']) == 0
    with pytest.raises(ValueError, match='max_translate_ratio must be in'):
        RandomAffine(max_translate_ratio=2)
    with pytest.raises(ValueError, match='scaling_ratio_range must be'):
        RandomAffine(scaling_ratio_range=(0, 1))
    with pytest.raises(NotImplementedError, match='gt_masks'):
        RandomAffine()(dict(_res([[1, 1, 2, 2]]), gt_masks=[]))


def test_hsv_gains_by_hand(monkeypatch):
    res = _res([[1, 1, 2, 2]])
    monkeypatch.setattr(np.random, 'uniform', lambda *a: np.array([1.0, -1.0, 0.5]))
    monkeypatch.setattr(np.random, 'randint', lambda *a: np.array([1, 1, 0]))
    out = YOLOXHSVRandomAug(hue_delta=5, saturation_delta=30, value_delta=30)(dict(res))
    hsv = cv2.cvtColor(res['img'], cv2.COLOR_BGR2HSV).astype(np.int16)
    hsv[..., 0] = (hsv[..., 0] + 5) % 180
    hsv[..., 1] = np.clip(hsv[..., 1] - 30, 0, 255)
    expected = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)
    np.testing.assert_array_equal(out['img'], expected)
