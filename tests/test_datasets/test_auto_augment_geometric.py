"""``Shear``, ``Rotate``, ``Translate`` (mmdet 2.x's geometric AutoAugment steps): mmdet
2.28.2's outputs on fixed seeds, bad arguments.

Aligned draws: one ``np.random.rand()`` against ``prob``, then one against
``random_negative_prob`` (the sign), as mmdet's. ``GEO_GOLDEN`` was recorded from mmdet
2.28.2 (``np.random.seed(s)``, s = 0 (positive) and 2 (negative), polygon masks): boxes
(rounded to 3 places), labels, the image's and the semantic map's pixel sums. A wider check
(1008 random samples, bitmap and polygon masks, ignore boxes) found images, boxes, labels,
polygon masks and maps equal; ``Rotate``'s bitmap masks differ from mmdet's in a pixel or
two on a mask's edge in some samples: ckptzoo's ``BitmapMasks.rotate`` warps each mask on
its own, mmdet warps them stacked as channels, and OpenCV rounds the two paths differently.
"""
import numpy as np
import pytest

from ckptzoo.core.mask import BitmapMasks, PolygonMasks
from ckptzoo.registry import build_transform

GEO_GOLDEN = [('Shear', {'level': 6, 'prob': 1.0}, 0,
  [[5.72, 4.0, 33.6, 20.0], [34.5, 25.0, 50.0, 38.0], [44.36, 2.0, 50.0, 6.0]], [1, 2, 3],
  746766, 41369),
 ('Shear', {'level': 6, 'prob': 1.0}, 2,
  [[1.4, 4.0, 29.28, 20.0], [23.16, 25.0, 43.5, 38.0], [42.92, 2.0, 48.64, 6.0]], [1, 2, 3],
  742731, 41386),
 ('Shear', {'level': 10, 'prob': 1.0, 'direction': 'vertical'}, 0,
  [[5.0, 5.5, 30.0, 29.0], [30.0, 34.0, 48.0, 40.0], [44.0, 15.2, 49.0, 20.7]], [1, 2, 3],
  748802, 98591),
 ('Shear', {'level': 10, 'prob': 1.0, 'direction': 'vertical'}, 2,
  [[5.0, 0.0, 30.0, 18.5], [30.0, 10.6, 48.0, 29.0]], [1, 2], 754153, 98609),
 ('Rotate', {'level': 5, 'prob': 1.0}, 0,
  [[5.535, 0.0, 33.824, 21.406], [25.024, 26.236, 45.776, 40.0], [46.83, 7.643, 50.0, 12.801]],
  [1, 2, 3], 751250, 58623),
 ('Rotate', {'level': 5, 'prob': 1.0}, 2,
  [[1.653, 3.105, 29.942, 25.03], [31.236, 18.73, 50.0, 35.946], [38.806, 0.0, 44.671, 1.413]],
  [1, 2, 3], 749707, 58641),
 ('Rotate', {'level': 10, 'prob': 1.0, 'center': (10, 12), 'scale': 0.8}, 0,
  [[3.336, 4.457, 27.056, 25.543], [13.456, 29.007, 31.127, 40.0],
   [35.956, 18.672, 41.02, 23.443]],
  [1, 2, 3], 753868, 220793),
 ('Rotate', {'level': 10, 'prob': 1.0, 'center': (10, 12), 'scale': 0.8}, 2,
  [[3.336, 0.0, 27.056, 19.543], [29.056, 5.807, 46.727, 22.013]], [1, 2], 756604, 229995),
 ('Translate', {'level': 4, 'prob': 1.0, 'max_translate_offset': 50.0}, 0,
  [[25.0, 4.0, 50.0, 20.0]], [1], 752584, 207595),
 ('Translate', {'level': 4, 'prob': 1.0, 'max_translate_offset': 50.0}, 2,
  [[0.0, 4.0, 10.0, 20.0], [10.0, 25.0, 28.0, 38.0], [24.0, 2.0, 29.0, 6.0]], [1, 2, 3], 753477,
  207592),
 ('Translate',
  {'level': 10,
   'prob': 1.0,
   'direction': 'vertical',
   'max_translate_offset': 30.0,
   'min_size': 4},
  0, [[5.0, 34.0, 30.0, 40.0]], [1], 762765, 383994),
 ('Translate',
  {'level': 10,
   'prob': 1.0,
   'direction': 'vertical',
   'max_translate_offset': 30.0,
   'min_size': 4},
  2, [[30.0, 0.0, 48.0, 8.0]], [2], 762873, 384000)]


