import copy

import numpy as np
import pytest
import torch

from ckptzoo.datasets import collate
from ckptzoo.datasets.pipelines import (Collect, Compose, ImageToTensor,
                                        MultiScaleFlipAug, Normalize, Pad, RandomFlip, Resize)
from ckptzoo.registry import TRANSFORMS

IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)


def _results(h, w, boxes=((10, 5, 30, 25),)):
    img = np.random.default_rng(0).integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    gt = np.array(boxes, dtype=np.float32).reshape(-1, 4)
    return dict(img=img, img_shape=img.shape, ori_shape=img.shape, img_fields=['img'],
                filename='f.jpg', ori_filename='f.jpg', gt_bboxes=gt,
                gt_labels=np.arange(len(gt), dtype=np.int64), bbox_fields=['gt_bboxes'])


def test_all_registered():
    for name in ('Compose', 'LoadImageFromFile', 'LoadAnnotations', 'Resize', 'RandomFlip',
                 'Normalize', 'Pad', 'DefaultFormatBundle', 'Collect', 'ImageToTensor',
                 'MultiScaleFlipAug'):
        assert TRANSFORMS.get(name) is not None, name


def test_resize_keep_ratio_scale_and_boxes():
    # 33x50 into (100, 64): factor min(100/50, 64/33) = 1.939..; w = int(50*f + .5) = 97,
    # h = int(33*f + .5) = 64
    r = Resize(img_scale=(100, 64), keep_ratio=True)(_results(33, 50))
    assert r['img'].shape == (64, 97, 3) and r['img_shape'] == (64, 97, 3)
    assert r['pad_shape'] == (64, 97, 3)
    np.testing.assert_array_equal(r['scale_factor'],
                                  np.array([97 / 50, 64 / 33, 97 / 50, 64 / 33], np.float32))
    assert r['scale_factor'].dtype == np.float32
    np.testing.assert_allclose(r['gt_bboxes'], [[10 * 97 / 50, 5 * 64 / 33, 30 * 97 / 50,
                                                 25 * 64 / 33]], rtol=1e-6)
    # the (long, short) order of img_scale does not matter with keep_ratio
    r2 = Resize(img_scale=(64, 100), keep_ratio=True)(_results(33, 50))
    assert r2['img'].shape == (64, 97, 3)
    # portrait image: long edge is the height
    r3 = Resize(img_scale=(1000, 600), keep_ratio=True)(_results(200, 100))
    assert r3['img'].shape == (1000, 500, 3)


def test_resize_no_keep_ratio_and_clip():
    r = Resize(img_scale=(40, 60), keep_ratio=False)(_results(30, 20, [(0, 0, 25, 35)]))
    assert r['img'].shape == (60, 40, 3)
    np.testing.assert_array_equal(r['scale_factor'], [2, 2, 2, 2])
    # box beyond the image is clipped to (w, h) = (40, 60)
    np.testing.assert_array_equal(r['gt_bboxes'], [[0, 0, 40, 60]])
    r = Resize(img_scale=(40, 60), keep_ratio=False, bbox_clip_border=False)(
        _results(30, 20, [(0, 0, 25, 35)]))
    np.testing.assert_array_equal(r['gt_bboxes'], [[0, 0, 50, 70]])


def test_resize_multiscale_modes():
    np.random.seed(0)
    t = Resize(img_scale=[(100, 60), (200, 80)], multiscale_mode='range')
    for _ in range(20):
        r = t(_results(40, 40))
        long, short = r['scale']
        assert 100 <= long <= 200 and 60 <= short <= 80
        assert r['img'].shape[0] == short  # square image: limited by the short edge
    t = Resize(img_scale=[(100, 60), (200, 80)], multiscale_mode='value')
    seen = {t(_results(40, 40))['scale'] for _ in range(30)}
    assert seen == {(100, 60), (200, 80)}
    t = Resize(img_scale=(100, 60), ratio_range=(0.5, 2.0))
    for _ in range(10):
        s = t(_results(40, 40))['scale']
        assert 50 <= s[0] <= 200 and s[0] / s[1] == pytest.approx(100 / 60, rel=0.05)
    with pytest.raises(ValueError, match='multiscale_mode'):
        Resize(img_scale=(1, 2), multiscale_mode='bad')


