"""Tiny generated copies of the COCO-format datasets mmdet 2.28.2's configs name, each in its
real on-disk layout and json variant (no download): DeepFashion, Objects365 v1 / v2,
Cityscapes, LVIS v0.5 / v1. The shapes, boxes, polygon masks and crowds are those of
:func:`ckptzoo.datasets.synthetic_coco.generate_coco`; what differs is where the files lie and
how the json names them::

    deepfashion   ROOT/annotations/DeepFashion_segmentation_{query,gallery}.json,
                  ROOT/Img/img/WOMEN/Dresses/id_<n>/<k>_front.jpg
    objects365v1  ROOT/annotations/objects365_{train,val}.json (categories in shuffled order,
                  ids those of the names in Objects365 v1's CLASSES), ROOT/{train,val}/*.jpg
    objects365v2  ROOT/annotations/zhiyuan_objv2_{train,val}.json, file names
                  images/v1/patch<k>/objects365_v1_<id>.jpg read from ROOT/{train,val}/patch<k>/;
                  the train json also lists one of the images the release does not ship
    cityscapes    ROOT/annotations/instancesonly_filtered_gtFine_{train,val,test}.json,
                  ROOT/leftImg8bit/<split>/<city>/<city>_000000_<n>_leftImg8bit.png, the json's
                  ``segm_file``: ROOT/gtFine/<split>/<city>/..._gtFine_instanceIds.png (what
                  cityscapesscripts evaluates); category ids 24-33 as its label ids
    lvis_v0.5     ROOT/annotations/lvis_v0.5_{train,val}.json, ROOT/{train,val}2017/*.jpg
    lvis_v1       ROOT/annotations/lvis_v1_{train,val}.json with ``coco_url`` and no
                  ``file_name``, images ROOT/{train,val}2017/*.jpg

The LVIS jsons carry LVIS's fields: categories with ``frequency`` / ``synset`` /
``image_count`` / ``instance_count``, images with ``neg_category_ids`` and
``not_exhaustive_category_ids``; no crowd (LVIS has none). The same arguments give
byte-identical files; generation is atomic and a repeat call is a no-op.
"""
import json
import os
import os.path as osp
import shutil

import cv2
import numpy as np

from .synthetic_coco import generate_coco
from .synthetic_voc import write_once

MARKER = '.ckptzoo_synthetic_coco_variant_complete.json'
KINDS = ('deepfashion', 'objects365v1', 'objects365v2', 'cityscapes', 'lvis_v0.5', 'lvis_v1')
#: cityscapesscripts' label ids of the 8 instance classes
CITYSCAPES_IDS = dict(person=24, rider=25, car=26, truck=27, bus=28, train=31, motorcycle=32,
                      bicycle=33)


def _categories(kind):
    """All the kind's categories (as its real json: one per class of the dataset's
    ``CLASSES``), ``[(id, name)]``."""
    if kind == 'deepfashion':
        from .deepfashion import DeepFashionDataset
        classes = DeepFashionDataset.CLASSES
    elif kind in ('objects365v1', 'objects365v2'):
        from .objects365_classes import OBJECTS365V1_CLASSES, OBJECTS365V2_CLASSES
        classes = OBJECTS365V1_CLASSES if kind == 'objects365v1' else OBJECTS365V2_CLASSES
    elif kind == 'cityscapes':
        return [(i, n) for n, i in CITYSCAPES_IDS.items()]
    else:
        from .lvis_classes import LVISV05_CLASSES, LVISV1_CLASSES
        classes = LVISV05_CLASSES if kind == 'lvis_v0.5' else LVISV1_CLASSES
    return [(i + 1, n) for i, n in enumerate(classes)]


def _names_and_ids(kind):
    """The three categories the objects are drawn from: the 1st, 3rd and 6th."""
    picks = [_categories(kind)[k] for k in (0, 2, 5)]
    return tuple(n for _, n in picks), tuple(i for i, _ in picks)


