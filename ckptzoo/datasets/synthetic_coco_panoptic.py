"""A small, deterministic COCO *panoptic* dataset: coloured shapes (things) on background
regions (stuff), for tests and for training a tiny panoptic model on a CPU (no download).

Layout (what ``CocoPanopticDataset`` and mmdet 2.x's ``coco_panoptic.py`` read)::

    root/annotations/panoptic_train2017.json, panoptic_val2017.json
    root/annotations/panoptic_train2017/000000001000.png ...   (the id maps)
    root/annotations/instances_train2017.json, instances_val2017.json   (things only)
    root/train2017/000000001000.jpg ...
    root/val2017/...

Each image is split into stuff regions (``sky`` above a random horizon, ``sand`` or ``wall``
below it, the lower part split again at a random column), then the thing shapes of
:mod:`ckptzoo.datasets.synthetic_voc` are drawn on top. Each segment's pixels hold its id in
the PNG, encoded as COCO panoptic does (``id = R + 256 * G + 256**2 * B``, 0 the unlabeled
VOID); ids are random non-consecutive 24-bit numbers, as in COCO, so code that confuses ids
with indices or labels fails. Some pixels are VOID (a small unlabeled rectangle in some
images), the first image of each split holds a crowd (``iscrowd=1``: a cluster of small
shapes, one segment) and the second image has stuff only (no thing). Category ids have gaps
(things 1, 3, 5; stuff 92, 95, 100). ``instances_<split>.json`` holds the same things as a COCO
instances json (polygons; the crowd as an RLE), for bbox / segm evaluation (mmdet's
``ins_ann_file``). The same arguments give byte-identical files; generation is written once
(:func:`ckptzoo.datasets.synthetic_voc.write_once`).

CLI: ``python -m ckptzoo.datasets.synthetic_coco_panoptic ROOT [--num-train N] [--num-val N]``.
"""
import argparse
import json
import os
import os.path as osp

import cv2
import numpy as np

from ..evaluation.panoptic_quality import id2rgb
from .synthetic_coco import _add_crowd, _mask_box, _polygons, _rle
from .synthetic_voc import (SHAPE_COLORS, SYNTHETIC_CLASSES, _draw, _iou, _range,
                            _size_ranges, write_once)

MARKER = '.ckptzoo_synthetic_coco_panoptic_complete.json'
#: the stuff classes and their BGR colours (far from the things' saturated ones)
STUFF_COLORS = {'sky': (225, 190, 150), 'sand': (120, 175, 205), 'wall': (110, 110, 110)}
SYNTHETIC_STUFF_CLASSES = tuple(STUFF_COLORS)
THING_CAT_IDS = (1, 3, 5)
STUFF_CAT_IDS = (92, 95, 100)


