"""A tiny Open Images in its real file formats (what ``OpenImagesDataset`` /
``OpenImagesChallengeDataset`` and mmdet's ``openimages_detection.py`` / challenge configs
read), generated: no download.

Layout under ``root`` (mmdet's ``data/OpenImages/``)::

    annotations/class-descriptions-boxable.csv            /m/..,Name (no header)
    annotations/bbox_labels_600_hierarchy.json            Entity > Animal > Cat, Dog; ...
    annotations/oidv6-train-annotations-bbox.csv          normalised boxes, IsGroupOf, ...
    annotations/validation-annotations-bbox.csv
    annotations/validation-annotations-human-imagelabels-boxable.csv
    annotations/validation-image-metas.pkl                [dict(filename, ori_shape)]
    challenge2019/challenge-2019-{train,validation}-detection-bbox.txt
    challenge2019/cls-label-description.csv               /m/..,Name,id (ids from 1)
    challenge2019/class_label_tree.np                     relation matrix (+1 row/column)
    challenge2019/challenge-2019-validation-metas.pkl
    challenge2019/challenge-2019-validation-detection-human-imagelabels.csv
    OpenImages/train/<ImageID>.jpg, OpenImages/validation/<ImageID>.jpg

Six classes in a hierarchy: Animal (Cat, Dog), Vehicle (Car), Person. The images are the
shapes of :mod:`ckptzoo.datasets.synthetic_voc` (circle: Cat, square: Dog, triangle: Car);
every third object is marked group-of; the image-level labels give each image's classes
(confidence 1), their parents, and one class it does not show (confidence 0, as Open Images'
negative labels); every other image also has a positive ``Person`` label without a box. The
same arguments give byte-identical files; generation is atomic, a repeat call is a no-op.
"""
import csv
import json
import os
import os.path as osp
import pickle

import cv2
import numpy as np

from .synthetic_voc import _make_image, write_once

MARKER = '.ckptzoo_synthetic_openimages_complete.json'
#: (label name, display name, parent display name or None) in label order
CLASSES = (('/m/0jbk', 'Animal', None), ('/m/01yrx', 'Cat', 'Animal'),
           ('/m/0bt9lr', 'Dog', 'Animal'), ('/m/07yv9', 'Vehicle', None),
           ('/m/0k4j', 'Car', 'Vehicle'), ('/m/01g317', 'Person', None))
SHAPES = {'circle': 'Cat', 'square': 'Dog', 'triangle': 'Car'}


def _hierarchy():
    names = {d: n for n, d, _ in CLASSES}

    def node(display):
        children = [node(d) for _, d, p in CLASSES if p == display]
        out = dict(LabelName=names[display])
        if children:
            out['Subcategory'] = children
        return out
    return dict(LabelName='/m/0bl9f',
                Subcategory=[node(d) for _, d, p in CLASSES if p is None])


def _relation_matrix():
    index = {d: i for i, (_, d, _) in enumerate(CLASSES)}
    tree = np.eye(len(CLASSES) + 1)  # row / column 0: the root (mmdet drops it)
    for i, (_, _, parent) in enumerate(CLASSES):
        if parent is not None:
            tree[i + 1, index[parent] + 1] = 1
    return tree


def _write_csv(path, rows):
    with open(path, 'w', newline='', encoding='utf-8') as f:
        csv.writer(f, lineterminator='\n').writerows(rows)