def test_resize_multiscale_draws_as_mmdet():
    """mmdet 2.x's draws from the global numpy RNG, in its order: 'range' takes the long edge
    then the short edge (randint, bounds inclusive), 'value' one index; a seed gives the same
    scales as in mmdet. Config lists of lists are accepted."""
    scales = [[1333, 640], [1333, 800]]
    np.random.seed(7)
    expected = [(np.random.randint(1333, 1334), np.random.randint(640, 801)) for _ in range(5)]
    np.random.seed(7)
    t = Resize(img_scale=scales, multiscale_mode='range')
    got = [t(_results(40, 60))['scale'] for _ in range(5)]
    assert got == expected and len(set(got)) > 1
    values = [(1333, 640), (1333, 672), (1333, 704)]
    np.random.seed(7)
    expected = [values[np.random.randint(3)] for _ in range(6)]
    np.random.seed(7)
    t = Resize(img_scale=values, multiscale_mode='value')
    results = [t(_results(40, 60)) for _ in range(6)]
    assert [r['scale'] for r in results] == expected
    assert [r['scale_idx'] for r in results] == [values.index(s) for s in expected]
    # keep_ratio: 60x40 scaled by min(1333 / 60, short / 40)
    for r in results:
        assert r['img'].shape[0] == r['scale'][1]
    with pytest.raises(ValueError, match='exactly 2 scales'):
        Resize(img_scale=values, multiscale_mode='range')(_results(40, 60))


def test_resize_preset_scale_and_override():
    res = _results(20, 40)
    res['scale_factor'] = 1.5
    r = Resize(keep_ratio=True)(res)
    assert r['img'].shape == (30, 60, 3)
    res = Resize(img_scale=(80, 80))(_results(20, 40))
    with pytest.raises(ValueError, match='override'):
        Resize(img_scale=(40, 40))(res)
    r = Resize(img_scale=(200, 200), override=True)(res)
    assert r['img'].shape == (100, 200, 3)


def test_random_flip_boxes_and_image():
    res = _results(30, 100, [(10, 5, 30, 25)])
    img = res['img'].copy()
    r = RandomFlip(flip_ratio=1.0)(res)
    assert r['flip'] and r['flip_direction'] == 'horizontal'
    np.testing.assert_array_equal(r['img'], img[:, ::-1])
    np.testing.assert_array_equal(r['gt_bboxes'], [[70, 5, 90, 25]])  # x1' = w - x2
    r = RandomFlip(flip_ratio=1.0, direction='vertical')(_results(30, 100, [(10, 5, 30, 25)]))
    np.testing.assert_array_equal(r['gt_bboxes'], [[10, 5, 30, 25]])  # 30 - 25, 30 - 5
    r = RandomFlip(flip_ratio=1.0, direction='diagonal')(_results(30, 100, [(10, 5, 30, 24)]))
    np.testing.assert_array_equal(r['gt_bboxes'], [[70, 6, 90, 25]])
    r = RandomFlip(flip_ratio=0.0)(_results(30, 100))
    assert not r['flip'] and r['flip_direction'] is None
    np.testing.assert_array_equal(r['gt_bboxes'], [[10, 5, 30, 25]])
    # flipping twice is the identity
    t = RandomFlip(flip_ratio=1.0)
    r = t(_results(30, 100))
    r.pop('flip'), r.pop('flip_direction')
    r = t(r)
    np.testing.assert_array_equal(r['gt_bboxes'], [[10, 5, 30, 25]])
    np.random.seed(0)
    flips = [RandomFlip(flip_ratio=0.5)(_results(8, 8))['flip'] for _ in range(200)]
    assert 70 < sum(flips) < 130
    with pytest.raises(ValueError, match='flip_ratio'):
        RandomFlip(flip_ratio=1.5)


