"""``AutoAugment``: mmdet 2.28.2's outputs on fixed seeds (DETR's two policies, ``Resize`` ->
``RandomCrop`` -> ``Resize(override=True)`` included), the policy draw, ``None`` passed on,
bad policies refused.

Aligned draws: the policy is one ``randint(0, len(policies))`` of numpy's global generator
(what mmdet's ``np.random.choice(self.transforms)`` draws), then the policy's transforms draw
as mmdet's (``Resize``'s ``randint`` over its scales, ``RandomCrop``'s). ``AUTO_GOLDEN`` was
recorded from mmdet 2.28.2's ``AutoAugment`` (``np.random.seed(s)``, s = 0..7, on
``_results()``; boxes rounded to 4 places); a wider check (1200 random samples, three
policies, masks and semantic maps) found no difference at all, generator states included.
"""
import numpy as np
import pytest

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.datasets.pipelines import AutoAugment, Compose
from ckptzoo.registry import build_transform

POLICIES = [
    [dict(type='Resize', img_scale=[(40, 100), (50, 100)], multiscale_mode='value',
          keep_ratio=True)],
    [dict(type='Resize', img_scale=[(30, 100), (45, 100)], multiscale_mode='value',
          keep_ratio=True),
     dict(type='RandomCrop', crop_type='absolute_range', crop_size=(20, 35),
          allow_negative_crop=True),
     dict(type='Resize', img_scale=[(40, 100), (50, 100)], multiscale_mode='value',
          override=True, keep_ratio=True)]]

AUTO_GOLDEN = [((50, 67, 3), (50, 100), [0.8375, 0.833333, 0.8375, 0.833333],
  [[4.1875, 3.3333, 25.125, 16.6667], [33.5, 25.0, 65.325, 48.3333],
   [50.25, 1.6667, 58.625, 10.0]]),
 ((57, 50, 3), (50, 100), [1.785714, 1.78125, 1.785714, 1.78125],
  [[0.0, 0.0, 20.5357, 10.6875], [33.9286, 24.0469, 50.0, 57.0]]),
 ((50, 67, 3), (50, 100), [0.8375, 0.833333, 0.8375, 0.833333],
  [[4.1875, 3.3333, 25.125, 16.6667], [33.5, 25.0, 65.325, 48.3333],
   [50.25, 1.6667, 58.625, 10.0]]),
 ((40, 53, 3), (40, 100), [0.6625, 0.666667, 0.6625, 0.666667],
  [[3.3125, 2.6667, 19.875, 13.3333], [26.5, 20.0, 51.675, 38.6667],
   [39.75, 1.3333, 46.375, 8.0]]),
 ((40, 53, 3), (40, 100), [0.6625, 0.666667, 0.6625, 0.666667],
  [[3.3125, 2.6667, 19.875, 13.3333], [26.5, 20.0, 51.675, 38.6667],
   [39.75, 1.3333, 46.375, 8.0]]),
 ((40, 40, 3), (40, 100), [1.538462, 1.538462, 1.538462, 1.538462],
  [[0.0, 3.0769, 9.2308, 15.3846], [16.9231, 23.0769, 40.0, 40.0],
   [32.3077, 1.5385, 40.0, 9.2308]]),
 ((50, 67, 3), (50, 100), [0.8375, 0.833333, 0.8375, 0.833333],
  [[4.1875, 3.3333, 25.125, 16.6667], [33.5, 25.0, 65.325, 48.3333],
   [50.25, 1.6667, 58.625, 10.0]]),
 ((56, 50, 3), (50, 100), [1.923077, 1.931034, 1.923077, 1.931034],
  [[0.0, 1.931, 23.0769, 17.3793], [32.6923, 27.0345, 50.0, 54.069]])]


def _results(h=60, w=80):
    img = np.arange(h * w * 3, dtype=np.float32).reshape(h, w, 3)
    boxes = np.array([[5, 4, 30, 20], [40, 30, 78, 58], [60, 2, 70, 12]], np.float32)
    masks = np.zeros((3, h, w), np.uint8)
    for i, (x1, y1, x2, y2) in enumerate(boxes.astype(int)):
        masks[i, y1 + 1:y2 - 1, x1 + 2:x2 - 1] = 1
    return dict(img=img, img_shape=img.shape, gt_bboxes=boxes, gt_labels=np.array([1, 2, 3]),
                gt_masks=BitmapMasks(masks, h, w), bbox_fields=['gt_bboxes'],
                mask_fields=['gt_masks'], seg_fields=['gt_semantic_seg'],
                gt_semantic_seg=np.arange(h * w).reshape(h, w))


