"""CopyPaste (mmdet 2.x simple copy-paste): a case computed by hand, the occlusion thresholds
at their edges, the selection's draws, empty images, boxes as masks, the fixes over mmdet,
bad arguments and inputs, and the planner's bound on the box count."""
import os.path as osp

import numpy as np
import pytest

from ckptzoo.core.mask.structures import BitmapMasks, PolygonMasks
from ckptzoo.datasets import build_dataset, generate_coco
from ckptzoo.datasets.pipelines import CopyPaste
from ckptzoo.registry import build_transform

H = W = 10


def _mask(x1, y1, x2, y2):
    m = np.zeros((H, W), np.uint8)
    m[y1:y2, x1:x2] = 1
    return m


def _item(value, rects, labels, boxes=None, masks=True):
    """An ``H x W`` image of ``value`` with one rectangle mask per object; the boxes are the
    rectangles unless given."""
    boxes = np.array(rects if boxes is None else boxes, np.float32).reshape(-1, 4)
    res = dict(img=np.full((H, W, 3), value, np.uint8), img_shape=(H, W, 3),
               gt_bboxes=boxes, gt_labels=np.array(labels, np.int64),
               bbox_fields=['gt_bboxes'])
    if masks:
        m = np.stack([_mask(*r) for r in rects]) if rects else np.zeros((0, H, W), np.uint8)
        res['gt_masks'] = BitmapMasks(m, H, W)
    return res


def _with_partner(dst, src):
    dst['mix_results'] = [src]
    return dst


def test_a_case_by_hand():
    # the partner's object covers the columns x >= 6; this image has
    #   a: x 0-4, y 0-4 (untouched: kept, box unchanged)
    #   b: x 5-9, y 5-9 -> only x = 5 is left (5 px, box side moved by 4): dropped
    #   d: x 2-9, y 6-9 -> x 2-5 left (16 px > 10): kept, box recomputed to [2, 6, 6, 10]
    dst = _item(10, [(0, 0, 5, 5), (5, 5, 10, 10), (2, 6, 10, 10)], [1, 2, 3])
    src = _item(200, [(6, 0, 10, 10)], [7])
    out = CopyPaste(bbox_occluded_thr=1, mask_occluded_thr=10, selected=False)(
        _with_partner(dst, src))
    img = out['img'][..., 0]
    assert out['img'].dtype == np.uint8 and out['img'].shape == (H, W, 3)
    assert (img[:, 6:] == 200).all() and (img[:, :6] == 10).all()
    np.testing.assert_array_equal(out['gt_bboxes'], [[0, 0, 5, 5], [2, 6, 6, 10], [6, 0, 10, 10]])
    assert out['gt_bboxes'].dtype == np.float32
    assert out['gt_labels'].tolist() == [1, 3, 7]
    assert isinstance(out['gt_masks'], BitmapMasks)
    np.testing.assert_array_equal(out['gt_masks'].masks, np.stack(
        [_mask(0, 0, 5, 5), _mask(2, 6, 6, 10), _mask(6, 0, 10, 10)]))


@pytest.mark.parametrize('area, kept', [(10, False), (11, True)])
def test_the_mask_threshold_is_strict(area, kept):
    # the partner covers all but the first `area` pixels of row 0 of a full-width object:
    # its box moves by far more than bbox_occluded_thr, so only the area decides
    dst = _item(0, [(0, 0, W, 3)], [1])
    cover = np.ones((H, W), np.uint8)
    cover.reshape(-1)[:area] = 0
    src = _item(1, [(0, 0, W, H)], [2])
    src['gt_masks'] = BitmapMasks(cover[None], H, W)
    out = CopyPaste(bbox_occluded_thr=0, mask_occluded_thr=10, selected=False)(
        _with_partner(dst, src))
    assert out['gt_labels'].tolist() == ([1, 2] if kept else [2])


@pytest.mark.parametrize('thr, kept', [(2, True), (1, False)])
def test_the_box_threshold_is_inclusive(thr, kept):
    # x 8-9 of a 0-9 object covered: its box's x2 moves by exactly 2, 16 px stay
    dst = _item(0, [(0, 0, W, 2)], [1])
    src = _item(1, [(8, 5, 10, 10), (8, 0, 10, 2)], [2, 3])
    out = CopyPaste(bbox_occluded_thr=thr, mask_occluded_thr=300, selected=False)(
        _with_partner(dst, src))
    assert out['gt_labels'].tolist() == ([1, 2, 3] if kept else [2, 3])
    if kept:
        np.testing.assert_array_equal(out['gt_bboxes'][0], [0, 0, 8, 2])