def _splits(kind):
    """``(source split, json name, image folder)`` per split of the kind."""
    if kind == 'deepfashion':
        return [('train2017', 'DeepFashion_segmentation_query', 'Img'),
                ('val2017', 'DeepFashion_segmentation_gallery', 'Img')]
    if kind == 'objects365v1':
        return [('train2017', 'objects365_train', 'train'), ('val2017', 'objects365_val', 'val')]
    if kind == 'objects365v2':
        return [('train2017', 'zhiyuan_objv2_train', 'train'),
                ('val2017', 'zhiyuan_objv2_val', 'val')]
    if kind == 'cityscapes':
        return [('train2017', 'instancesonly_filtered_gtFine_train', 'leftImg8bit/train'),
                ('val2017', 'instancesonly_filtered_gtFine_val', 'leftImg8bit/val'),
                ('val2017', 'instancesonly_filtered_gtFine_test', 'leftImg8bit/test')]
    prefix = 'lvis_v0.5' if kind == 'lvis_v0.5' else 'lvis_v1'
    return [('train2017', f'{prefix}_train', 'train2017'),
            ('val2017', f'{prefix}_val', 'val2017')]


def _file_name(kind, split_dir, i, img):
    """The image's ``file_name`` in the kind's json and its path under the image folder."""
    if kind == 'deepfashion':
        name = f'img/WOMEN/Dresses/id_{img["id"]:08d}/0{i % 4 + 1}_1_front.jpg'
        return name, name
    if kind == 'objects365v1':
        name = f'obj365_{split_dir}_{img["id"]:012d}.jpg'
        return name, name
    if kind == 'objects365v2':
        patch = f'patch{i % 2}'
        base = f'objects365_v1_{img["id"]:08d}.jpg'
        return f'images/v1/{patch}/{base}', osp.join(patch, base)
    if kind == 'cityscapes':
        city = ('frankfurt', 'lindau', 'munster')[i % 3]
        name = f'{city}/{city}_000000_{img["id"]:06d}_leftImg8bit.png'
        return name, name
    name = f'{img["id"]:012d}.jpg'
    if kind == 'lvis_v0.5':  # COCO 2014's names in the json, 2017's on disk
        return f'COCO_val2014_{name}', name
    return None, osp.join(split_dir, name)


def _write_instance_ids(data, img, path):
    """Cityscapes' ``*_gtFine_instanceIds.png`` (16 bit): an object's pixels
    ``label_id * 1000 + k``, a crowd's ``label_id``, 0 elsewhere."""
    from pycocotools import mask as mask_utils
    h, w = img['height'], img['width']
    ids = np.zeros((h, w), dtype=np.uint16)
    anns = [a for a in data['annotations'] if a['image_id'] == img['id']]
    for k, ann in enumerate(anns):
        seg = ann['segmentation']
        rles = mask_utils.frPyObjects(seg, h, w)
        mask = mask_utils.decode(mask_utils.merge(rles) if isinstance(rles, list) else rles)
        ids[mask > 0] = ann['category_id'] * (1 if ann['iscrowd'] else 1000) + \
            (0 if ann['iscrowd'] else k)
    os.makedirs(osp.dirname(path), exist_ok=True)
    if not cv2.imwrite(path, ids):
        raise OSError(f'PNG encoding failed for {path}')


