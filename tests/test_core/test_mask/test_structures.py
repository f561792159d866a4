"""BitmapMasks / PolygonMasks: mmdet 2.28.2's geometry, indexing, targets and rasterizing."""
import numpy as np
import pycocotools.mask as mask_utils
import pytest
import torch

from ckptzoo.core.mask import (BitmapMasks, PolygonMasks, bitmap_to_polygon, poly2mask,
                                polygon_to_bitmap)


def _rect(h, w, x1, y1, x2, y2):
    m = np.zeros((h, w), dtype=np.uint8)
    m[y1:y2, x1:x2] = 1
    return m


def _bitmaps():
    return BitmapMasks([_rect(20, 30, 2, 3, 12, 9), _rect(20, 30, 20, 10, 30, 20)], 20, 30)


def _square_poly(x1, y1, x2, y2):
    return [np.array([x1, y1, x2, y1, x2, y2, x1, y2], dtype=np.float64)]


def test_bitmap_basics_and_indexing():
    m = _bitmaps()
    assert len(m) == 2 and (m.height, m.width) == (20, 30)
    assert repr(m) == 'BitmapMasks(num_masks=2, height=20, width=30)'
    assert m.areas.tolist() == [60, 100]
    assert m[1].masks.shape == (1, 20, 30) and np.array_equal(m[1].masks[0], m.masks[1])
    assert len(m[np.array([True, False])]) == 1 and len(m[[1, 0, 1]]) == 3
    assert len(m[torch.tensor([1, 1])]) == 2
    assert [a.shape for a in m] == [(20, 30)] * 2
    assert m.to_ndarray() is m.masks
    t = m.to_tensor(torch.float32, 'cpu')
    assert t.dtype == torch.float32 and t.shape == (2, 20, 30)
    assert m.get_bboxes().tolist() == [[2, 3, 12, 9], [20, 10, 30, 20]]
    empty = BitmapMasks([], 20, 30)
    assert empty.masks.shape == (0, 20, 30) and empty.masks.dtype == np.uint8


def test_bitmap_constructor_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match='do not match'):
        BitmapMasks(np.zeros((2, 20, 31), np.uint8), 20, 30)
    with pytest.raises(TypeError, match='ndarray'):
        BitmapMasks([[0, 1]], 1, 2)


def test_bitmap_rescale_resize_pad_flip():
    m = _bitmaps()
    r = m.rescale((60, 40))  # long edge 30 -> 60, short 20 -> 40: x2
    assert (r.height, r.width) == (40, 60) and r.areas.tolist() == [240, 400]
    assert np.array_equal(r.masks[0], _rect(40, 60, 4, 6, 24, 18))
    z = m.resize((10, 60))  # to exactly (h, w), nearest
    assert (z.height, z.width) == (10, 60) and z.masks.dtype == np.uint8
    assert set(np.unique(z.masks)) <= {0, 1}
    p = m.pad((32, 32), pad_val=0)
    assert p.masks.shape == (2, 32, 32) and np.array_equal(p.masks[:, :20, :30], m.masks)
    assert not p.masks[:, 20:].any() and not p.masks[:, :, 30:].any()
    assert np.array_equal(m.flip('horizontal').masks[0], _rect(20, 30, 18, 3, 28, 9))
    assert np.array_equal(m.flip('vertical').masks[0], _rect(20, 30, 2, 11, 12, 17))
    assert np.array_equal(m.flip('diagonal').masks[0], _rect(20, 30, 18, 11, 28, 17))
    with pytest.raises(ValueError, match='flip_direction'):
        m.flip('sideways')
    e = BitmapMasks([], 20, 30)
    assert e.rescale((60, 40)).masks.shape == (0, 40, 60)
    assert e.resize((5, 6)).masks.shape == (0, 5, 6) and e.pad((32, 32)).masks.shape == (0, 32, 32)


def test_bitmap_crop_and_expand():
    m = _bitmaps()
    c = m.crop(np.array([1, 2, 13, 40]))  # clipped to the masks: y2 -> 20
    assert (c.height, c.width) == (18, 12)
    assert np.array_equal(c.masks[0], _rect(18, 12, 1, 1, 11, 7))
    x = m.expand(30, 40, 5, 6)
    assert x.masks.shape == (2, 30, 40) and np.array_equal(x.masks[:, 5:25, 6:36], m.masks)
    assert x.areas.tolist() == m.areas.tolist()