def test_a_fully_covered_object_is_dropped_even_near_the_corner():
    """mmdet compared the empty mask's [0, 0, 0, 0] box with the old one and kept an object
    within bbox_occluded_thr px of the top-left corner with an empty mask; we drop it."""
    dst = _item(0, [(0, 0, 3, 3), (4, 4, 8, 8)], [1, 2])
    src = _item(1, [(0, 0, W, H)], [5])
    out = CopyPaste(selected=False)(_with_partner(dst, src))
    assert out['gt_labels'].tolist() == [5]
    assert (out['img'] == 1).all()
    assert out['gt_masks'].masks.any(axis=(1, 2)).all()


def test_selection_draws_as_mmdet():
    """A count uniform in [0, min(n + 1, max_num_pasted)), then that many distinct objects
    (numpy's randint then choice without replacement, from the global generator)."""
    rects = [(i, 0, i + 1, 1) for i in range(6)]  # disjoint one-pixel objects
    seen_counts = set()
    for max_num_pasted in (1, 3, 100):
        for seed in range(40):
            src = _item(1, rects, list(range(6)))
            dst = _with_partner(_item(0, [(0, 5, 10, 10)], [9]), src)
            np.random.seed(seed)
            count = np.random.randint(0, min(6 + 1, max_num_pasted))
            chosen = np.random.choice(6, size=count, replace=False)
            np.random.seed(seed)
            out = CopyPaste(max_num_pasted=max_num_pasted)(dst)
            assert out['gt_labels'].tolist() == [9] + chosen.tolist()
            assert len(set(out['gt_labels'].tolist())) == len(out['gt_labels'])
            assert count <= min(6, max_num_pasted - 1)
            seen_counts.add((max_num_pasted, count))
    assert {c for m, c in seen_counts if m == 1} == {0}  # max_num_pasted=1 never pastes
    assert {c for m, c in seen_counts if m == 3} == {0, 1, 2}
    assert max(c for m, c in seen_counts if m == 100) == 6


def test_nothing_to_paste_leaves_the_sample():
    dst = _item(3, [(0, 0, 4, 4)], [1])
    img = dst['img']
    out = CopyPaste(selected=False)(_with_partner(dst, _item(9, [], [])))
    assert out['img'] is img and out['gt_labels'].tolist() == [1]
    np.testing.assert_array_equal(out['gt_bboxes'], [[0, 0, 4, 4]])
    assert len(out['gt_masks']) == 1
    np.random.seed(0)  # selected with an empty partner: a count of 0 (one draw)
    out = CopyPaste()(_with_partner(_item(3, [], []), _item(9, [], [])))
    assert len(out['gt_bboxes']) == 0 and len(out['gt_masks']) == 0


def test_an_image_without_objects_gets_the_pasted_ones():
    src = _item(9, [(1, 1, 4, 4), (5, 5, 9, 9)], [4, 5])
    out = CopyPaste(selected=False)(_with_partner(_item(3, [], []), src))
    assert out['gt_labels'].tolist() == [4, 5]
    np.testing.assert_array_equal(out['gt_bboxes'], [[1, 1, 4, 4], [5, 5, 9, 9]])
    assert out['gt_masks'].masks.sum() == 9 + 16


def test_boxes_as_masks_for_that_call_only():
    """Without gt_masks the boxes (int() of each side) are the masks and the output has no
    gt_masks (as mmdet's); a later sample with masks keeps them (mmdet's flag stuck)."""
    t = CopyPaste(selected=False, mask_occluded_thr=0)
    dst = _item(0, [(0, 0, 5, 5)], [1], boxes=[[0.2, 0.7, 5.9, 5.5]], masks=False)
    src = _item(1, [(3, 3, 8, 8)], [2], boxes=[[3.5, 3.0, 8.0, 8.9]], masks=False)
    out = t(_with_partner(dst, src))
    assert 'gt_masks' not in out
    # mask of the first: x 0-4, y 0-4; the pasted one: x 3-7, y 3-7
    np.testing.assert_array_equal(out['gt_bboxes'],
                                  np.float32([[0, 0, 5, 5], [3.5, 3.0, 8.0, 8.9]]))
    assert (out['img'][3:8, 3:8] == 1).all() and out['img'][8:, :].max() == 0
    later = t(_with_partner(_item(0, [(0, 0, 5, 5)], [1]), _item(1, [(6, 6, 9, 9)], [2])))
    assert len(later['gt_masks']) == 2


def test_get_indexes_draws_one_partner():
    np.random.seed(0)
    picks = [CopyPaste().get_indexes(range(5)) for _ in range(200)]
    assert all(isinstance(p, int) for p in picks) and set(picks) == set(range(5))