def test_normalize():
    res = _results(4, 5)
    img = res['img'].astype(np.float32)
    r = Normalize(**IMG_NORM)(res)
    expected = (img[..., ::-1] - np.array(IMG_NORM['mean'], np.float32)) / \
        np.array(IMG_NORM['std'], np.float32)
    np.testing.assert_allclose(r['img'], expected, rtol=1e-6)
    assert r['img'].dtype == np.float32 and r['img_norm_cfg']['to_rgb'] is True
    # mmdet's caffe-style configs: BGR kept, mean subtracted, std 1
    caffe = dict(mean=[103.530, 116.280, 123.675], std=[1.0, 1.0, 1.0], to_rgb=False)
    r = Normalize(**caffe)(_results(4, 5))
    np.testing.assert_allclose(r['img'], img - np.array(caffe['mean'], np.float32), rtol=1e-6)
    assert r['img_norm_cfg']['to_rgb'] is False


def test_pad():
    res = Pad(size_divisor=32)(_results(64, 97))
    assert res['img'].shape == (64, 128, 3) and res['pad_shape'] == (64, 128, 3)
    assert res['img_shape'] == (64, 97, 3)
    assert not res['img'][:, 97:].any()
    np.testing.assert_array_equal(res['img'][:, :97], _results(64, 97)['img'])
    res = Pad(size=(70, 100), pad_val=7)(_results(64, 97))
    assert res['img'].shape == (70, 100, 3) and (res['img'][64:] == 7).all()
    assert Pad(pad_to_square=True)(_results(20, 30))['img'].shape == (30, 30, 3)
    with pytest.raises(ValueError, match='exactly one'):
        Pad(size=(1, 1), size_divisor=32)


def _train_pipeline(scale):
    return Compose([
        dict(type='Resize', img_scale=scale, keep_ratio=True),
        dict(type='RandomFlip', flip_ratio=0.0),
        dict(type='Normalize', **IMG_NORM),
        dict(type='Pad', size_divisor=32),
        dict(type='DefaultFormatBundle'),
        dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels']),
    ])


def test_format_collect_and_collate():
    a = _train_pipeline((100, 64))(_results(33, 50))                    # -> 64x97, pad 64x128
    b = _train_pipeline((100, 64))(_results(60, 30, [(1, 2, 3, 4), (5, 6, 7, 8)]))  # 100x50
    assert set(a) == {'img', 'img_metas', 'gt_bboxes', 'gt_labels'}
    assert a['img'].shape == (3, 64, 128) and a['img'].dtype == torch.float32
    assert set(a['img_metas']) == {'filename', 'ori_filename', 'ori_shape', 'img_shape',
                                   'pad_shape', 'scale_factor', 'flip', 'flip_direction',
                                   'img_norm_cfg'}
    batch = collate([a, b])
    assert batch['img'].shape == (2, 3, 128, 128)  # b pads to 128x64
    assert torch.equal(batch['img'][0, :, :64, :128], a['img'])
    assert not batch['img'][0, :, 64:].any()
    assert torch.equal(batch['img'][1, :, :, :64], b['img'])
    assert not batch['img'][1, :, :, 64:].any()
    assert [m['img_shape'] for m in batch['img_metas']] == [(64, 97, 3), (100, 50, 3)]
    assert [g.shape for g in batch['gt_bboxes']] == [(1, 4), (2, 4)]
    assert batch['gt_bboxes'][0].dtype == torch.float32
    assert [g.dtype for g in batch['gt_labels']] == [torch.int64] * 2
    # size_divisor on top of the batch maximum
    assert collate([a, b], size_divisor=96)['img'].shape == (2, 3, 192, 192)


def test_collect_missing_key_names_it():
    with pytest.raises(KeyError, match='img_norm_cfg'):
        Collect(keys=['img'])(dict(img=1, filename='f', ori_filename='f', ori_shape=1,
                                   img_shape=1, pad_shape=1, scale_factor=1, flip=False,
                                   flip_direction=None))


def test_image_to_tensor():
    r = ImageToTensor(keys=['img'])(dict(img=np.zeros((4, 5, 3), np.float32)))
    assert r['img'].shape == (3, 4, 5) and r['img'].dtype == torch.float32


