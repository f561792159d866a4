import json
import os.path as osp

import cv2
import numpy as np
import pytest
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_coco import MARKER


def _files(root):
    out = {}
    for split in ('train2017', 'val2017'):
        path = osp.join(root, 'annotations', f'instances_{split}.json')
        out[split] = open(path, 'rb').read()
    return out


def test_deterministic_once_and_crowd_and_empty(tmp_path):
    a = generate_coco(str(tmp_path / 'a'), num_train=6, num_val=3, img_size=(48, 64))
    b = generate_coco(str(tmp_path / 'b'), num_train=6, num_val=3, img_size=(48, 64))
    assert _files(a) == _files(b)
    first = open(osp.join(a, 'train2017', '000000001000.jpg'), 'rb').read()
    assert first == open(osp.join(b, 'train2017', '000000001000.jpg'), 'rb').read()
    mtime = osp.getmtime(osp.join(a, MARKER))
    assert generate_coco(str(tmp_path / 'a'), num_train=6, num_val=3, img_size=(48, 64)) == a
    assert osp.getmtime(osp.join(a, MARKER)) == mtime  # no-op the second time

    coco = COCO(osp.join(a, 'annotations', 'instances_train2017.json'))
    assert sorted(coco.getCatIds()) == [1, 3, 5]
    imgs = coco.dataset['images']
    assert imgs[1]['id'] not in coco.imgToAnns or not coco.imgToAnns[imgs[1]['id']]
    crowd = [a for a in coco.dataset['annotations'] if a['iscrowd']]
    assert crowd and crowd[0]['image_id'] == imgs[0]['id']
    for ann in coco.dataset['annotations']:
        m = coco.annToMask(ann)  # polygons and the crowd RLE decode to the object's pixels
        ys, xs = np.nonzero(m)
        x, y, w, h = ann['bbox']
        assert xs.min() >= x - 1 and xs.max() <= x + w and ys.min() >= y - 1 \
            and ys.max() <= y + h
    # the crowd RLE is exact: its area and box are those of the decoded mask
    rle = mask_utils.frPyObjects(crowd[0]['segmentation'], *crowd[0]['segmentation']['size'])
    assert mask_utils.area(rle) == crowd[0]['area']
    np.testing.assert_allclose(mask_utils.toBbox(rle), crowd[0]['bbox'])


def test_arguments_checked_and_foreign_folder_kept(tmp_path):
    with pytest.raises(ValueError, match='classes'):
        generate_coco(str(tmp_path / 'x'), classes=('hexagon',))
    with pytest.raises(ValueError, match='cat_ids'):
        generate_coco(str(tmp_path / 'x'), cat_ids=(1, 1, 2))
    (tmp_path / 'mine').mkdir()
    with pytest.raises(FileExistsError, match='generate_coco'):
        generate_coco(str(tmp_path / 'mine'))
    root = generate_coco(str(tmp_path / 'n'), num_train=2, num_val=0, img_size=32,
                         names=('person', 'bicycle', 'car'), cat_ids=(1, 2, 3))
    cats = json.load(open(osp.join(root, 'annotations', 'instances_train2017.json')))
    assert [c['name'] for c in cats['categories']] == ['person', 'bicycle', 'car']


def test_image_shapes_in_turn_and_a_crowded_image(tmp_path):
    from ckptzoo.datasets import CocoDataset
    # landscape, portrait, the crowded one (image 2: room for 150 shapes of 8-12 px), square
    shapes = [(48, 80), (80, 48), (160, 200), (64, 64)]
    root = generate_coco(str(tmp_path / 'v'), num_train=6, num_val=2, img_shapes=shapes,
                         crowded_objects=150, crowded_obj_size=(8, 12))
    data = json.load(open(osp.join(root, 'annotations', 'instances_train2017.json')))
    assert [(i['height'], i['width']) for i in data['images']] == (shapes * 2)[:6]
    for img in data['images']:  # the files are the sizes the json says
        arr = cv2.imread(osp.join(root, 'train2017', img['file_name']))
        assert arr.shape[:2] == (img['height'], img['width'])
    ds = CocoDataset(ann_file=osp.join(root, 'annotations', 'instances_train2017.json'),
                     img_prefix=osp.join(root, 'train2017'), pipeline=[],
                     classes=('circle', 'square', 'triangle'))
    counts = [len(ds.get_ann_info(i)['bboxes']) for i in range(len(ds))]
    assert max(counts) == 150 and counts.count(150) == 1  # the third image only
    marker = json.load(open(osp.join(root, MARKER)))
    assert marker['img_shapes'] == [list(s) for s in shapes]
    assert marker['crowded_objects'] == 150 and marker['crowded_obj_size'] == [8, 12]
    with pytest.raises(ValueError, match='crowded_objects=150: only'):
        generate_coco(str(tmp_path / 'small'), num_train=3, num_val=0, img_shapes=[(40, 40)],
                      crowded_objects=150)
    with pytest.raises(ValueError, match='img_shapes'):
        generate_coco(str(tmp_path / 'bad'), img_shapes=[(40, 0)])
