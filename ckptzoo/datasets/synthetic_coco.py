"""A small, deterministic COCO-format dataset of coloured shapes, for tests and for training a
tiny detector on a CPU (no download needed).

Layout (what ``CocoDataset`` and mmdet 2.x's ``coco_detection.py`` read)::

    root/annotations/instances_train2017.json, instances_val2017.json
    root/train2017/000000001000.jpg ...
    root/val2017/...
    root/stuffthingmaps/train2017/000000001000.png ...   (with ``stuff_maps=True``)

The shapes and images are those of :mod:`ckptzoo.datasets.synthetic_voc`, written as COCO
annotations: ``bbox`` ``[x, y, w, h]`` of the shape's pixels, ``area`` its pixel count,
polygon ``segmentation``. Category ids have gaps (1, 3, 5, ...) and image ids are not
consecutive, as in COCO, so code that confuses ids with indices fails. Some images have no
object (the second of each split always), and some hold a crowd: a cluster of small shapes of
one class under one ``iscrowd=1`` box with an uncompressed RLE mask (the first image of each
split holds only a crowd). The same arguments give byte-identical files.

``stuff_maps=True`` also writes each image's semantic map, as COCO-stuff's ``stuffthingmaps``
that HTC trains on (mmdet's ``seg_prefix``; ``seg_map`` is the image's name with ``.png``): a
single-channel uint8 PNG of the image's size, every object's pixels its ``category_id - 1``
(COCO-stuff's labels), 255 (ignored) elsewhere. The images and annotations are unchanged.

Users' data is rarely one size: ``img_shapes`` gives each image its ``(h, w)`` in turn
(landscape, portrait, wide, square ...), and ``crowded_objects`` makes the third image of each
split a crowded one (that many small shapes, e.g. 150), so the box counts range from 0 to it.

Generation writes into a temporary folder renamed into place with a marker file (holding the
arguments) written last, so an interrupted run leaves nothing half-made and calling
``generate_coco`` again (e.g. from a config's ``synthetic_data`` on first use) is a no-op.

CLI: ``python -m ckptzoo.datasets.synthetic_coco ROOT [--num-train N] [--num-val N]``.
"""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np

from .synthetic_voc import (SHAPE_COLORS, SYNTHETIC_CLASSES, _draw, _iou, _make_image, _range,
                            _size_ranges, write_once)

MARKER = '.ckptzoo_synthetic_coco_complete.json'
STUFF_DIR = 'stuffthingmaps'  # mmdet's seg_prefix: data/coco/stuffthingmaps/train2017/
CROWD_SHAPE_SIZE = (6, 9)  # px: the small shapes a crowd is made of
CROWDED_INDEX = 2  # the image of each split that ``crowded_objects`` fills
CROWDED_ATTEMPTS = 200  # tries per object of the crowded image at a free spot


def _rle(mask):
    """COCO's uncompressed RLE (column-major runs, starting with background)."""
    flat = (mask.T.reshape(-1) > 0).astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat[0]:
        counts = [0] + counts
    return dict(counts=[int(c) for c in counts], size=[int(mask.shape[0]), int(mask.shape[1])])


def _polygons(mask, box):
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    polys = [c.reshape(-1).astype(float).tolist() for c in contours if len(c) >= 3]
    if not polys:  # a line of pixels: its box
        x, y, w, h = box
        polys = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    return polys


def _mask_box(mask):
    ys, xs = np.nonzero(mask)
    x0, y0 = int(xs.min()), int(ys.min())
    return [float(x0), float(y0), float(xs.max() - x0 + 1), float(ys.max() - y0 + 1)]


def _add_crowd(rng, img, boxes, classes):
    """Draw a cluster of 4-6 small shapes of one class in a free spot; its class index and mask,
    or None when there is no room."""
    h, w = img.shape[:2]
    side = int(rng.integers(24, 33))
    if side > min(h, w):
        return None
    for _attempt in range(20):
        x0, y0 = int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1))
        region = (x0, y0, x0 + side, y0 + side)
        if all(_iou(region, b) == 0 for b in boxes):
            break
    else:
        return None
    cls = int(rng.integers(len(classes)))
    mask = np.zeros((h, w), dtype=np.uint8)
    for _ in range(int(rng.integers(4, 7))):
        s = int(rng.integers(CROWD_SHAPE_SIZE[0], CROWD_SHAPE_SIZE[1] + 1))
        _draw(mask, classes[cls], x0 + int(rng.integers(0, side - s + 1)),
              y0 + int(rng.integers(0, side - s + 1)), s)
    colour = np.array(SHAPE_COLORS[classes[cls]], dtype=np.uint8)
    img[mask > 0] = colour
    return cls, mask