def _test_pipeline(**aug):
    return MultiScaleFlipAug(transforms=[
        dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),
        dict(type='Normalize', **IMG_NORM), dict(type='Pad', size_divisor=32),
        dict(type='ImageToTensor', keys=['img']), dict(type='Collect', keys=['img'])], **aug)


def test_multiscale_flip_aug_structure():
    res = _results(30, 60)
    res.pop('gt_bboxes'), res.pop('gt_labels')
    res['bbox_fields'] = []
    out = _test_pipeline(img_scale=[(120, 60), (240, 120)], flip=True)(copy.deepcopy(res))
    assert set(out) == {'img', 'img_metas'}
    assert len(out['img']) == 4 and len(out['img_metas']) == 4
    assert [m['flip'] for m in out['img_metas']] == [False, True, False, True]
    assert [m['img_shape'] for m in out['img_metas']] == [(60, 120, 3)] * 2 + [(120, 240, 3)] * 2
    # flipped before padding: compare the image area (60x120 inside the 64x128 pad)
    assert torch.equal(out['img'][1][:, :60, :120], out['img'][0][:, :60, :120].flip(-1))
    single = _test_pipeline(img_scale=(120, 60), flip=False)(copy.deepcopy(res))
    assert len(single['img']) == 1 and single['img'][0].shape == (3, 64, 128)
    # a test batch: one entry per augmentation, B images in each
    batch = collate([single, _test_pipeline(img_scale=(120, 60))(copy.deepcopy(res))])
    assert isinstance(batch['img'], list) and len(batch['img']) == 1
    assert batch['img'][0].shape == (2, 3, 64, 128)
    assert len(batch['img_metas']) == 1 and len(batch['img_metas'][0]) == 2
    assert batch['img_metas'][0][0]['scale_factor'].tolist() == [2.0] * 4
    sf = _test_pipeline(scale_factor=0.5)(copy.deepcopy(res))
    assert sf['img_metas'][0]['img_shape'] == (15, 30, 3)
    with pytest.raises(ValueError, match='exactly one'):
        _test_pipeline()


def test_compose_stops_on_none():
    calls = []
    pipe = Compose([lambda r: None, lambda r: calls.append(r)])
    assert pipe({}) is None and calls == []
    with pytest.raises(TypeError, match='callable'):
        Compose([3])


def test_load_image_bgr_rgb_and_missing_file(tmp_path):
    import cv2

    from ckptzoo.datasets.pipelines import LoadAnnotations, LoadImageFromFile
    img = np.zeros((6, 8, 3), np.uint8)
    img[..., 0] = 200  # blue in BGR
    cv2.imwrite(str(tmp_path / 'x.png'), img)
    res = dict(img_prefix=str(tmp_path), img_info=dict(filename='x.png'))
    r = LoadImageFromFile()(dict(res))
    assert r['img'].dtype == np.uint8 and r['img'].shape == (6, 8, 3)
    assert r['img'][0, 0].tolist() == [200, 0, 0] and r['ori_shape'] == (6, 8, 3)
    assert r['filename'] == str(tmp_path / 'x.png') and r['ori_filename'] == 'x.png'
    r = LoadImageFromFile(to_float32=True, channel_order='rgb')(dict(res))
    assert r['img'].dtype == np.float32 and r['img'][0, 0].tolist() == [0, 0, 200]
    with pytest.raises(FileNotFoundError, match='nope.png'):
        LoadImageFromFile()(dict(img_prefix=str(tmp_path), img_info=dict(filename='nope.png')))
    ann = dict(bboxes=np.ones((2, 4), np.float32), labels=np.array([0, 2]),
               bboxes_ignore=np.zeros((1, 4), np.float32))
    r = LoadAnnotations()(dict(ann_info=ann, bbox_fields=[]))
    assert r['bbox_fields'] == ['gt_bboxes_ignore', 'gt_bboxes']
    assert r['gt_labels'].tolist() == [0, 2] and r['gt_bboxes_ignore'].shape == (1, 4)


