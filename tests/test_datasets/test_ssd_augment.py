"""SSD's augmentations: outputs for fixed draws by hand, the draws' order and count (a call
consumes numpy's generator as mmdet's does), distributions, and exact repeats under the
per-sample generator (resume)."""
import copy

import cv2
import numpy as np
import pytest

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.datasets.pipelines import Compose, Expand, MinIoURandomCrop, PhotoMetricDistortion
from ckptzoo.datasets.sample_seed import SeededIndex, sample_rng


class Draws:
    """Stands in for numpy's generator functions: returns the given values in order and
    records each call."""

    def __init__(self, monkeypatch, values):
        self.values, self.calls = list(values), []
        for name in ('randint', 'uniform', 'permutation', 'choice'):
            monkeypatch.setattr(np.random, name, self._fake(name))

    def _fake(self, name):
        def draw(*args, **kwargs):
            self.calls.append((name, args))
            return self.values.pop(0)
        return draw


def _results(h=20, w=30):
    img = np.arange(h * w * 3, dtype=np.uint8).reshape(h, w, 3)
    masks = np.zeros((2, h, w), np.uint8)
    masks[0, 2:8, 3:9] = 1
    masks[1, 10:18, 20:28] = 1
    return dict(img=img, img_shape=img.shape, bbox_fields=['gt_bboxes'],
                gt_bboxes=np.array([[3., 2., 9., 8.], [20., 10., 28., 18.]], np.float32),
                gt_labels=np.array([4, 7]), mask_fields=['gt_masks'],
                gt_masks=BitmapMasks(masks, h, w), seg_fields=['gt_semantic_seg'],
                gt_semantic_seg=np.ones((h, w), np.uint8))


# ------------------------------------------------------------- PhotoMetricDistortion
def test_photometric_by_hand(monkeypatch):
    img = np.array([[[10, 100, 200]]], np.uint8)
    # brightness +20; contrast after (mode 0); saturation x0.5; hue +30; contrast x2; swap
    draws = Draws(monkeypatch, [1, 20., 0, 1, 0.5, 1, 30., 1, 2., 1, np.array([2, 1, 0])])
    out = PhotoMetricDistortion()(dict(img=img.copy()))['img']
    hsv = cv2.cvtColor(img.astype(np.float32) + 20, cv2.COLOR_BGR2HSV)
    hsv[..., 1] *= 0.5
    hsv[..., 0] += 30
    expected = (cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR) * 2)[..., [2, 1, 0]]
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.float32
    assert [c[0] for c in draws.calls] == ['randint', 'uniform', 'randint', 'randint', 'uniform',
                                           'randint', 'uniform', 'randint', 'uniform', 'randint',
                                           'permutation']
    assert draws.calls[1][1] == (-32, 32) and draws.calls[4][1] == (0.5, 1.5)


def test_photometric_nothing_drawn_is_identity_and_hue_wraps(monkeypatch):
    img = np.array([[[10, 100, 200]]], np.uint8)
    Draws(monkeypatch, [0, 0, 0, 0, 0, 0])
    out = PhotoMetricDistortion()(dict(img=img.copy()))['img']
    np.testing.assert_allclose(out, img.astype(np.float32), atol=1e-3)
    # contrast first (mode 1), hue +350 wraps past 360
    Draws(monkeypatch, [0, 1, 0, 0, 1, 350., 0])
    out = PhotoMetricDistortion(hue_delta=360)(dict(img=img.copy()))['img']
    hsv = cv2.cvtColor(img.astype(np.float32), cv2.COLOR_BGR2HSV)
    assert hsv[0, 0, 0] + 350 > 360
    hsv[..., 0] += 350 - 360
    np.testing.assert_allclose(out, cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR), rtol=0, atol=1e-4)


def test_photometric_distribution():
    """About half the images get brighter by U(-32, 32) (mean shift 0, spread up to 32)."""
    np.random.seed(0)
    grey = np.full((2, 2, 3), 128, np.uint8)
    t = PhotoMetricDistortion(contrast_range=(1, 1), saturation_range=(1, 1), hue_delta=0)
    shifts = np.array([t(dict(img=grey.copy()))['img'].mean() - 128 for _ in range(2000)])
    untouched = np.abs(shifts) < 1e-3
    assert 0.45 < untouched.mean() < 0.55
    moved = shifts[~untouched]
    assert np.abs(moved).max() <= 32 and abs(moved.mean()) < 2 and moved.std() > 15


def test_photometric_single_image_only():
    with pytest.raises(ValueError, match='one image'):
        PhotoMetricDistortion()(dict(img=np.zeros((2, 2, 3), np.uint8),
                                     img_fields=['img', 'img2']))


# ---------------------------------------------------------------------------- Expand
def test_expand_by_hand(monkeypatch):
    r = _results()
    draws = Draws(monkeypatch, [0.2, 2.0, 10.6, 3.9])  # prob, ratio 2, left 10, top 3
    out = Expand(mean=(1, 2, 3), to_rgb=True, ratio_range=(1, 4), seg_ignore_label=255)(r)
    assert draws.calls == [('uniform', (0, 1)), ('uniform', (1, 4)), ('uniform', (0, 30.)),
                           ('uniform', (0, 20.))]
    assert out['img'].shape == (40, 60, 3) and out['img_shape'] == (40, 60, 3)
    np.testing.assert_array_equal(out['img'][3:23, 10:40], _results()['img'])
    assert out['img'][0, 0].tolist() == [3, 2, 1]  # the mean, BGR
    np.testing.assert_array_equal(out['gt_bboxes'], _results()['gt_bboxes'] + [10, 3, 10, 3])
    assert out['gt_masks'].masks.shape == (2, 40, 60) and out['gt_masks'].masks[0, 5, 13] == 1
    assert out['gt_semantic_seg'][0, 0] == 255 and out['gt_semantic_seg'][3, 10] == 1