def test_bitmap_crop_and_resize_is_aligned_roi_align():
    rng = np.random.RandomState(0)
    masks = BitmapMasks((rng.rand(3, 16, 16) > 0.5).astype(np.uint8), 16, 16)
    # the whole mask at its own size: aligned RoIAlign samples the pixel centres exactly
    # (without the half-pixel alignment every sample would fall between two pixels)
    whole = masks.crop_and_resize(np.array([[0, 0, 16, 16]] * 2, np.float32), (16, 16),
                                  np.array([2, 0]), binarize=False)
    assert np.allclose(whole.masks, masks.masks[[2, 0]])
    # a box on a filled rectangle gives ones, a box beside it zeros
    rect = BitmapMasks([_rect(32, 32, 8, 8, 24, 24)], 32, 32)
    out = rect.crop_and_resize(torch.tensor([[8., 8., 24., 24.], [0., 0., 8., 8.]]), (7, 7),
                               torch.tensor([0, 0]))
    assert out.masks.dtype == bool and out.masks.shape == (2, 7, 7)
    assert out.masks[0].all() and not out.masks[1].any()
    # half the box on the rectangle: the left half of the target is set
    half = rect.crop_and_resize(np.array([[0., 8., 16., 24.]], np.float32), (4, 4),
                                np.array([0]))
    assert half.masks[0].tolist() == [[False, False, True, True]] * 4
    assert len(rect.crop_and_resize(np.zeros((0, 4), np.float32), (7, 7), np.zeros(0))) == 0


def test_bitmap_translate_shear_rotate():
    m = BitmapMasks([_rect(10, 10, 2, 2, 4, 6)], 10, 10)
    assert np.array_equal(m.translate((10, 10), 3).masks[0], _rect(10, 10, 5, 2, 7, 6))
    assert np.array_equal(m.translate((10, 10), -2, 'vertical').masks[0],
                          _rect(10, 10, 2, 0, 4, 4))
    assert np.array_equal(m.rotate((10, 10), 180).masks[0], _rect(10, 10, 6, 4, 8, 8))
    s = m.shear((10, 10), 0.0)
    assert np.array_equal(s.masks, m.masks)


def test_polygon_basics_and_indexing():
    p = PolygonMasks([_square_poly(1, 1, 5, 5), _square_poly(0, 0, 2, 3) + [
        np.array([10., 10, 14, 10, 14, 12])]], 16, 20)
    assert len(p) == 2 and repr(p) == 'PolygonMasks(num_masks=2, height=16, width=20)'
    assert p.areas.tolist() == [16.0, 6.0 + 4.0]
    assert len(p[1]) == 1 and len(p[1].masks[0]) == 2
    assert len(p[[1, 1, 0]]) == 3 and len(p[np.array([False, True])]) == 1
    assert len(p[0:1]) == 1
    assert len(p[torch.tensor([1, 0])]) == 2 and len(p[torch.tensor(1)].masks[0]) == 2
    bm = p.to_ndarray()
    assert bm.shape == (2, 16, 20) and bm[0].sum() == 16
    assert p.to_bitmap().masks.shape == (2, 16, 20)
    assert p.to_tensor(torch.uint8, 'cpu').shape == (2, 16, 20)
    assert p.get_bboxes().tolist() == [[1, 1, 5, 5], [0, 0, 14, 12]]
    assert PolygonMasks([], 4, 5).to_ndarray().shape == (0, 4, 5)
    with pytest.raises(TypeError, match='instance 0'):
        PolygonMasks([[[1, 2, 3, 4, 5, 6]]], 4, 5)


def test_polygon_geometry_moves_vertices():
    p = PolygonMasks([_square_poly(2, 4, 6, 8)], 10, 20)
    r = p.rescale((40, 40))  # factor 2
    assert (r.height, r.width) == (20, 40) and r.masks[0][0].tolist() == \
        _square_poly(4, 8, 12, 16)[0].tolist()
    z = p.resize((5, 40))
    assert z.masks[0][0].tolist() == [4, 2, 12, 2, 12, 4, 4, 4]
    assert p.flip('horizontal').masks[0][0][0::2].tolist() == [18, 14, 14, 18]
    assert p.flip('vertical').masks[0][0][1::2].tolist() == [6, 6, 2, 2]
    assert p.pad((32, 32)).masks is p.masks and p.pad((32, 32)).height == 32
    c = p.crop(np.array([1, 2, 30, 30]))
    assert (c.height, c.width) == (8, 19) and c.masks[0][0].tolist() == \
        _square_poly(1, 2, 5, 6)[0].tolist()
    assert p.expand(20, 30, 3, 4).masks[0][0].tolist() == _square_poly(6, 7, 10, 11)[0].tolist()
    t = p.translate((10, 20), 15)
    assert t.masks[0][0][0::2].tolist() == [17, 20, 20, 17]  # clipped to the width
    assert p.masks[0][0].tolist() == _square_poly(2, 4, 6, 8)[0].tolist()  # untouched


