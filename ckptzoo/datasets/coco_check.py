"""The checks of a COCO instances json's annotations, each problem an error naming the file and
the entry (mmdet 2.28.2 failed later, or trained on wrong data): :func:`check_coco_json` when
``CocoDataset`` reads the json; :func:`check_coco_masks`, the masks training reads (with
``LoadAnnotations(with_mask=True)``); :func:`no_objects_message`, a training set none of whose
images has a box to train on (every annotation a crowd, say)."""
import math
import numbers
import os.path as osp
import warnings

from .mask_ann import mask_ann_problem

__all__ = ['check_coco_json', 'check_coco_masks', 'no_objects_message']


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _fields(entries, section, required, ann_file):
    if not isinstance(entries, list):
        raise ValueError(f'COCO json {ann_file!r}: {section!r} must be a list, '
                         f'got {type(entries).__name__}')
    ids = set()
    for i, entry in enumerate(entries):
        missing = [k for k in required if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise ValueError(f'COCO json {ann_file!r}: {section}[{i}] has no '
                             f'{", ".join(map(repr, missing))} (needs {list(required)})')
        if entry['id'] in ids:
            raise ValueError(f'COCO json {ann_file!r}: {section}[{i}] repeats id '
                             f'{entry["id"]!r}; ids must be unique')
        ids.add(entry['id'])
    return ids


def check_coco_json(data, ann_file, img_prefix=None):
    """Raise a ValueError / FileNotFoundError naming ``ann_file`` and the entry for what
    ``CocoDataset`` cannot use; ``img_prefix`` (a local folder) also checks the image files."""
    if not isinstance(data, dict):
        raise ValueError(f'COCO json {ann_file!r} must hold an object with images, '
                         f'annotations and categories, got {type(data).__name__}')
    for key in ('images', 'categories'):
        if key not in data:
            raise ValueError(f'COCO json {ann_file!r} has no {key!r} (keys: {sorted(data)})')
    img_ids = _fields(data['images'], 'images', ('id', 'file_name', 'width', 'height'),
                      ann_file)
    cat_ids = _fields(data['categories'], 'categories', ('id', 'name'), ann_file)
    _fields(data.get('annotations', []), 'annotations', ('id', 'image_id', 'category_id',
                                                         'bbox'), ann_file)
    for i, img in enumerate(data['images']):
        if not (_is_number(img['width']) and _is_number(img['height'])
                and img['width'] > 0 and img['height'] > 0):
            raise ValueError(f'COCO json {ann_file!r}: images[{i}] (id {img["id"]!r}): width '
                             f'and height must be positive numbers, got {img["width"]!r}, '
                             f'{img["height"]!r}')
        if img_prefix is not None:
            path = osp.join(img_prefix, img['file_name'])
            if not osp.isfile(path):
                raise FileNotFoundError(f'COCO json {ann_file!r}: images[{i}] (id '
                                        f'{img["id"]!r}): image file {path!r} does not exist')
    for i, ann in enumerate(data.get('annotations', [])):
        where = f'COCO json {ann_file!r}: annotations[{i}] (id {ann["id"]!r})'
        if ann['image_id'] not in img_ids:
            raise ValueError(f'{where}: image_id {ann["image_id"]!r} is not the id of an image')
        if ann['category_id'] not in cat_ids:
            raise ValueError(f'{where}: unknown category_id {ann["category_id"]!r}; the '
                             f'categories are {sorted(cat_ids, key=str)}')
        bbox = ann['bbox']
        if not (isinstance(bbox, (list, tuple)) and len(bbox) == 4
                and all(_is_number(v) for v in bbox) and bbox[2] >= 0 and bbox[3] >= 0):
            raise ValueError(f'{where}: malformed bbox {bbox!r}; a bbox is [x, y, width, '
                             f'height], 4 finite numbers with width, height >= 0')


def check_coco_masks(dataset):
    """The masks of the objects a ``CocoDataset`` (``dataset``) trains on (non-crowd, kept):
    each an error naming the json and the annotation id when it cannot be its image's mask (see
    :mod:`ckptzoo.datasets.mask_ann`: no ``segmentation``, no polygon of 3 points, an RLE
    of another size); polygons of fewer than 3 points beside valid ones are dropped, as
    mmdet drops them, with one warning counting them."""
    where = f'COCO json {dataset.ann_file!r}'
    missing, dropped = [], []
    for info in dataset.data_infos:
        anns = dataset.coco.load_anns(dataset.coco.get_ann_ids(img_ids=[info['id']]))
        for ann, _, crowd in dataset._kept_anns(info, anns):
            if crowd:
                continue
            if ann.get('segmentation') is None:
                missing.append(ann['id'])
                continue
            problem, n = mask_ann_problem(ann['segmentation'], info['height'],
                                          info['width'])
            if problem is not None:
                raise ValueError(f'{where}: annotation id {ann["id"]!r} (image '
                                 f'{info["file_name"]!r}): {problem}')
            if n:
                dropped.append((ann['id'], n))
    if missing:
        if not any('segmentation' in a for a in dataset.coco.dataset.get('annotations', [])):
            raise ValueError(f'{where} has no instance masks (no annotation has a '
                             f"'segmentation'), but the pipeline has "
                             f'LoadAnnotations(with_mask=True); use with_mask=False or a '
                             f'json with masks')
        raise ValueError(f"{where}: annotation ids {missing[:5]} ({len(missing)} in all) "
                         f"have no 'segmentation'; LoadAnnotations(with_mask=True) needs "
                         f'a mask for every object')
    if dropped:
        warnings.warn(f'{where}: {sum(n for _, n in dropped)} polygons of fewer than 3 '
                      f'points are dropped (annotation ids '
                      f'{[i for i, _ in dropped[:5]]}{"..." if len(dropped) > 5 else ""}); '
                      f'their annotations keep their other polygons')


def no_objects_message(dataset):
    """Why none of the training images has a box to train on (every annotation a crowd,
    or left out, or none at all), or None (``dataset``: a ``CocoDataset``): mmdet trains such
    a set with every box and mask loss 0, without a word."""
    total = crowd = 0
    for info in dataset.data_infos:
        anns = dataset.coco.imgToAnns.get(info['id'], [])
        total += len(anns)
        for _, _, is_crowd in dataset._kept_anns(info, anns):
            if not is_crowd:
                return None
            crowd += 1
    n = len(dataset.data_infos)
    if total and crowd == total:
        which = (f'all {total} annotations of its {n} training images are crowd'
                 if total > 1 else f'the only annotation of its {n} training images is a '
                 'crowd')
        why = (f'{which} (iscrowd=1, which mmdet ignores for training: crowd boxes become '
               'gt_bboxes_ignore)')
    elif total:
        why = (f'of the {total} annotations of its {n} training images, {crowd} are crowd '
               f'(iscrowd=1, which mmdet ignores for training) and {total - crowd} are left '
               f'out (ignore=1, no area inside the image, or a category not in the '
               f'classes)')
    else:
        why = f'its {n} training images have no annotation (filter_empty_gt=False keeps them)'
    return (f'{type(dataset).__name__}: no training image of {dataset.ann_file!r} has an object '
            f'to train on: {why}, so every box and mask loss would be 0. Train on '
            f'annotations with iscrowd=0 (or add such a dataset to this one)')