def test_expand_skipped_above_prob(monkeypatch):
    r = _results()
    draws = Draws(monkeypatch, [0.7])
    assert Expand(prob=0.5)(r)['img'].shape == (20, 30, 3) and len(draws.calls) == 1


def test_expand_bad_arguments():
    with pytest.raises(ValueError, match='ratio_range'):
        Expand(ratio_range=(0.5, 2))
    with pytest.raises(ValueError, match='seg_ignore_label'):
        np.random.seed(0)
        Expand(prob=1.0)(_results())


# ------------------------------------------------------------------ MinIoURandomCrop
def test_min_iou_crop_by_hand(monkeypatch):
    """Mode 0.07 (drawn); the first try fails the aspect check (h / w = 3), the second
    ([0, 0, 10, 10]) the IoU with box 1 (0), the third, [1, 1, 28, 19], has IoU 36/486 and
    64/486 with the boxes: taken."""
    r = _results()
    draws = Draws(monkeypatch, [0.07,
                                10., 30.,                 # aspect 3: rejected
                                10., 10., 0., 0.,         # IoU 0 with box 1: rejected
                                27., 18., 1.5, 1.2])      # patch [1, 1, 28, 19]
    out = MinIoURandomCrop()(r)
    names = [c[0] for c in draws.calls]
    assert names == ['choice'] + ['uniform'] * 10
    assert draws.calls[0][1] == ((1, 0.1, 0.3, 0.5, 0.7, 0.9, 0), )
    assert draws.calls[9][1] == (0, 3.) and draws.calls[10][1] == (0, 2.)  # U(0, w - new_w)
    assert out['img'].shape == (18, 27, 3) and out['img_shape'] == (18, 27, 3)
    np.testing.assert_array_equal(out['img'], _results()['img'][1:19, 1:28])
    # both centres inside; box 1 clipped at x 28 -> 27 in the patch
    np.testing.assert_array_equal(out['gt_bboxes'], [[2., 1., 8., 7.], [19., 9., 27., 17.]])
    assert out['gt_labels'].tolist() == [4, 7] and out['gt_masks'].masks.shape == (2, 18, 27)


def test_min_iou_crop_drops_boxes_outside(monkeypatch):
    r = _results()
    # mode 0 (any IoU); patch [0, 0, 15, 12]: only box 0's centre is inside
    Draws(monkeypatch, [0., 15., 12., 0.2, 0.3])
    out = MinIoURandomCrop()(r)
    np.testing.assert_array_equal(out['gt_bboxes'], [[3., 2., 9., 8.]])
    assert out['gt_labels'].tolist() == [4] and len(out['gt_masks']) == 1
    assert out['gt_semantic_seg'].shape == (12, 15)


def test_min_iou_crop_mode_one_keeps_everything(monkeypatch):
    r = _results()
    Draws(monkeypatch, [1.])
    out = MinIoURandomCrop()(copy.deepcopy(r))
    np.testing.assert_array_equal(out['img'], r['img'])


def test_min_iou_crop_distribution():
    """With one box over the whole image, a crop's IoU with it is its share of the image: at
    least the mode drawn. Mode 1 (no crop) is drawn 1 time in 7, and again when 50 tries of a
    high mode fail."""
    np.random.seed(0)
    t = MinIoURandomCrop()
    kept, modes = 0, set()
    for _ in range(700):
        r = _results()
        r.update(gt_bboxes=np.array([[0., 0., 30., 20.]], np.float32), gt_labels=np.array([4]),
                 gt_masks=r['gt_masks'][[0]])
        out = t(r)
        if t.mode == 1:
            kept += 1
            continue
        modes.add(float(t.mode))
        h, w = out['img'].shape[:2]
        assert h * w / 600 >= t.mode - 1e-6 and 0.3 * 20 - 1 <= h and 0.3 * 30 - 1 <= w
        assert h / w >= 0.5 - 0.1 and h / w <= 2 + 0.2
    assert 700 / 7 * 0.7 < kept < 700 / 2
    assert modes == {0., 0.1, 0.3, 0.5, 0.7, 0.9}


def test_min_iou_crop_needs_bbox_fields():
    with pytest.raises(ValueError, match='bbox_fields'):
        MinIoURandomCrop()(dict(img=np.zeros((4, 4, 3), np.uint8)))


# ---------------------------------------------------------------- resume exactness
def test_draws_repeat_under_the_per_sample_generator():
    """The same SeededIndex gives the same augmentation whatever ran before (a resumed run
    draws what the uninterrupted one drew); another seed gives another one."""
    pipeline = Compose([dict(type='Expand', mean=[123.675, 116.28, 103.53], to_rgb=True,
                             ratio_range=(1, 4), seg_ignore_label=255),
                        dict(type='MinIoURandomCrop', min_ious=(0.1, 0.3, 0.5, 0.7, 0.9),
                             min_crop_size=0.3),
                        dict(type='PhotoMetricDistortion', brightness_delta=32,
                             contrast_range=(0.5, 1.5), saturation_range=(0.5, 1.5),
                             hue_delta=18)])

    def run(index):
        with sample_rng(index):
            return pipeline(_results())

    first = [run(SeededIndex(0, seed)) for seed in range(6)]
    np.random.seed(123)
    np.random.rand(17)  # the trainer's own draws in between
    again = [run(SeededIndex(0, seed)) for seed in range(6)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a['img'], b['img'])
        np.testing.assert_array_equal(a['gt_bboxes'], b['gt_bboxes'])
    shapes = {a['img'].shape for a in first}
    assert len(shapes) > 1