def _write_stuff_map(path, shape, objects):
    """The semantic map: each object's pixels ``category_id - 1`` (later ones on top),
    255 elsewhere."""
    seg = np.full(shape, 255, dtype=np.uint8)
    for cat_id, mask in objects:
        seg[mask > 0] = cat_id - 1
    ok, buf = cv2.imencode('.png', seg)
    if not ok:
        raise OSError(f'PNG encoding failed for the semantic map {path}')
    buf.tofile(path)


def _split(rng, tmp, split, n, first_img_id, first_ann_id, cat_ids, classes, h_range, w_range,
           obj_size, max_objects, crowd_ratio, img_shapes=None, crowded=None, stuff=False):
    os.makedirs(osp.join(tmp, split))
    if stuff:
        os.makedirs(osp.join(tmp, STUFF_DIR, split))
    images, anns = [], []
    ann_id = first_ann_id
    for i in range(n):
        img_id = first_img_id + 7 * i
        if img_shapes:
            h, w = img_shapes[i % len(img_shapes)]
            h_range, w_range = (h, h), (w, w)
        if crowded and i == CROWDED_INDEX:
            count, size = crowded
            img, objects = _make_image(rng, classes, h_range, w_range, size, count,
                                       min_objects=count, keep_masks=True,
                                       attempts=CROWDED_ATTEMPTS)
            if len(objects) < count:
                raise ValueError(
                    f'crowded_objects={count}: only {len(objects)} objects of {size} px fit '
                    f'the {h_range[0]}x{w_range[0]} crowded image; choose a larger image '
                    f'(img_shapes) or smaller objects (crowded_obj_size)')
        else:
            img, objects = _make_image(rng, classes, h_range, w_range, obj_size,
                                       0 if i < 2 else max_objects, min_objects=0,
                                       keep_masks=True)
        items = [(classes.index(o['name']), o['mask'], 0) for o in objects]
        if i != 1 and (i == 0 or rng.random() < crowd_ratio):
            boxes = [(b[0] - 1, b[1] - 1, b[2], b[3]) for b in (o['bbox'] for o in objects)]
            crowd = _add_crowd(rng, img, boxes, classes)
            if crowd is not None:
                items.append((crowd[0], crowd[1], 1))
        file_name = f'{img_id:012d}.jpg'
        ok, buf = cv2.imencode('.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        if not ok:
            raise OSError(f'JPEG encoding failed for image {file_name}')
        buf.tofile(osp.join(tmp, split, file_name))
        if stuff:
            _write_stuff_map(osp.join(tmp, STUFF_DIR, split, f'{img_id:012d}.png'),
                             img.shape[:2], [(cat_ids[cls], mask) for cls, mask, _ in items])
        images.append(dict(id=img_id, file_name=file_name, height=int(img.shape[0]),
                           width=int(img.shape[1])))
        for cls, mask, iscrowd in items:
            box = _mask_box(mask)
            anns.append(dict(id=ann_id, image_id=img_id, category_id=cat_ids[cls], bbox=box,
                             area=float(np.count_nonzero(mask)), iscrowd=iscrowd,
                             segmentation=_rle(mask) if iscrowd else _polygons(mask, box)))
            ann_id += 1
    return images, anns, ann_id


def generate_coco(root, num_train=64, num_val=16, img_size=((96, 128), (96, 128)),
                  classes=SYNTHETIC_CLASSES, names=None, cat_ids=None, seed=0,
                  obj_size=(16, 48), max_objects=3, crowd_ratio=0.2, img_shapes=None,
                  crowded_objects=0, crowded_obj_size=(8, 24), stuff_maps=False):
    """Write the dataset into ``root`` unless it is already complete with the same arguments;
    return ``root``.

    ``img_shapes`` (a list of ``(h, w)``) gives image ``i`` of each split the size
    ``img_shapes[i % len(img_shapes)]`` instead of a random one within ``img_size``.
    ``crowded_objects`` (> 0) fills the third image of each split with exactly that many shapes
    of ``crowded_obj_size`` px (an error when they do not fit); 0 makes no crowded image.
    ``stuff_maps`` also writes the semantic maps under ``root/stuffthingmaps/<split>/``.

    ``names`` (one per class) are the category names written instead of the shape names, e.g.
    COCO's, so a config with COCO's 80 classes reads the data; ``cat_ids`` their ids (default
    1, 3, 5, ...). A complete dataset made with other arguments is replaced; a folder that this
    function did not make (no marker) is never touched: that is an error.
    """
    classes = tuple(classes)
    unknown = [c for c in classes if c not in SHAPE_COLORS]
    if unknown or not classes:
        raise ValueError(f'classes must be shape names from {sorted(SHAPE_COLORS)}, '
                         f'got {classes!r}')
    for name, n in (('num_train', num_train), ('num_val', num_val)):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f'{name} must be a non-negative int, got {n!r}')
    names = tuple(classes if names is None else names)
    if len(names) != len(classes) or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise ValueError(f'names must be {len(classes)} distinct non-empty strings (one per '
                         f'class), got {names!r}')
    cat_ids = tuple(2 * i + 1 for i in range(len(classes))) if cat_ids is None \
        else tuple(cat_ids)
    if len(cat_ids) != len(classes) or len(set(cat_ids)) != len(cat_ids) or \
            not all(isinstance(c, int) and c > 0 for c in cat_ids):
        raise ValueError(f'cat_ids must be {len(classes)} distinct positive ints, '
                         f'got {cat_ids!r}')
    if not 0 <= crowd_ratio <= 1:
        raise ValueError(f'crowd_ratio must be in [0, 1], got {crowd_ratio!r}')
    h_range, w_range = _size_ranges(img_size)
    obj_size = _range(obj_size, 'obj_size')
    if not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f'max_objects must be a positive int, got {max_objects!r}')
    if img_shapes is not None:
        img_shapes = [tuple(s) if isinstance(s, (tuple, list)) else s for s in img_shapes] \
            if isinstance(img_shapes, (tuple, list)) else img_shapes
        if not isinstance(img_shapes, list) or not img_shapes or not all(
                isinstance(s, tuple) and len(s) == 2 and
                all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in s)
                for s in img_shapes):
            raise ValueError(f'img_shapes must be a non-empty list of (h, w) pairs of positive '
                             f'ints, got {img_shapes!r}')
    if isinstance(crowded_objects, bool) or not isinstance(crowded_objects, int) \
            or crowded_objects < 0:
        raise ValueError(f'crowded_objects must be a non-negative int (0: no crowded image), '
                         f'got {crowded_objects!r}')
    crowded_obj_size = _range(crowded_obj_size, 'crowded_obj_size')
    params = dict(num_train=num_train, num_val=num_val, img_size=[list(h_range), list(w_range)],
                  classes=list(classes), names=list(names), cat_ids=list(cat_ids), seed=seed,
                  obj_size=list(obj_size), max_objects=max_objects, crowd_ratio=crowd_ratio,
                  version=1)
    # recorded only when used, so the defaults keep the marker of the datasets made before them
    if img_shapes is not None:
        params['img_shapes'] = [list(s) for s in img_shapes]
    if crowded_objects:
        params['crowded_objects'] = crowded_objects
        params['crowded_obj_size'] = list(crowded_obj_size)
    crowded = (crowded_objects, crowded_obj_size) if crowded_objects else None
    if stuff_maps:
        params['stuff_maps'] = True
    if any(c > 256 for c in cat_ids) and stuff_maps:
        raise ValueError(f'stuff_maps hold category_id - 1 in uint8: cat_ids must be at most '
                         f'256, got {cat_ids!r}')

    root = osp.abspath(root)

    def write(tmp):
        os.makedirs(osp.join(tmp, 'annotations'))
        rng = np.random.default_rng(seed)
        categories = [dict(id=c, name=n, supercategory='shape') for c, n in zip(cat_ids, names)]
        ann_id = 1
        for split, n, first_img_id in (('train2017', num_train, 1000),
                                       ('val2017', num_val, 500000)):
            images, anns, ann_id = _split(rng, tmp, split, n, first_img_id, ann_id, cat_ids,
                                          classes, h_range, w_range, obj_size, max_objects,
                                          crowd_ratio, img_shapes, crowded, stuff_maps)
            with open(osp.join(tmp, 'annotations', f'instances_{split}.json'), 'w',
                      encoding='utf-8') as f:
                json.dump(dict(info=dict(description='ckptzoo synthetic shapes', version='1'),
                               licenses=[], images=images, annotations=anns,
                               categories=categories), f)

    write_once(root, params, MARKER, 'generate_coco', write)
    return root