def _results():
    img = (np.arange(40 * 50 * 3).reshape(40, 50, 3) % 251).astype(np.uint8)
    boxes = np.array([[5, 4, 30, 20], [30, 25, 48, 38], [44, 2, 49, 6]], np.float32)
    polys = [[np.array([x1, y1, x2, y1, x2, y2, x1, y2], float)] for x1, y1, x2, y2 in boxes]
    return dict(img=img, img_shape=img.shape, gt_bboxes=boxes, gt_labels=np.array([1, 2, 3]),
                gt_masks=PolygonMasks(polys, 40, 50), bbox_fields=['gt_bboxes'],
                mask_fields=['gt_masks'], seg_fields=['gt_semantic_seg'],
                gt_semantic_seg=(np.arange(2000).reshape(40, 50) % 7).astype(np.uint8))


@pytest.mark.parametrize('name, kwargs, seed, boxes, labels, img_sum, seg_sum', GEO_GOLDEN)
def test_equal_mmdet_on_fixed_seeds(name, kwargs, seed, boxes, labels, img_sum, seg_sum):
    np.random.seed(seed)
    out = build_transform(dict(type=name, **kwargs))(_results())
    np.testing.assert_allclose(out['gt_bboxes'], np.reshape(boxes, (-1, 4)), atol=1e-3)
    assert out['gt_bboxes'].dtype == np.float32
    assert out['gt_labels'].tolist() == labels and len(out['gt_masks']) == len(labels)
    assert out['img'].dtype == np.uint8 and out['img'].shape == (40, 50, 3)
    assert int(out['img'].astype(np.int64).sum()) == img_sum
    assert int(out['gt_semantic_seg'].astype(np.int64).sum()) == seg_sum


@pytest.mark.parametrize('name', ['Shear', 'Rotate', 'Translate'])
def test_skipped_above_prob_and_bitmap_masks_follow(name, monkeypatch):
    t = build_transform(dict(type=name, level=10, prob=0.5))
    monkeypatch.setattr(np.random, 'rand', lambda: 0.51)
    res = _results()
    assert t(res) is res and res['img'].sum() == _results()['img'].sum()
    masks = np.zeros((3, 40, 50), np.uint8)
    for i, (x1, y1, x2, y2) in enumerate(_results()['gt_bboxes'].astype(int)):
        masks[i, y1:y2, x1:x2] = 1
    res = dict(_results(), gt_masks=BitmapMasks(masks, 40, 50))
    monkeypatch.setattr(np.random, 'rand', lambda: 0.2)  # applied, and negated
    out = t(res)
    assert isinstance(out['gt_masks'], BitmapMasks)
    assert out['gt_masks'].masks.shape == (len(out['gt_labels']), 40, 50)


@pytest.mark.parametrize('cfg, match', [
    (dict(type='Shear', level=11), r'level must be a number in \[0, 10\]'),
    (dict(type='Shear', level=3, direction='diagonal'), "direction must be 'horizontal'"),
    (dict(type='Shear', level=3, max_shear_magnitude=2), 'max_shear_magnitude'),
    (dict(type='Rotate', level=3, img_fill_val=(1, 2)), 'img_fill_val must be a number or'),
    (dict(type='Rotate', level=3, img_fill_val=300), r'img_fill_val must lie in \[0, 255\]'),
    (dict(type='Rotate', level=3, center=[1, 2]), 'center must be None'),
    (dict(type='Translate', level=3, prob=2), r'prob must be a number in \[0, 1\]'),
])
def test_bad_arguments(cfg, match):
    with pytest.raises(ValueError, match=match):
        build_transform(cfg)