def test_bad_input_is_refused_with_what_is_missing():
    dst = _item(0, [(0, 0, 4, 4)], [1])
    with pytest.raises(ValueError, match=r'results\["mix_results"\].*no "mix_results"'):
        CopyPaste()(dst)
    dst['mix_results'] = [_item(1, [], []), _item(1, [], [])]
    with pytest.raises(ValueError, match='exactly one partner image.*got 2'):
        CopyPaste()(dst)
    other = _item(1, [(0, 0, 4, 4)], [2])
    other['img'] = np.zeros((H, W + 2, 3), np.uint8)
    with pytest.raises(ValueError, match=r'one size: this image is \(10, 10, 3\).*'
                                         r'the partner \(10, 12, 3\)'):
        CopyPaste(selected=False)(_with_partner(_item(0, [(0, 0, 4, 4)], [1]), other))
    poly = _item(0, [(0, 0, 4, 4)], [1])
    poly['gt_masks'] = PolygonMasks([[np.array([0., 0., 4., 0., 4., 4.])]], H, W)
    with pytest.raises(TypeError, match='bitmap masks .*poly2mask=True.*PolygonMasks'):
        CopyPaste()(_with_partner(poly, _item(1, [(0, 0, 4, 4)], [2])))
    bare = _item(0, [], [], masks=False)
    bare.pop('gt_bboxes')
    with pytest.raises(KeyError, match='"gt_masks" or "gt_bboxes"'):
        CopyPaste()(_with_partner(bare, _item(1, [], [])))


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(max_num_pasted=-1), ValueError, 'max_num_pasted must be a non-negative int, got -1'),
    (dict(max_num_pasted=2.5), ValueError, 'max_num_pasted must be a non-negative int'),
    (dict(max_num_pasted=0), ValueError, 'max_num_pasted must be at least 1 with selected'),
    (dict(bbox_occluded_thr=-1), ValueError, 'bbox_occluded_thr must be a non-negative'),
    (dict(mask_occluded_thr='300'), ValueError, 'mask_occluded_thr must be a non-negative'),
    (dict(selected='yes'), TypeError, 'selected must be a bool'),
    (dict(max_pasted=3), TypeError, "unexpected keyword argument 'max_pasted'"),
])
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_transform(dict(type='CopyPaste', **kwargs))


def test_arguments_and_defaults_are_mmdets():
    t = build_transform(dict(type='CopyPaste'))
    assert (t.max_num_pasted, t.bbox_occluded_thr, t.mask_occluded_thr, t.selected) == \
        (100, 10, 300, True)
    assert CopyPaste(max_num_pasted=0, selected=False).max_num_pasted == 0  # never drawn
    assert 'max_num_pasted=100' in repr(t)


def test_the_planners_box_bound(tmp_path):
    """A MultiImageMixDataset with CopyPaste: the batch shapes are its dataset pipeline's
    bound (CopyPaste keeps the size) and an item holds at most its own boxes and
    max_num_pasted - 1 of the partner's."""
    from mmengine.config import Config

    from ckptzoo.datasets.batch_shapes import loader_shapes, pipeline_bound
    root = generate_coco(str(tmp_path / 'coco'), num_train=6, num_val=1,
                         img_size=((48, 80), (48, 80)), max_objects=4)
    load = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True,
                                                 with_mask=True),
            dict(type='Resize', img_scale=(64, 64), ratio_range=(0.8, 1.25),
                 multiscale_mode='range', keep_ratio=True),
            dict(type='RandomCrop', crop_type='absolute_range', crop_size=(64, 64),
                 recompute_bbox=True, allow_negative_crop=True),
            dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-2, 1e-2)),
            dict(type='RandomFlip', flip_ratio=0.5), dict(type='Pad', size=(64, 64))]
    outer = [dict(type='CopyPaste', max_num_pasted=3), dict(type='DefaultFormatBundle'),
             dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks'])]
    train = dict(type='MultiImageMixDataset', pipeline=outer, dataset=dict(
        type='CocoDataset', ann_file=osp.join(root, 'annotations', 'instances_train2017.json'),
        img_prefix=osp.join(root, 'train2017'), classes=('circle', 'square', 'triangle'),
        pipeline=load))
    dataset = build_dataset(train)
    cfg = Config(dict(data=dict(train=train), seed=0))
    assert pipeline_bound(cfg) == (64, 64)
    shapes = loader_shapes(cfg, dataset, 2)
    assert [g.worst for g in shapes.groups] == [(64, 64)] * len(shapes.groups)
    counts = [len(dataset.get_ann_info(i)['bboxes']) for i in range(len(dataset))]
    assert max(g.max_boxes_per_image for g in shapes.groups) == \
        max(counts) + min(max(counts), 2)
    np.random.seed(0)
    for i in range(len(dataset)):
        item = dataset[i]
        assert item['img'].data.shape[1:] == (64, 64)
        assert len(item['gt_bboxes'].data) <= max(counts) + min(max(counts), 2)