# ------------------------------------------------------------------------------------------
# instance masks
# ------------------------------------------------------------------------------------------
def _mask_results(masks, h=40, w=60, boxes=None):
    boxes = np.array(boxes if boxes is not None else [[0, 0, 1, 1]] * len(masks), np.float32)
    img = np.zeros((h, w, 3), np.uint8)
    return dict(img=img, img_shape=img.shape, ori_shape=img.shape, img_fields=['img'],
                img_info=dict(filename='a.jpg', height=h, width=w), bbox_fields=[],
                mask_fields=[], ann_info=dict(bboxes=boxes.reshape(-1, 4),
                                              labels=np.zeros(len(masks), np.int64),
                                              masks=masks))


def _uncompressed_rle(mask):
    flat = mask.flatten(order='F')
    counts, run, val = [], 0, 0
    for v in flat:
        if v != val:
            counts.append(run)
            run, val = 0, v
        run += 1
    counts.append(run)
    return dict(size=list(mask.shape), counts=counts)


def test_load_annotations_reads_polygons_and_rles_as_mmdet():
    import pycocotools.mask as mask_utils

    from ckptzoo.datasets.pipelines import LoadAnnotations
    from ckptzoo.core.mask import BitmapMasks, PolygonMasks
    h, w = 40, 60
    polys = [[5, 5, 20, 5, 20, 15, 5, 15], [30, 30, 40, 30, 40, 38]]
    reference = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, h, w)))
    compressed = mask_utils.encode(np.asfortranarray(reference))
    masks = [polys, _uncompressed_rle(reference), compressed,
             polys + [[1, 1, 2, 2]]]  # a 2-point polygon beside valid ones: dropped (mmdet)
    r = LoadAnnotations(with_mask=True)(_mask_results(masks))
    assert isinstance(r['gt_masks'], BitmapMasks) and r['mask_fields'] == ['gt_masks']
    assert r['gt_masks'].masks.shape == (4, h, w) and r['gt_masks'].masks.dtype == np.uint8
    for m in r['gt_masks'].masks:
        np.testing.assert_array_equal(m, reference)
    p = LoadAnnotations(with_mask=True, poly2mask=False)(_mask_results([polys, masks[3]]))
    assert isinstance(p['gt_masks'], PolygonMasks)
    assert [len(obj) for obj in p['gt_masks'].masks] == [2, 2]
    np.testing.assert_array_equal(p['gt_masks'].to_ndarray()[1], reference.astype(bool))
    assert 'with_mask=True' in repr(LoadAnnotations(with_mask=True))


@pytest.mark.parametrize('masks, message', [
    ([dict(size=[30, 60], counts=[1800])],
     r"image 'a.jpg', instance 0: the RLE mask has size \[height, width\] = \[30, 60\], the "
     r"image is \[40, 60\]"),
    ([[[1, 1, 5, 5]]], r"instance 0: no polygon of 3 or more points \(coordinates per "
                       r"polygon: \[4\]\)"),
    ([[[1, 1, 5, 5, 9]]], 'instance 0: polygon 0 has an odd number of coordinates'),
    ([dict(size=[40, 60], counts=[10, 5])], 'counts sum to 15, not to the 40 x 60'),
    (None, "image 'a.jpg' has no instance masks"),
])
def test_load_annotations_refuses_bad_masks_naming_the_image(masks, message):
    from ckptzoo.datasets.pipelines import LoadAnnotations
    results = _mask_results(masks or [])
    if masks is None:
        results['ann_info'].pop('masks')
    with pytest.raises(ValueError, match=message):
        LoadAnnotations(with_mask=True)(results)


def test_load_annotations_refuses_rle_polygons_count_and_size_mismatches():
    from ckptzoo.datasets.pipelines import LoadAnnotations
    rle = _uncompressed_rle(np.zeros((40, 60), np.uint8))
    with pytest.raises(ValueError, match='poly2mask=False keeps polygons only'):
        LoadAnnotations(with_mask=True, poly2mask=False)(_mask_results([rle]))
    with pytest.raises(ValueError, match='has 1 masks for 2 gt boxes'):
        LoadAnnotations(with_mask=True)(_mask_results([rle], boxes=[[0, 0, 1, 1]] * 2))
    results = _mask_results([rle])
    results['img'] = np.zeros((41, 60, 3), np.uint8)
    with pytest.raises(ValueError, match=r'the image file is 41 x 60 .* says 40 x 60'):
        LoadAnnotations(with_mask=True)(results)


