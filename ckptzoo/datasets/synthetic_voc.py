"""A small, deterministic Pascal-VOC-format dataset of coloured shapes, for tests and for
training a tiny detector in minutes on a CPU (no download needed).

Layout (what ``VOCDataset`` reads)::

    root/VOCdevkit/VOC2007/JPEGImages/000001.jpg
                          /Annotations/000001.xml   (size, objects: name, pose, truncated,
                                                     difficult, bndbox in 1-based pixels)
                          /ImageSets/Main/trainval.txt, test.txt

Each image (96-128 px a side by default) has 1-3 non-overlapping filled shapes of 16-48 px,
one colour per class on a grey, slightly noisy background. An object whose box is shorter than
20 px on a side is marked difficult; about 1 in 10 objects sticks out of the image and is
marked truncated (its box is clipped to the image). The same arguments give byte-identical
files.

Generation writes into a temporary folder that is renamed into place with a marker file
(holding the arguments) written last, so an interrupted run leaves nothing half-made and
calling ``generate_voc`` again (e.g. from a config on first use) is a no-op once done.

CLI: ``python -m ckptzoo.datasets.synthetic_voc ROOT [--num-trainval N] [--num-test N]``.
"""
import argparse
import json
import os
import os.path as osp
import shutil
import tempfile
import xml.etree.ElementTree as ET

import cv2
import numpy as np

#: Shape -> BGR colour; class names must be among these.
SHAPE_COLORS = {
    'circle': (40, 40, 220),      # red
    'square': (40, 200, 40),      # green
    'triangle': (220, 60, 40),    # blue
    'diamond': (30, 200, 230),    # yellow
    'ring': (200, 40, 200),       # magenta
}
SYNTHETIC_CLASSES = ('circle', 'square', 'triangle')
MARKER = '.ckptzoo_synthetic_complete.json'
DIFFICULT_BELOW = 20  # px: a box side shorter than this marks the object difficult


def _range(value, name):
    if isinstance(value, int):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and \
            all(isinstance(v, int) and v > 0 for v in value) and value[0] <= value[1]:
        return int(value[0]), int(value[1])
    raise ValueError(f'{name} must be a positive int or an (min, max) pair of ints, '
                     f'got {value!r}')


def _size_ranges(img_size):
    """``(h, w)`` ints, one int, or ``((h_min, h_max), (w_min, w_max))``."""
    if isinstance(img_size, int):
        return (img_size, img_size), (img_size, img_size)
    if isinstance(img_size, (tuple, list)) and len(img_size) == 2:
        return _range(img_size[0], 'img_size[0]'), _range(img_size[1], 'img_size[1]')
    raise ValueError(f'img_size must be an int, (h, w) or ((h_min, h_max), (w_min, w_max)), '
                     f'got {img_size!r}')