def _stuff_layout(rng, h, w):
    """``(H, W)`` stuff class index per pixel: sky above a horizon, below it sand and wall
    left / right of a random column (which may fall outside the image: one of them)."""
    layout = np.zeros((h, w), dtype=np.int64)
    horizon = int(rng.integers(h // 4, 3 * h // 4 + 1))
    column = int(rng.integers(-w // 4, w + w // 4 + 1))
    left, right = (1, 2) if rng.random() < 0.5 else (2, 1)
    layout[horizon:, :max(column, 0)] = left
    layout[horizon:, max(column, 0):] = right
    return layout


def _place_things(rng, img, ids, classes, obj_size, count):
    """Draw up to ``count`` shapes overlapping no placed one; their ``(class, mask)``."""
    h, w = ids.shape
    things, placed = [], []
    for _ in range(count):
        for _attempt in range(20):
            cls = int(rng.integers(len(classes)))
            s = int(rng.integers(obj_size[0], min(obj_size[1], h, w) + 1))
            x0, y0 = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
            square = (x0, y0, x0 + s, y0 + s)
            if all(_iou(square, p) == 0 for p in placed):
                break
        else:
            continue
        mask = np.zeros((h, w), dtype=np.uint8)
        _draw(mask, classes[cls], x0, y0, s)
        if not mask.any():
            continue
        placed.append(square)
        colour = np.array(SHAPE_COLORS[classes[cls]], dtype=np.int16)
        img[mask > 0] = colour + rng.integers(-15, 16, size=3, dtype=np.int16)
        things.append((cls, mask))
    return things, placed


def _segment_ids(rng, n):
    """``n`` distinct random segment ids in [1, 2**24)."""
    ids = set()
    while len(ids) < n:
        ids.add(int(rng.integers(1, 1 << 24)))
    return list(rng.permutation(sorted(ids)).tolist())


def _image(rng, i, h_range, w_range, classes, obj_size, max_objects, crowd_ratio,
           void_ratio):
    """The image (BGR), its id map and its segments ``(cat index, is_thing, iscrowd, mask)``
    (thing indices into ``classes``, stuff ones into ``SYNTHETIC_STUFF_CLASSES``)."""
    h = int(rng.integers(h_range[0], h_range[1] + 1))
    w = int(rng.integers(w_range[0], w_range[1] + 1))
    layout = _stuff_layout(rng, h, w)
    img = np.zeros((h, w, 3), dtype=np.int16)
    for k, name in enumerate(SYNTHETIC_STUFF_CLASSES):
        img[layout == k] = np.array(STUFF_COLORS[name], dtype=np.int16)
    img += rng.integers(-12, 13, size=(h, w, 1), dtype=np.int16)
    count = 0 if i == 1 else int(rng.integers(1, max_objects + 1))
    things, placed = _place_things(rng, img, layout, classes, obj_size, count)
    segments = [(cls, True, 0, mask) for cls, mask in things]
    if i != 1 and (i == 0 or rng.random() < crowd_ratio):
        boxes = [(b[0] - 1, b[1] - 1, b[2] + 1, b[3] + 1) for b in placed]
        work = img.astype(np.uint8)
        crowd = _add_crowd(rng, work, boxes, classes)
        if crowd is not None:
            img[crowd[1] > 0] = work[crowd[1] > 0]
            segments.append((crowd[0], True, 1, crowd[1]))
    taken = np.zeros((h, w), dtype=bool)
    for _cls, _thing, _crowd, mask in segments:
        taken |= mask > 0
    void = np.zeros((h, w), dtype=bool)
    if rng.random() < void_ratio:  # an unlabeled rectangle (VOID), under the things
        vh, vw = int(rng.integers(4, h // 4 + 5)), int(rng.integers(4, w // 4 + 5))
        y0, x0 = int(rng.integers(0, h - vh + 1)), int(rng.integers(0, w - vw + 1))
        void[y0:y0 + vh, x0:x0 + vw] = True
        void &= ~taken
    for k in range(len(SYNTHETIC_STUFF_CLASSES)):
        mask = ((layout == k) & ~taken & ~void).astype(np.uint8)
        if mask.any():
            segments.append((k, False, 0, mask))
    return np.clip(img, 0, 255).astype(np.uint8), segments


def _split(rng, tmp, split, n, first_img_id, first_ann_id, classes, h_range, w_range,
           obj_size, max_objects, crowd_ratio, void_ratio, cat_ids):
    png_dir = osp.join('annotations', f'panoptic_{split}')
    os.makedirs(osp.join(tmp, split))
    os.makedirs(osp.join(tmp, png_dir))
    images, pan_anns, ins_anns = [], [], []
    ann_id = first_ann_id
    for i in range(n):
        img_id = first_img_id + 7 * i
        img, segments = _image(rng, i, h_range, w_range, classes, obj_size, max_objects,
                               crowd_ratio, void_ratio)
        h, w = img.shape[:2]
        name = f'{img_id:012d}'
        ok, buf = cv2.imencode('.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        if not ok:
            raise OSError(f'JPEG encoding failed for image {name}.jpg')
        buf.tofile(osp.join(tmp, split, f'{name}.jpg'))
        id_map = np.zeros((h, w), dtype=np.int64)
        infos = []
        for seg_id, (cls, thing, crowd, mask) in zip(_segment_ids(rng, len(segments)),
                                                      segments):
            id_map[mask > 0] = seg_id
            box = _mask_box(mask)
            cat_id = cat_ids[cls] if thing else cat_ids[len(classes) + cls]
            infos.append(dict(id=seg_id, category_id=cat_id, iscrowd=crowd, bbox=box,
                              area=int(np.count_nonzero(mask))))
            if thing:
                ins_anns.append(dict(id=ann_id, image_id=img_id, category_id=cat_id,
                                     bbox=box, area=float(np.count_nonzero(mask)),
                                     iscrowd=crowd,
                                     segmentation=_rle(mask) if crowd else
                                     _polygons(mask, box)))
                ann_id += 1
        ok, buf = cv2.imencode('.png', id2rgb(id_map)[:, :, ::-1])  # cv2 writes BGR
        if not ok:
            raise OSError(f'PNG encoding failed for the id map {name}.png')
        buf.tofile(osp.join(tmp, png_dir, f'{name}.png'))
        images.append(dict(id=img_id, file_name=f'{name}.jpg', height=h, width=w))
        pan_anns.append(dict(image_id=img_id, file_name=f'{name}.png', segments_info=infos))
    return images, pan_anns, ins_anns, ann_id


def generate_coco_panoptic(root, num_train=32, num_val=8, img_size=((96, 128), (96, 128)),
                           classes=SYNTHETIC_CLASSES, seed=0, obj_size=(16, 40),
                           max_objects=3, crowd_ratio=0.2, void_ratio=0.3, names=None,
                           cat_ids=None):
    """Write the dataset into ``root`` unless it is already complete with the same arguments;
    return ``root``. ``classes`` are the thing shapes (three at most: their ids are
    1, 3, 5); the stuff classes are always ``sky``, ``sand``, ``wall`` (ids 92, 95, 100).
    ``void_ratio`` is the share of images with an unlabeled (VOID) rectangle. ``names`` (the
    things' then the stuff's, e.g. COCO's, so a config with COCO's 133 classes reads the
    data) and ``cat_ids`` are the categories written instead of the shape names and ids."""
    classes = tuple(classes)
    if not classes or len(classes) > len(THING_CAT_IDS) or \
            any(c not in SHAPE_COLORS for c in classes) or len(set(classes)) != len(classes):
        raise ValueError(f'classes must be 1 to {len(THING_CAT_IDS)} distinct shape names from '
                         f'{sorted(SHAPE_COLORS)}, got {classes!r}')
    default_names = classes + SYNTHETIC_STUFF_CLASSES
    names = default_names if names is None else tuple(names)
    if len(names) != len(default_names) or len(set(names)) != len(names) or \
            not all(isinstance(n, str) and n for n in names):
        raise ValueError(f'names must be {len(default_names)} distinct non-empty strings (the '
                         f'{len(classes)} things, then the 3 stuff classes), got {names!r}')
    default_ids = THING_CAT_IDS[:len(classes)] + STUFF_CAT_IDS
    cat_ids = default_ids if cat_ids is None else tuple(cat_ids)
    if len(cat_ids) != len(default_ids) or len(set(cat_ids)) != len(cat_ids) or \
            not all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                    for c in cat_ids):
        raise ValueError(f'cat_ids must be {len(default_ids)} distinct positive ints, got '
                         f'{cat_ids!r}')
    for name, n in (('num_train', num_train), ('num_val', num_val)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f'{name} must be a non-negative int, got {n!r}')
    for name, r in (('crowd_ratio', crowd_ratio), ('void_ratio', void_ratio)):
        if not 0 <= r <= 1:
            raise ValueError(f'{name} must be in [0, 1], got {r!r}')
    if isinstance(max_objects, bool) or not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f'max_objects must be a positive int, got {max_objects!r}')
    h_range, w_range = _size_ranges(img_size)
    if min(h_range[0], w_range[0]) < 32:
        raise ValueError(f'img_size must be at least 32 px a side (crowds and stuff regions '
                         f'need room), got {img_size!r}')
    obj_size = _range(obj_size, 'obj_size')
    params = dict(num_train=num_train, num_val=num_val, img_size=[list(h_range), list(w_range)],
                  classes=list(classes), seed=seed, obj_size=list(obj_size),
                  max_objects=max_objects, crowd_ratio=crowd_ratio, void_ratio=void_ratio,
                  names=list(names), cat_ids=list(cat_ids), version=1)
    root = osp.abspath(root)

    def write(tmp):
        os.makedirs(osp.join(tmp, 'annotations'))
        rng = np.random.default_rng(seed)
        k = len(classes)
        things = [dict(id=c, name=n, supercategory='shape', isthing=1)
                  for c, n in zip(cat_ids[:k], names[:k])]
        stuff = [dict(id=c, name=n, supercategory='background', isthing=0)
                 for c, n in zip(cat_ids[k:], names[k:])]
        ann_id = 1
        for split, n, first_img_id in (('train2017', num_train, 1000),
                                       ('val2017', num_val, 500000)):
            images, pan_anns, ins_anns, ann_id = _split(
                rng, tmp, split, n, first_img_id, ann_id, classes, h_range, w_range, obj_size,
                max_objects, crowd_ratio, void_ratio, cat_ids)
            info = dict(description='ckptzoo synthetic panoptic shapes', version='1')
            with open(osp.join(tmp, 'annotations', f'panoptic_{split}.json'), 'w',
                      encoding='utf-8') as f:
                json.dump(dict(info=info, licenses=[], images=images, annotations=pan_anns,
                               categories=things + stuff), f)
            with open(osp.join(tmp, 'annotations', f'instances_{split}.json'), 'w',
                      encoding='utf-8') as f:
                json.dump(dict(info=info, licenses=[], images=images, annotations=ins_anns,
                               categories=[{k: v for k, v in c.items() if k != 'isthing'}
                                           for c in things]), f)

    write_once(root, params, MARKER, 'generate_coco_panoptic', write)
    return root


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Write a small synthetic COCO panoptic dataset.')
    parser.add_argument('root', help='writes ROOT/annotations, ROOT/train2017, ROOT/val2017')
    parser.add_argument('--num-train', type=int, default=32)
    parser.add_argument('--num-val', type=int, default=8)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    print(generate_coco_panoptic(args.root, num_train=args.num_train, num_val=args.num_val,
                                 seed=args.seed))


if __name__ == '__main__':
    main()