def generate_openimages(root, num_train=6, num_val=6, img_size=((48, 64), (64, 80)), seed=0):
    """Write the dataset into ``root`` unless it is already complete with the same arguments;
    return ``root``."""
    for name, n in (('num_train', num_train), ('num_val', num_val)):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f'{name} must be a positive int, got {n!r}')
    params = dict(num_train=num_train, num_val=num_val,
                  img_size=[list(s) for s in img_size], seed=seed, version=1)
    root = osp.abspath(root)
    label = {d: n for n, d, _ in CLASSES}
    parent = {d: p for _, d, p in CLASSES}
    index = {d: i for i, (_, d, _) in enumerate(CLASSES)}

    def write(tmp):
        for sub in ('annotations', 'challenge2019', 'OpenImages/train', 'OpenImages/validation'):
            os.makedirs(osp.join(tmp, sub))
        _write_csv(osp.join(tmp, 'annotations', 'class-descriptions-boxable.csv'),
                   [(n, d) for n, d, _ in CLASSES])
        _write_csv(osp.join(tmp, 'challenge2019', 'cls-label-description.csv'),
                   [(n, d, i + 1) for i, (n, d, _) in enumerate(CLASSES)])
        with open(osp.join(tmp, 'annotations', 'bbox_labels_600_hierarchy.json'), 'w',
                  encoding='utf-8') as f:
            json.dump(_hierarchy(), f)
        with open(osp.join(tmp, 'challenge2019', 'class_label_tree.np'), 'wb') as f:
            np.save(f, _relation_matrix())
        rng = np.random.default_rng(seed)
        h_range, w_range = tuple(img_size[0]), tuple(img_size[1])
        for split, n, first in (('train', num_train, 0), ('validation', num_val, 1000)):
            box_rows = [('ImageID', 'Source', 'LabelName', 'Confidence', 'XMin', 'XMax', 'YMin',
                         'YMax', 'IsOccluded', 'IsTruncated', 'IsGroupOf', 'IsDepiction',
                         'IsInside')]
            label_rows = [('ImageID', 'Source', 'LabelName', 'Confidence')]
            challenge_labels = [('ImageID', 'LabelName', 'Confidence')]
            txt, metas, challenge_metas, k = [], [], [], 0
            for i in range(n):
                img_id = f'{first + i:016x}'
                img, objects = _make_image(rng, tuple(SHAPES), h_range, w_range, (12, 32), 3)
                h, w = img.shape[:2]
                ok, buf = cv2.imencode('.jpg', img, [cv2.IMWRITE_JPEG_QUALITY, 95])
                if not ok:
                    raise OSError(f'JPEG encoding failed for image {img_id}')
                buf.tofile(osp.join(tmp, 'OpenImages', split, f'{img_id}.jpg'))
                lines = []
                for obj in objects:
                    x1, y1, x2, y2 = obj['bbox']  # 1-based inclusive pixels
                    box = ((x1 - 1) / w, x2 / w, (y1 - 1) / h, y2 / h)
                    group = int(k % 3 == 2)
                    k += 1
                    name = SHAPES[obj['name']]
                    box_rows.append((img_id, 'xclick', label[name], 1, *(f'{v:.6f}' for v in box),
                                     0, obj['truncated'], group, 0, 0))
                    lines.append(f'{index[name] + 1} {box[0]:.6f} {box[2]:.6f} {box[1]:.6f} '
                                 f'{box[3]:.6f} {group}')
                shown = sorted({SHAPES[o['name']] for o in objects})
                positives = sorted(set(shown) | {parent[s] for s in shown})
                if i % 2:
                    positives.append('Person')
                negatives = [d for _, d, _ in CLASSES if d not in positives][:1]
                for d, conf in [(d, 1) for d in positives] + [(d, 0) for d in negatives]:
                    label_rows.append((img_id, 'verification', label[d], conf))
                    challenge_labels.append((img_id, label[d], conf))
                txt += [f'{split}/{img_id}.jpg\n', f'{w} {h}\n', f'{len(lines)}\n']
                txt += [line + '\n' for line in lines]
                meta = dict(filename=f'{split}/{img_id}.jpg', ori_shape=(h, w, 3))
                challenge_metas.append(meta)
                if lines:  # the CSV lists only images with boxes
                    metas.append(meta)
            prefix = 'oidv6-train' if split == 'train' else 'validation'
            _write_csv(osp.join(tmp, 'annotations', f'{prefix}-annotations-bbox.csv'),
                       box_rows)
            with open(osp.join(tmp, 'challenge2019',
                               f'challenge-2019-{split}-detection-bbox.txt'), 'w',
                      encoding='utf-8') as f:
                f.writelines(txt)
            if split == 'validation':
                _write_csv(osp.join(tmp, 'annotations', 'validation-annotations-human-'
                                    'imagelabels-boxable.csv'), label_rows)
                _write_csv(osp.join(tmp, 'challenge2019', 'challenge-2019-validation-'
                                    'detection-human-imagelabels.csv'), challenge_labels)
                for path, m in (('annotations/validation-image-metas.pkl', metas),
                                ('challenge2019/challenge-2019-validation-metas.pkl',
                                 challenge_metas)):
                    with open(osp.join(tmp, path), 'wb') as f:
                        pickle.dump(m, f, protocol=4)

    write_once(root, params, MARKER, 'generate_openimages', write)
    return root
