"""Instance mask annotations in COCO's ``segmentation`` format, checked before training.

One object's mask is a list of polygons ``[[x0, y0, x1, y1, ...], ...]`` (its parts), an
uncompressed RLE ``dict(size=[h, w], counts=[ints])`` or a compressed RLE
``dict(size=[h, w], counts='...')``. mmdet 2.28.2 reads them unchecked: a polygon of fewer
than 3 points is dropped silently when masks stay polygons (``process_polygons``) and, when
they are rasterized, read by pycocotools as a *box* if it comes first (or a crash); an RLE of
another size than the image breaks the batch far from the cause. Here:

- a polygon with an odd number of coordinates is an error (the list is corrupt);
- a polygon of fewer than 3 points is dropped (as mmdet drops it) and the dataset warns once,
  counting them; an object left with no polygon is an error;
- an RLE whose ``size`` is not the image's ``[height, width]``, or whose uncompressed
  ``counts`` do not cover it, is an error.

Errors name the file and the entry (the callers add them to the reason given here).
"""
import numbers

import numpy as np

__all__ = ['process_polygons', 'mask_ann_problem', 'is_polygon_list']

#: the fewest coordinates of a polygon (3 points)
MIN_POLYGON_COORDS = 6


def is_polygon_list(mask_ann):
    return isinstance(mask_ann, (list, tuple))


def process_polygons(polygons):
    """mmdet's ``LoadAnnotations.process_polygons``: float arrays of the polygons with an even
    number of at least 6 coordinates (the others are dropped)."""
    arrays = [np.asarray(p, dtype=np.float64).reshape(-1) for p in polygons]
    return [p for p in arrays if len(p) % 2 == 0 and len(p) >= MIN_POLYGON_COORDS]


def _rle_problem(rle, img_h, img_w):
    size, counts = rle.get('size'), rle.get('counts')
    if size is None or counts is None:
        return f"an RLE mask needs 'size' and 'counts', got keys {sorted(rle)}"
    if not (isinstance(size, (list, tuple)) and len(size) == 2 and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in size)):
        return f'an RLE size is [height, width], got {size!r}'
    if list(size) != [img_h, img_w]:
        return (f'the RLE mask has size [height, width] = {list(size)}, the image is '
                f'{[img_h, img_w]}')
    if isinstance(counts, list):
        if not all(isinstance(c, numbers.Integral) and not isinstance(c, bool) and c >= 0
                   for c in counts):
            return 'the uncompressed RLE counts must be non-negative ints'
        if sum(counts) != img_h * img_w:
            return (f'the uncompressed RLE counts sum to {sum(counts)}, not to the '
                    f'{img_h} x {img_w} = {img_h * img_w} pixels of the image')
    elif not isinstance(counts, (str, bytes)):
        return (f'RLE counts must be a list of ints (uncompressed) or a string (compressed), '
                f'got {type(counts).__name__}')
    return None


def mask_ann_problem(mask_ann, img_h, img_w):
    """``(problem, dropped)``: why ``mask_ann`` cannot be an ``img_h`` x ``img_w`` mask
    (None when it can) and how many of its polygons have fewer than 3 points."""
    if isinstance(mask_ann, dict):
        return _rle_problem(mask_ann, img_h, img_w), 0
    if not is_polygon_list(mask_ann):
        return (f'a mask is a list of polygons or an RLE dict, got '
                f'{type(mask_ann).__name__}'), 0
    lengths = []
    for k, poly in enumerate(mask_ann):
        if not isinstance(poly, (list, tuple, np.ndarray)):
            return (f'polygon {k} must be a flat list [x0, y0, x1, y1, ...], got '
                    f'{type(poly).__name__}'), 0
        if len(poly) % 2:
            return (f'polygon {k} has an odd number of coordinates ({len(poly)}); a polygon '
                    f'is [x0, y0, x1, y1, ...]'), 0
        lengths.append(len(poly))
    dropped = sum(n < MIN_POLYGON_COORDS for n in lengths)
    if dropped == len(lengths):
        return (f'no polygon of 3 or more points (coordinates per polygon: {lengths}); the '
                f'mask would be empty'), dropped
    return None, dropped