def _shapes_arg(text):
    try:
        return [tuple(int(v) for v in part.lower().split('x', 1)) for part in text.split(',')]
    except ValueError:
        raise argparse.ArgumentTypeError(f'image sizes must be HxW,HxW,... (e.g. '
                                         f'480x640,640x480), got {text!r}') from None


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write a small synthetic COCO-format dataset.')
    parser.add_argument('root', help='writes ROOT/annotations, ROOT/train2017, ROOT/val2017')
    parser.add_argument('--num-train', type=int, default=64)
    parser.add_argument('--num-val', type=int, default=16)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--img-shapes', type=_shapes_arg, default=None,
                        help='image sizes used in turn, HxW,HxW,... e.g. 480x640,640x480')
    parser.add_argument('--crowded-objects', type=int, default=0,
                        help='shapes in the third image of each split (0: none)')
    parser.add_argument('--stuff-maps', action='store_true',
                        help='also write the semantic maps (root/stuffthingmaps/<split>/)')
    args = parser.parse_args(argv)
    out = generate_coco(args.root, num_train=args.num_train, num_val=args.num_val,
                        seed=args.seed, img_shapes=args.img_shapes,
                        crowded_objects=args.crowded_objects, stuff_maps=args.stuff_maps)
    print(f'synthetic COCO dataset ready at {out}')


if __name__ == '__main__':
    main()