def _draw(mask, shape, x0, y0, s):
    """Draw ``shape`` filling the square [x0, x0+s) x [y0, y0+s) into ``mask`` (255)."""
    x1, y1 = x0 + s - 1, y0 + s - 1
    if shape == 'square':
        cv2.rectangle(mask, (x0, y0), (x1, y1), 255, thickness=-1)
    elif shape in ('circle', 'ring'):
        c, r = (x0 + x1) // 2, (y0 + y1) // 2
        cv2.circle(mask, (c, r), s // 2, 255, thickness=-1)
        if shape == 'ring':
            cv2.circle(mask, (c, r), max(s // 4, 1), 0, thickness=-1)
    elif shape == 'triangle':
        pts = np.array([[(x0 + x1) // 2, y0], [x0, y1], [x1, y1]], dtype=np.int32)
        cv2.fillPoly(mask, [pts], 255)
    elif shape == 'diamond':
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        pts = np.array([[cx, y0], [x1, cy], [cx, y1], [x0, cy]], dtype=np.int32)
        cv2.fillPoly(mask, [pts], 255)
    else:
        raise ValueError(f'unknown shape {shape!r}; known: {sorted(SHAPE_COLORS)}')


def _iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _make_image(rng, classes, h_range, w_range, obj_size, max_objects, min_objects=1,
                keep_masks=False, attempts=20):
    """An image and its objects (VOC boxes); ``keep_masks`` adds each object's ``mask``. Each
    object gets ``attempts`` tries at a spot overlapping no placed one (IoU < 0.05); one that
    finds none is left out."""
    h = int(rng.integers(h_range[0], h_range[1] + 1))
    w = int(rng.integers(w_range[0], w_range[1] + 1))
    bg = int(rng.integers(90, 170))
    img = np.full((h, w, 3), bg, dtype=np.int16)
    img += rng.integers(-12, 13, size=(h, w, 1), dtype=np.int16)
    objects, placed = [], []
    num = int(rng.integers(min_objects, max_objects + 1))
    for _ in range(num):
        for _attempt in range(attempts):
            cls = int(rng.integers(len(classes)))
            s = int(rng.integers(obj_size[0], min(obj_size[1], h, w) + 1))
            truncated = rng.random() < 0.1
            lo = -s // 3 if truncated else 0
            x0 = int(rng.integers(lo, w - s - lo + 1))
            y0 = int(rng.integers(lo, h - s - lo + 1))
            square = (x0, y0, x0 + s, y0 + s)
            if all(_iou(square, p) < 0.05 for p in placed):
                break
        else:
            continue
        mask = np.zeros((h, w), dtype=np.uint8)
        _draw(mask, classes[cls], x0, y0, s)
        ys, xs = np.nonzero(mask)
        if len(xs) == 0:
            continue
        placed.append(square)
        colour = np.array(SHAPE_COLORS[classes[cls]], dtype=np.int16)
        colour = colour + rng.integers(-15, 16, size=3, dtype=np.int16)
        img[mask > 0] = colour
        # VOC boxes: 1-based, inclusive pixel indices
        box = (int(xs.min()) + 1, int(ys.min()) + 1, int(xs.max()) + 1, int(ys.max()) + 1)
        clipped = x0 < 0 or y0 < 0 or x0 + s > w or y0 + s > h
        small = min(box[2] - box[0] + 1, box[3] - box[1] + 1) < DIFFICULT_BELOW
        objects.append(dict(name=classes[cls], bbox=box, truncated=int(clipped),
                            difficult=int(small)))
        if keep_masks:
            objects[-1]['mask'] = mask
    return np.clip(img, 0, 255).astype(np.uint8), objects


def _annotation_xml(img_id, year, h, w, objects):
    ann = ET.Element('annotation')
    ET.SubElement(ann, 'folder').text = year
    ET.SubElement(ann, 'filename').text = f'{img_id}.jpg'
    source = ET.SubElement(ann, 'source')
    ET.SubElement(source, 'database').text = 'ckptzoo synthetic shapes'
    size = ET.SubElement(ann, 'size')
    ET.SubElement(size, 'width').text = str(w)
    ET.SubElement(size, 'height').text = str(h)
    ET.SubElement(size, 'depth').text = '3'
    ET.SubElement(ann, 'segmented').text = '0'
    for obj in objects:
        o = ET.SubElement(ann, 'object')
        ET.SubElement(o, 'name').text = obj['name']
        ET.SubElement(o, 'pose').text = 'Unspecified'
        ET.SubElement(o, 'truncated').text = str(obj['truncated'])
        ET.SubElement(o, 'difficult').text = str(obj['difficult'])
        bb = ET.SubElement(o, 'bndbox')
        for tag, v in zip(('xmin', 'ymin', 'xmax', 'ymax'), obj['bbox']):
            ET.SubElement(bb, tag).text = str(v)
    ET.indent(ann)
    return ET.tostring(ann, encoding='unicode') + '\n'


def write_once(target, params, marker_name, owner, write):
    """Make ``target`` with ``write(tmp)`` in a temporary sibling, then rename it into place.

    A marker holding ``params`` is written last, so a killed run leaves no half dataset that
    looks complete, a copy made with the same ``params`` is reused, and two processes racing to
    make the same copy both succeed.
    """
    marker = osp.join(target, marker_name)
    if osp.exists(target):
        if not osp.isfile(marker):
            raise FileExistsError(f'{target!r} exists but was not made (completely) by {owner}; '
                                  f'remove it or choose another root')
        with open(marker, encoding='utf-8') as f:
            if json.load(f) == params:
                return
        shutil.rmtree(target)  # ours, made with other arguments
    parent = osp.dirname(target)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f'.{osp.basename(target)}.tmp-', dir=parent)
    try:
        write(tmp)
        with open(osp.join(tmp, marker_name), 'w', encoding='utf-8') as f:
            json.dump(params, f, sort_keys=True)
        os.chmod(tmp, 0o755)  # mkdtemp made it private
        try:
            os.rename(tmp, target)
        except OSError:
            # another process finished first; keep its copy if it matches
            if osp.isfile(marker):
                with open(marker, encoding='utf-8') as f:
                    if json.load(f) == params:
                        shutil.rmtree(tmp, ignore_errors=True)
                        return
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def generate_voc(root, num_trainval=256, num_test=64, img_size=((96, 128), (96, 128)),
                 classes=SYNTHETIC_CLASSES, seed=0, year='VOC2007', obj_size=(16, 48),
                 max_objects=3, names=None):
    """Write the dataset under ``root/VOCdevkit/<year>`` unless it is already complete with the
    same arguments; return ``root/VOCdevkit``.

    ``names`` (one per class) are the object names written to the XML instead of the shape
    names, e.g. VOC's own class names, so a config with the 20 VOC classes reads the data.

    A complete dataset made with other arguments is replaced; a folder that this function did
    not make (no marker) is never touched: that is an error.
    """
    classes = tuple(classes)
    unknown = [c for c in classes if c not in SHAPE_COLORS]
    if unknown or not classes:
        raise ValueError(f'classes must be shape names from {sorted(SHAPE_COLORS)}, '
                         f'got {classes!r}')
    for name, n in (('num_trainval', num_trainval), ('num_test', num_test)):
        if not isinstance(n, int) or n < 0:
            raise ValueError(f'{name} must be a non-negative int, got {n!r}')
    if year not in ('VOC2007', 'VOC2012'):
        raise ValueError(f"year must be 'VOC2007' or 'VOC2012', got {year!r}")
    names = tuple(classes if names is None else names)
    if len(names) != len(classes) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f'names must be {len(classes)} non-empty strings (one per class), '
                         f'got {names!r}')
    h_range, w_range = _size_ranges(img_size)
    obj_size = _range(obj_size, 'obj_size')
    if not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f'max_objects must be a positive int, got {max_objects!r}')
    params = dict(num_trainval=num_trainval, num_test=num_test,
                  img_size=[list(h_range), list(w_range)], classes=list(classes), seed=seed,
                  year=year, obj_size=list(obj_size), max_objects=max_objects, version=1)
    if names != classes:
        params['names'] = list(names)

    devkit = osp.join(root, 'VOCdevkit')

    def write(tmp):
        for sub in ('JPEGImages', 'Annotations', osp.join('ImageSets', 'Main')):
            os.makedirs(osp.join(tmp, sub))
        rng = np.random.default_rng(seed)
        ids = [f'{i:06d}' for i in range(1, num_trainval + num_test + 1)]
        for img_id in ids:
            img, objects = _make_image(rng, classes, h_range, w_range, obj_size, max_objects)
            for obj in objects:
                obj['name'] = names[classes.index(obj['name'])]
            ok, buf = cv2.imencode('.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 95])
            if not ok:
                raise OSError(f'JPEG encoding failed for image {img_id}')
            buf.tofile(osp.join(tmp, 'JPEGImages', f'{img_id}.jpg'))
            with open(osp.join(tmp, 'Annotations', f'{img_id}.xml'), 'w',
                      encoding='utf-8') as f:
                f.write(_annotation_xml(img_id, year, img.shape[0], img.shape[1], objects))
        for name, part in (('trainval', ids[:num_trainval]), ('test', ids[num_trainval:])):
            with open(osp.join(tmp, 'ImageSets', 'Main', f'{name}.txt'), 'w',
                      encoding='utf-8') as f:
                f.write(''.join(f'{i}\n' for i in part))

    write_once(osp.join(devkit, year), params, MARKER, 'generate_voc', write)
    return devkit


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write a small synthetic VOC-format dataset.')
    parser.add_argument('root', help='writes ROOT/VOCdevkit/<year>')
    parser.add_argument('--num-trainval', type=int, default=256)
    parser.add_argument('--num-test', type=int, default=64)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--year', default='VOC2007', choices=['VOC2007', 'VOC2012'])
    args = parser.parse_args(argv)
    out = generate_voc(args.root, num_trainval=args.num_trainval, num_test=args.num_test,
                       seed=args.seed, year=args.year)
    print(f'synthetic VOC dataset ready at {osp.join(out, args.year)}')


if __name__ == '__main__':
    main()