def test_an_empty_mask_is_kept_and_warned_about_once(monkeypatch):
    from ckptzoo.datasets.pipelines import LoadAnnotations, loading
    monkeypatch.setattr(loading, '_empty_warned', [])
    outside = [[100, 100, 120, 100, 120, 120]]  # beyond the 40 x 60 image
    with pytest.warns(UserWarning, match=r"image 'a.jpg': instance mask\(s\) \[0\] are empty"):
        r = LoadAnnotations(with_mask=True)(_mask_results([outside]))
    assert len(r['gt_masks']) == 1 and r['gt_masks'].areas.tolist() == [0]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        LoadAnnotations(with_mask=True)(_mask_results([outside]))  # once per process


def _box_mask_results(h, w, boxes):
    """Rectangle masks filling integer boxes (bitmaps) and the same rectangles as polygons."""
    polys = [[[x1, y1, x2, y1, x2, y2, x1, y2]] for x1, y1, x2, y2 in boxes]
    return _mask_results(polys, h, w, boxes)


@pytest.mark.parametrize('poly2mask', [True, False])
@pytest.mark.parametrize('keep_ratio', [True, False])
def test_masks_follow_resize_flip_and_pad(poly2mask, keep_ratio):
    """Through Resize, RandomFlip and Pad each mask stays on its box: the box of its pixels is
    the transformed gt box (to a pixel), its shape the padded image's."""
    from ckptzoo.datasets.pipelines import LoadAnnotations
    boxes = [[4, 6, 20, 18], [30, 2, 58, 30]]
    results = LoadAnnotations(with_mask=True, poly2mask=poly2mask)(
        _box_mask_results(40, 60, boxes))
    results['gt_bboxes'] = np.array(boxes, np.float32)
    results['bbox_fields'] = ['gt_bboxes']
    for t in (Resize(img_scale=(90, 70), keep_ratio=keep_ratio),
              RandomFlip(flip_ratio=1.0, direction='diagonal'), Pad(size_divisor=32)):
        results = t(results)
    masks = results['gt_masks']
    assert (masks.height, masks.width) == results['pad_shape'][:2] == \
        ((64, 96) if keep_ratio else (96, 96))  # 60 x 40 -> 90 x 60 | 90 x 70, padded
    bitmaps = masks.to_ndarray().astype(bool)
    h, w = results['img_shape'][:2]
    assert not bitmaps[:, h:].any() and not bitmaps[:, :, w:].any()  # padding is 0
    for bitmap, box in zip(bitmaps, results['gt_bboxes']):
        ys, xs = np.nonzero(bitmap)
        np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box,
                                   atol=1.01)


def test_format_bundle_and_collate_keep_masks_per_image_on_the_cpu():
    from ckptzoo.datasets.pipelines import DefaultFormatBundle, LoadAnnotations
    from ckptzoo.runner.utils import move_to_device
    from ckptzoo.core.mask import BitmapMasks
    samples = []
    for boxes in ([[4, 6, 20, 18]], [[4, 6, 20, 18], [30, 2, 58, 30]]):
        r = LoadAnnotations(with_mask=True)(_box_mask_results(40, 60, boxes))
        r['gt_bboxes'] = np.array(boxes, np.float32)
        r = DefaultFormatBundle()(r)
        samples.append(Collect(keys=['img', 'gt_bboxes', 'gt_masks'],
                               meta_keys=('img_shape', ))(r))
    assert isinstance(samples[0]['gt_masks'], BitmapMasks)
    batch = move_to_device(collate(samples), 'cpu')
    assert [len(m) for m in batch['gt_masks']] == [1, 2]
    assert all(isinstance(m, BitmapMasks) for m in batch['gt_masks'])
