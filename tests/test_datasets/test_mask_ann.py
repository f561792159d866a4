"""COCO segmentation entries: what can be an image's mask, what is dropped, what is refused."""
import numpy as np
import pytest

from ckptzoo.datasets.mask_ann import mask_ann_problem, process_polygons


def test_process_polygons_keeps_even_polygons_of_three_points_as_mmdet():
    kept = process_polygons([[0, 0, 4, 0, 4, 4], [1, 1, 2, 2], [0, 0, 1, 0, 1, 1, 0]])
    assert len(kept) == 1 and kept[0].dtype == np.float64
    assert kept[0].tolist() == [0, 0, 4, 0, 4, 4]


@pytest.mark.parametrize('ann, problem, dropped', [
    ([[0, 0, 4, 0, 4, 4]], None, 0),
    ([[0, 0, 4, 0, 4, 4], [1, 1, 2, 2]], None, 1),
    ([[1, 1, 2, 2]], r'no polygon of 3 or more points \(coordinates per polygon: \[4\]\)', 1),
    ([], r'no polygon of 3 or more points \(coordinates per polygon: \[\]\)', 0),
    ([[0, 0, 4, 0, 4]], 'polygon 0 has an odd number of coordinates', 0),
    ([5], 'polygon 0 must be a flat list', 0),
    (dict(size=[3, 4], counts=[12]), None, 0),
    (dict(size=[3, 4], counts='abc'), None, 0),
    (dict(size=[4, 3], counts=[12]), r'size \[height, width\] = \[4, 3\], the image is \[3, 4\]',
     0),
    (dict(size=[3, 4], counts=[5, 6]), 'counts sum to 11, not to the 3 x 4 = 12 pixels', 0),
    (dict(size=[3, 4], counts=[-1, 13]), 'non-negative ints', 0),
    (dict(counts=[12]), "needs 'size' and 'counts'", 0),
    ('poly', 'a list of polygons or an RLE dict', 0),
])
def test_mask_ann_problem(ann, problem, dropped):
    found, n = mask_ann_problem(ann, 3, 4)
    assert n == dropped
    if problem is None:
        assert found is None
    else:
        assert found is not None and __import__('re').search(problem, found), found
