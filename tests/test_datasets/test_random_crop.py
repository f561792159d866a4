"""RandomCrop (mmdet 2.x): crop sizes of each crop_type, boxes shifted / clipped / dropped with
their labels and masks, the negative-crop rule, argument errors."""
import numpy as np
import pytest

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.datasets.pipelines import RandomCrop
from ckptzoo.registry import build_transform


def _results():
    rng = np.random.RandomState(0)
    return dict(img=rng.rand(50, 70, 3).astype(np.float32), img_fields=['img'],
                bbox_fields=['gt_bboxes'], img_shape=(50, 70, 3),
                gt_bboxes=np.array([[1, 2, 30, 40], [40, 10, 69, 49]], np.float32),
                gt_labels=np.array([0, 1]), gt_masks=BitmapMasks(rng.rand(2, 50, 70) > 0.5,
                                                                 50, 70))


def test_absolute_crop_shifts_and_clips_boxes():
    np.random.seed(0)
    res = _results()
    img = res['img'].copy()
    out = RandomCrop((20, 30))(res)
    assert out['img'].shape == (20, 30, 3) and out['img_shape'] == (20, 30, 3)
    # find the offset from the pixels
    y, x = next((y, x) for y in range(31) for x in range(41)
                if np.array_equal(img[y:y + 20, x:x + 30], out['img']))
    want = np.array([[1, 2, 30, 40], [40, 10, 69, 49]], np.float32) - [x, y, x, y]
    want[:, 0::2] = want[:, 0::2].clip(0, 30)
    want[:, 1::2] = want[:, 1::2].clip(0, 20)
    keep = (want[:, 2] > want[:, 0]) & (want[:, 3] > want[:, 1])
    np.testing.assert_array_equal(out['gt_bboxes'], want[keep])
    assert len(out['gt_labels']) == len(out['gt_masks']) == keep.sum()
    assert out['gt_masks'].height == 20 and out['gt_masks'].width == 30


@pytest.mark.parametrize('cfg, lo, hi', [
    (dict(crop_size=(10, 40), crop_type='absolute_range'), (10, 10), (40, 40)),
    (dict(crop_size=(0.5, 0.5), crop_type='relative'), (25, 35), (25, 35)),
    (dict(crop_size=(0.5, 0.5), crop_type='relative_range'), (25, 35), (50, 70))])
def test_crop_sizes(cfg, lo, hi):
    crop = build_transform(dict(type='RandomCrop', allow_negative_crop=True, **cfg))
    for seed in range(10):
        np.random.seed(seed)
        h, w = crop(_results())['img'].shape[:2]
        assert lo[0] <= h <= hi[0] and lo[1] <= w <= hi[1]


def test_negative_crop_returns_none_unless_allowed():
    res = _results()
    res['gt_bboxes'] = np.array([[0, 0, 2, 2]], np.float32)
    res['gt_labels'] = np.array([0])
    res['gt_masks'] = res['gt_masks'][[0]]
    np.random.seed(3)  # an offset away from the top-left corner
    assert RandomCrop((10, 10))(dict(res)) is None
    np.random.seed(3)
    out = RandomCrop((10, 10), allow_negative_crop=True)(dict(res))
    assert out['gt_bboxes'].shape == (0, 4)


@pytest.mark.parametrize('kwargs, match', [
    (dict(crop_size=(10, 10), crop_type='centre'), 'Invalid crop_type'),
    (dict(crop_size=(0.5, 10)), 'positive ints'),
    (dict(crop_size=(20, 10), crop_type='absolute_range'), r'\(min, max\)'),
    (dict(crop_size=(0.5, 1.5), crop_type='relative'), r'in \(0, 1\]')])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomCrop(**kwargs)
