"""The COCO instances json, checked when ``CocoDataset`` reads it: each problem is an error
naming the file and the entry (mmdet 2.28.2 failed later, or trained on wrong data)."""
import math
import numbers
import os.path as osp

__all__ = ['check_coco_json']


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