def test_equals_mmdet_on_fixed_seeds():
    t = build_transform(dict(type='AutoAugment', policies=POLICIES))
    for seed, (shape, scale, factor, boxes) in enumerate(AUTO_GOLDEN):
        np.random.seed(seed)
        out = t(_results())
        assert out['img_shape'] == shape and out['img'].shape == shape
        assert out['gt_semantic_seg'].shape == shape[:2]
        assert out['gt_masks'].masks.shape == (len(boxes), *shape[:2])
        assert out['scale'] == scale
        np.testing.assert_allclose(out['scale_factor'], factor, atol=1e-6)
        np.testing.assert_allclose(out['gt_bboxes'], np.reshape(boxes, (-1, 4)), atol=1e-4)


def test_policy_drawn_uniformly_first(monkeypatch):
    calls = []
    monkeypatch.setattr(np.random, 'choice', lambda a: calls.append(a) or 1)
    out = AutoAugment([[dict(type='Resize', img_scale=(40, 40), keep_ratio=False)],
                       [dict(type='Resize', img_scale=(20, 30), keep_ratio=False)]])(_results())
    assert calls == [2] and out['img_shape'] == (30, 20, 3)
    np.random.seed(0)
    t = AutoAugment([[dict(type='Resize', img_scale=(s, s), keep_ratio=False)]
                     for s in (10, 20, 30)])
    monkeypatch.undo()
    drawn = [t(_results())['img_shape'][0] for _ in range(600)]
    counts = np.bincount(drawn)[[10, 20, 30]]
    assert counts.sum() == 600 and counts.min() > 150


def test_override_resizes_again():
    """A second ``Resize`` in a policy needs ``override=True`` (mmdet's refusal otherwise)."""
    twice = [dict(type='Resize', img_scale=(40, 40), keep_ratio=False),
             dict(type='Resize', img_scale=(20, 30), keep_ratio=False, override=True)]
    out = AutoAugment([twice])(_results())
    assert out['img_shape'] == (30, 20, 3) and out['scale'] == (20, 30)
    np.testing.assert_allclose(out['scale_factor'], [0.5, 0.75, 0.5, 0.75])
    twice[1]['override'] = False
    with pytest.raises(ValueError, match='override=True'):
        AutoAugment([twice])(_results())


def test_none_from_a_policy_is_passed_on(monkeypatch):
    monkeypatch.setattr(np.random, 'randint', lambda lo, hi: 0)
    res = _results()
    res['gt_bboxes'] = np.array([[70, 50, 78, 58]], np.float32)
    res['gt_labels'] = np.array([1])
    res['gt_masks'] = res['gt_masks'][[0]]
    crop = [[dict(type='RandomCrop', crop_size=(30, 40))]]
    assert Compose([dict(type='AutoAugment', policies=crop)])(res) is None


def test_policies_are_copied():
    policies = [[dict(type='Resize', img_scale=(40, 40))]]
    t = AutoAugment(policies)
    policies[0][0]['img_scale'] = (1, 1)
    assert t.policies[0][0]['img_scale'] == (40, 40) and 'AutoAugment(policies=' in repr(t)


@pytest.mark.parametrize('policies, match', [
    ([], 'non-empty list of policies'),
    (dict(type='Resize'), 'non-empty list of policies'),
    ([dict(type='Resize', img_scale=(4, 4))], r'policies\[0\] must be a non-empty list'),
    ([[]], r'policies\[0\] must be a non-empty list'),
    ([[dict(type='Resize', img_scale=(4, 4))], ['Resize']], r"policies\[1\] holds 'Resize'"),
    ([[dict(img_scale=(4, 4))]], "dict with a 'type'"),
])
def test_bad_policies(policies, match):
    with pytest.raises(ValueError, match=match):
        AutoAugment(policies)