def test_polygon_int_coordinates_are_not_truncated():
    p = PolygonMasks([[np.array([1, 1, 4, 1, 4, 4])]], 10, 10)
    assert p.resize((15, 15)).masks[0][0].tolist() == [1.5, 1.5, 6, 1.5, 6, 6]
    out = p.crop_and_resize(np.array([[0.5, 0.5, 4.5, 4.5]], np.float32), (8, 8), np.array([0]))
    assert out.masks[0][0].tolist() == [1, 1, 7, 1, 7, 7]


def test_polygon_crop_and_resize_agrees_with_bitmaps():
    polys = PolygonMasks([_square_poly(8, 8, 24, 24)], 32, 32)
    bitmaps = polys.to_bitmap()
    boxes = np.array([[8, 8, 24, 24], [4, 4, 28, 28], [0, 8, 16, 24]], np.float32)
    inds = np.zeros(3, dtype=np.int64)
    a = polys.crop_and_resize(boxes, (8, 8), inds).to_ndarray()
    b = bitmaps.crop_and_resize(boxes, (8, 8), inds).to_ndarray()
    assert a.shape == b.shape == (3, 8, 8)
    assert np.array_equal(a[[0, 2]].astype(bool), b[[0, 2]])
    # a bin straddling a corner averages 4 of its 9 samples on the bitmap (< 0.5) while the
    # scaled polygon covers its centre: the two representations differ only there
    assert (a[1].astype(bool) != b[1]).sum() == 4
    with pytest.raises(ValueError, match='binarize'):
        polys.crop_and_resize(boxes, (8, 8), inds, binarize=False)


def test_polygon_rotate_and_shear():
    p = PolygonMasks([[np.array([0., 0, 4, 0, 4, 2])]], 10, 10)
    s = p.shear((10, 10), 1.0, 'vertical')
    assert s.masks[0][0].tolist() == [0, 0, 4, 4, 4, 6]
    r = p.rotate((10, 10), 90, center=(0, 0))  # clockwise on the image: x -> y
    assert np.allclose(r.masks[0][0], [0, 0, 0, 4, 0, 4])  # clipped at x = 0


def test_poly2mask_reads_polygons_and_both_rles():
    h, w = 12, 10
    polys = [[1, 1, 6, 1, 6, 5, 1, 5], [7, 7, 9, 7, 9, 11, 7, 11]]
    from_polys = poly2mask(polys, h, w)
    assert from_polys.dtype == np.uint8 and from_polys.shape == (h, w)
    rle = mask_utils.encode(np.asfortranarray(from_polys))
    assert np.array_equal(poly2mask(rle, h, w), from_polys)
    counts, flat, run, val = [], from_polys.flatten(order='F'), 0, 0
    for v in flat:
        if v != val:
            counts.append(run)
            run, val = 0, v
        run += 1
    counts.append(run)
    uncompressed = {'size': [h, w], 'counts': counts}
    assert np.array_equal(poly2mask(uncompressed, h, w), from_polys)
    assert np.array_equal(polygon_to_bitmap([np.array(p, float) for p in polys], h, w),
                          from_polys.astype(bool))
    with pytest.raises(TypeError, match='list of polygons or an RLE dict'):
        poly2mask('nope', h, w)


def test_bitmap_to_polygon_finds_holes():
    m = _rect(10, 10, 1, 1, 9, 9)
    contours, hole = bitmap_to_polygon(m)
    assert len(contours) == 1 and not hole
    m[4:6, 4:6] = 0
    assert bitmap_to_polygon(m)[1]
    assert bitmap_to_polygon(np.zeros((4, 4), np.uint8)) == ([], False)