def _adapt(kind, data, split_dir, src_dir, img_dir, folder):
    ids = _names_and_ids(kind)[1]
    images = []
    for i, img in enumerate(data['images']):
        json_name, rel = _file_name(kind, split_dir, i, img)
        dst = osp.join(img_dir, rel)
        os.makedirs(osp.dirname(dst), exist_ok=True)
        src = osp.join(src_dir, img['file_name'])
        if dst.endswith('.png'):
            cv2.imwrite(dst, cv2.imread(src))
        else:
            shutil.copyfile(src, dst)
        img = dict(img)
        if kind == 'lvis_v1':
            del img['file_name']
            img['coco_url'] = f'http://images.cocodataset.org/{rel}'
        else:
            img['file_name'] = json_name
        if kind == 'cityscapes':
            img['segm_file'] = json_name.replace('_leftImg8bit.png', '_gtFine_instanceIds.png')
            _write_instance_ids(data, img, osp.join(
                osp.dirname(osp.dirname(img_dir)), 'gtFine', osp.basename(img_dir),
                img['segm_file']))
        if kind.startswith('lvis'):
            present = {a['category_id'] for a in data['annotations']
                       if a['image_id'] == img['id']}
            img['neg_category_ids'] = [c for c in ids if c not in present][:1]
            img['not_exhaustive_category_ids'] = sorted(present)[:1] if i % 2 else []
        images.append(img)
    data['images'] = images
    data['categories'] = [dict(id=i, name=n, supercategory='shape')
                          for i, n in _categories(kind)]
    if kind == 'objects365v1':  # v1 lists its categories unsorted
        cats = data['categories']
        data['categories'] = cats[1::2][::-1] + cats[::2]
    if kind == 'objects365v2' and split_dir == 'train':
        # an image the release lists but does not ship (mmdet's ignore list), with an object
        data['images'].append(dict(id=908726, width=64, height=48,
                                   file_name='images/v2/patch16/objects365_v2_00908726.jpg'))
        data['annotations'].append(dict(id=10 ** 6, image_id=908726, category_id=ids[0],
                                        bbox=[1.0, 1.0, 20.0, 20.0], area=400.0, iscrowd=0))
    if kind.startswith('lvis'):
        data['annotations'] = [a for a in data['annotations'] if not a['iscrowd']]
        for a in data['annotations']:
            del a['iscrowd']
        from .lvis_classes import LVISV05_CLASSES, LVISV1_CLASSES
        classes = LVISV05_CLASSES if kind == 'lvis_v0.5' else LVISV1_CLASSES
        data['categories'] = []  # all of LVIS's, ids 1.. in the order of its CLASSES
        for k, name in enumerate(classes):
            anns = [a for a in data['annotations'] if a['category_id'] == k + 1]
            data['categories'].append(dict(
                id=k + 1, name=name, synset=f'{name}.n.01', frequency='rcf'[k % 3],
                image_count=len({a['image_id'] for a in anns}), instance_count=len(anns)))
    return data


def generate_coco_variant(root, kind, num_train=8, num_val=8, img_size=(48, 64), seed=0):
    """Write the ``kind`` (one of :data:`KINDS`) layout into ``root`` unless it is already
    complete with the same arguments; return ``root``."""
    if kind not in KINDS:
        raise ValueError(f'kind must be one of {KINDS}, got {kind!r}')
    params = dict(kind=kind, num_train=num_train, num_val=num_val,
                  img_size=list(img_size), seed=seed, version=1)
    root = osp.abspath(root)
    names, ids = _names_and_ids(kind)

    def write(tmp):
        src = osp.join(tmp, '.source')
        generate_coco(src, num_train=num_train, num_val=num_val, img_size=tuple(img_size),
                      names=names, cat_ids=ids, seed=seed)
        os.makedirs(osp.join(tmp, 'annotations'))
        for split, json_name, folder in _splits(kind):
            with open(osp.join(src, 'annotations', f'instances_{split}.json'),
                      encoding='utf-8') as f:
                data = json.load(f)
            split_dir = osp.basename(folder) if kind != 'lvis_v1' else split
            data = _adapt(kind, data, split_dir, osp.join(src, split),
                          tmp if kind == 'lvis_v1' else osp.join(tmp, folder), folder)
            with open(osp.join(tmp, 'annotations', f'{json_name}.json'), 'w',
                      encoding='utf-8') as f:
                json.dump(data, f)
        shutil.rmtree(src)

    write_once(root, params, MARKER, 'generate_coco_variant', write)
    return root