def test_unknown_transform_in_a_policy():
    with pytest.raises(KeyError, match='NoSuchTransform'):
        AutoAugment([[dict(type='NoSuchTransform')]])


# ------------------------------------------------------------ the photometric steps
_IMG = np.array([[[10, 200, 30], [255, 0, 128], [90, 90, 90]],
                 [[0, 0, 0], [40, 80, 160], [250, 250, 5]]], np.uint8)
# recorded from mmdet 2.28.2 (mmcv 1.7.2's cv2 backend), prob=1; a wider check (800 random
# images, uint8 and float32, levels 0..10, fixed seeds) found no difference at all
PHOTO_GOLDEN = [
    ('ColorTransform', {'level': 8}, [[[0, 239, 0], [255, 0, 161], [90, 90, 90]],
                                      [[0, 0, 0], [8, 70, 193], [255, 255, 0]]]),
    ('BrightnessTransform', {'level': 7}, [[[13, 255, 40], [255, 0, 174], [122, 122, 122]],
                                           [[0, 0, 0], [54, 108, 217], [255, 255, 6]]]),
    ('ContrastTransform', {'level': 2}, [[[55, 142, 64], [168, 50, 109], [92, 92, 92]],
                                         [[50, 50, 50], [69, 87, 124], [165, 165, 53]]]),
]


@pytest.mark.parametrize('name, kwargs, expected', PHOTO_GOLDEN)
def test_photometric_equal_mmdet(name, kwargs, expected):
    t = build_transform(dict(type=name, prob=1.0, **kwargs))
    out = t(dict(img=_IMG.copy(), gt_bboxes=np.ones((1, 4), np.float32)))
    assert out['img'].dtype == np.uint8 and out['img'].tolist() == expected
    assert out['gt_bboxes'].tolist() == [[1, 1, 1, 1]]


def test_equalize_equals_mmdet():
    big = (np.arange(600).reshape(20, 10, 3) * 7 % 97).astype(np.uint8)
    out = build_transform(dict(type='EqualizeTransform', prob=1.0))(dict(img=big))['img']
    assert int(out.astype(np.int64).sum()) == 28619
    assert out[0, :6, 0].tolist() == [0, 21, 42, 63, 84, 8]
    assert out[5, :6, 2].tolist() == [94, 18, 39, 60, 81, 5]
    # too few distinct values: unchanged (PIL's rule)
    assert build_transform(dict(type='EqualizeTransform', prob=1.0))(
        dict(img=_IMG.copy()))['img'].tolist() == _IMG.tolist()
    with pytest.raises(TypeError, match='integer'):
        build_transform(dict(type='EqualizeTransform', prob=1.0))(
            dict(img=big.astype(np.float32)))


@pytest.mark.parametrize('name', ['ColorTransform', 'BrightnessTransform', 'ContrastTransform',
                                  'EqualizeTransform'])
def test_photometric_prob_is_one_rand_draw(name, monkeypatch):
    kwargs = {} if name == 'EqualizeTransform' else dict(level=10)
    t = build_transform(dict(type=name, prob=0.4, **kwargs))
    big = (np.arange(4800).reshape(40, 40, 3) * 7 % 97 // 4).astype(np.uint8)  # dark
    monkeypatch.setattr(np.random, 'rand', lambda: 0.41)  # > prob: untouched
    assert t(dict(img=big.copy()))['img'].tolist() == big.tolist()
    monkeypatch.setattr(np.random, 'rand', lambda: 0.4)  # <= prob: applied
    assert t(dict(img=big.copy()))['img'].tolist() != big.tolist()


@pytest.mark.parametrize('cfg, match', [
    (dict(type='ColorTransform', level=11), r'level must be a number in \[0, 10\]'),
    (dict(type='BrightnessTransform', level='high'), 'level must be a number'),
    (dict(type='ContrastTransform', level=3, prob=1.5), r'prob must be a number in \[0, 1\]'),
    (dict(type='EqualizeTransform', prob=-0.1), 'prob must be a number'),
])
def test_photometric_bad_arguments(cfg, match):
    with pytest.raises(ValueError, match=match):
        build_transform(cfg)
