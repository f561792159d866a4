"""The COCO-format datasets of mmdet 2.28.2's configs (DeepFashion, Objects365 v1 / v2,
Cityscapes) on generated copies in their real layouts: annotations parsed as mmdet parses them,
mmdet's filtering, and ``evaluate`` giving mmdet's numbers on the fixture (computed by mmdet
2.28.2 on these files and these detections; Cityscapes' ``*_mAP_75`` differ where mmdet's
float ``arange`` of IoU thresholds lost 0.75: see ckptzoo/datasets/cityscapes.py)."""
import contextlib
import io
import json
import os.path as osp

import numpy as np
import pytest

import ckptzoo.datasets as datasets
from ckptzoo.datasets import build_dataset, generate_coco_variant
from tests.helpers.fake_detections import fake_results, with_box_masks

# kind, train json / images, val json / images, with masks
CASES = {
    'DeepFashionDataset': ('deepfashion', 'annotations/DeepFashion_segmentation_query.json',
                           'Img/', 'annotations/DeepFashion_segmentation_gallery.json', 'Img/',
                           True),
    'Objects365V1Dataset': ('objects365v1', 'annotations/objects365_train.json', 'train/',
                            'annotations/objects365_val.json', 'val/', False),
    'Objects365V2Dataset': ('objects365v2', 'annotations/zhiyuan_objv2_train.json', 'train/',
                            'annotations/zhiyuan_objv2_val.json', 'val/', False),
    'CityscapesDataset': ('cityscapes', 'annotations/instancesonly_filtered_gtFine_train.json',
                          'leftImg8bit/train/',
                          'annotations/instancesonly_filtered_gtFine_val.json',
                          'leftImg8bit/val/', True),
}
# mmdet 2.28.2's evaluate on each fixture (val split, test_mode) with
# fake_results(anns, num_classes, span=40) and, for masks, with_box_masks
MMDET = {'DeepFashionDataset': {'bbox_mAP': 0.195,
                        'bbox_mAP_50': 0.3526,
                        'bbox_mAP_75': 0.1959,
                        'bbox_mAP_s': 0.1864,
                        'bbox_mAP_m': 0.7505,
                        'bbox_mAP_l': -1.0,
                        'segm_mAP': 0.1234,
                        'segm_mAP_50': 0.2192,
                        'segm_mAP_75': 0.1429,
                        'segm_mAP_s': 0.1143,
                        'segm_mAP_m': 0.9,
                        'segm_mAP_l': -1.0},
 'Objects365V1Dataset': {'bbox_mAP': 0.1177,
                         'bbox_mAP_50': 0.2132,
                         'bbox_mAP_75': 0.102,
                         'bbox_mAP_s': 0.1289,
                         'bbox_mAP_m': 0.404,
                         'bbox_mAP_l': -1.0},
 'Objects365V2Dataset': {'bbox_mAP': 0.1177,
                         'bbox_mAP_50': 0.2132,
                         'bbox_mAP_75': 0.102,
                         'bbox_mAP_s': 0.1289,
                         'bbox_mAP_m': 0.404,
                         'bbox_mAP_l': -1.0},
 'CityscapesDataset': {'bbox_mAP': 0.2001,
                       'bbox_mAP_50': 0.3892,
                       'bbox_mAP_75': -1.0,
                       'bbox_mAP_s': 0.1842,
                       'bbox_mAP_m': 0.8,
                       'bbox_mAP_l': -1.0,
                       'segm_mAP': 0.0956,
                       'segm_mAP_50': 0.2226,
                       'segm_mAP_75': -1.0,
                       'segm_mAP_s': 0.0822,
                       'segm_mAP_m': 0.7252,
                       'segm_mAP_l': -1.0}}

# images of the train split kept for training, mmdet's count
MMDET_TRAIN_LEN = {'DeepFashionDataset': 5, 'Objects365V1Dataset': 5, 'Objects365V2Dataset': 5,
                   'CityscapesDataset': 3}


@pytest.fixture(scope='module')
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp('coco_variants')
    return {name: generate_coco_variant(str(base / case[0]), case[0])
            for name, case in CASES.items()}


def _ds(roots, name, test_mode, **kw):
    _, tr_ann, tr_img, va_ann, va_img, _ = CASES[name]
    ann, img = (va_ann, va_img) if test_mode else (tr_ann, tr_img)
    root = roots[name]
    return getattr(datasets, name)(ann_file=osp.join(root, ann), img_prefix=osp.join(root, img),
                                   pipeline=[], test_mode=test_mode, **kw)


@pytest.mark.parametrize('name', list(CASES))
def test_evaluate_equals_mmdet(roots, name):
    ds = _ds(roots, name, test_mode=True)
    assert len(ds) == 8
    results = fake_results([ds.get_ann_info(i) for i in range(len(ds))], len(ds.CLASSES),
                           span=40)
    metrics = ['bbox']
    if CASES[name][-1]:
        results, metrics = with_box_masks(ds.data_infos, results), ['bbox', 'segm']
    with contextlib.redirect_stdout(io.StringIO()):
        out = ds.evaluate(results, metric=metrics)
    expected = dict(MMDET[name])
    if name == 'CityscapesDataset':  # mmdet lost IoU 0.75 (-1): ours is COCO's
        assert expected.pop('bbox_mAP_75') == expected.pop('segm_mAP_75') == -1
        assert (out.pop('bbox_mAP_75'), out.pop('segm_mAP_75')) == (0.1462, 0.0833)
    assert {k: v for k, v in out.items() if 'copypaste' not in k} == expected


@pytest.mark.parametrize('name', list(CASES))
def test_training_filter_matches_mmdet(roots, name):
    assert len(_ds(roots, name, test_mode=False)) == MMDET_TRAIN_LEN[name]


def test_classes_are_mmdets():
    assert len(datasets.Objects365V1Dataset.CLASSES) == 365
    assert len(datasets.Objects365V2Dataset.CLASSES) == 365
    assert datasets.Objects365V1Dataset.CLASSES[:3] == ('person', 'sneakers', 'chair')
    assert datasets.Objects365V2Dataset.CLASSES[:3] == ('Person', 'Sneakers', 'Chair')
    assert datasets.Objects365V2Dataset.CLASSES[-1] == 'Table Tennis '  # sic, mmdet's
    assert len(datasets.DeepFashionDataset.CLASSES) == 15
    assert datasets.CityscapesDataset.CLASSES == (
        'person', 'rider', 'car', 'truck', 'bus', 'train', 'motorcycle', 'bicycle')


def test_objects365_v1_labels_follow_classes_not_the_jsons_order(roots):
    ds = _ds(roots, 'Objects365V1Dataset', test_mode=True)
    with open(ds.ann_file) as f:
        ids = [c['id'] for c in json.load(f)['categories']]
    assert ids != sorted(ids)  # the fixture's json lists them unsorted, as v1's
    assert all(ds.cat2label[i + 1] == i for i in range(365))


def test_objects365_v2_reads_patch_folders_and_drops_the_missing_images(roots):
    ds = _ds(roots, 'Objects365V2Dataset', test_mode=True)
    assert ds.data_infos[0]['filename'] == 'patch0/objects365_v1_00500000.jpg'
    train = _ds(roots, 'Objects365V2Dataset', test_mode=True).coco  # val: none missing
    assert 908726 not in train.imgs
    full = _ds(roots, 'Objects365V2Dataset', test_mode=False)
    assert 908726 not in full.coco.imgs and 908726 not in full.img_ids
    with open(full.ann_file) as f:
        assert any(i['id'] == 908726 for i in json.load(f)['images'])
    assert len(full.img_ids) == len(full.data_infos)


def test_cityscapes_filters_crowd_only_images_and_reads_segm_file(roots):
    city = _ds(roots, 'CityscapesDataset', test_mode=False)
    coco = datasets.CocoDataset(ann_file=city.ann_file, img_prefix=city.img_prefix,
                                pipeline=[], classes=city.CLASSES)
    crowd_only = [i for i in coco.img_ids
                  if all(a['iscrowd'] for a in coco.coco.img_ann_map[i])]
    assert crowd_only and not set(crowd_only) & set(city.img_ids)
    assert set(city.img_ids) == set(coco.img_ids) - set(crowd_only)
    ann = city.get_ann_info(0)
    assert ann['seg_map'].endswith('_gtFine_instanceIds.png')
    assert ann['seg_map'] == city.data_infos[0]['segm_file']


def test_cityscapes_metric_equals_mmdet(roots, tmp_path, monkeypatch):
    """The Cityscapes instance AP (cityscapesscripts 2.3.0, optional) on the fixture's
    gtFine instanceIds: mmdet 2.28.2's numbers (computed by mmdet on it)."""
    pytest.importorskip('cityscapesscripts', reason='cityscapesscripts (optional) is not '
                                                    'installed: pip install ckptzoo[cityscapes]')
    monkeypatch.chdir(tmp_path)
    ds = _ds(roots, 'CityscapesDataset', test_mode=True)
    results = with_box_masks(ds.data_infos, fake_results(
        [ds.get_ann_info(i) for i in range(len(ds))], len(ds.CLASSES), span=40))
    out = ds.evaluate(results, metric=['cityscapes', 'bbox'], logger='silent',
                      outfile_prefix=str(tmp_path / 'out'))
    assert (out['mAP'], out['AP@50']) == (0.1507063492063492, 0.38566137566137565)
    assert out['bbox_mAP'] == MMDET['CityscapesDataset']['bbox_mAP']
    assert not (tmp_path / 'matches.json').exists()  # kept out of the working directory
    assert sorted(p.name for p in (tmp_path / 'out').glob('*_pred.txt'))[0].endswith(
        '_leftImg8bit_pred.txt')


def test_cityscapes_metric_without_the_package_says_how(roots, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'cityscapesscripts', None)
    monkeypatch.setitem(sys.modules, 'cityscapesscripts.evaluation', None)
    monkeypatch.setitem(
        sys.modules, 'cityscapesscripts.evaluation.evalInstanceLevelSemanticLabeling', None)
    ds = _ds(roots, 'CityscapesDataset', test_mode=True)
    with pytest.raises(ImportError, match='pip install cityscapesscripts==2.3.0'):
        ds.evaluate([], metric='cityscapes')


def test_deepfashion_builds_with_masks(roots):
    root = roots['DeepFashionDataset']
    ds = build_dataset(dict(
        type='DeepFashionDataset', ann_file=osp.join(root, CASES['DeepFashionDataset'][1]),
        img_prefix=osp.join(root, 'Img/'),
        pipeline=[dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True)]))
    out = next(ds[i] for i in range(len(ds)) if len(ds.get_ann_info(i)['bboxes']))
    assert len(out['gt_masks']) == len(out['gt_bboxes']) > 0
    assert isinstance(out['img'], np.ndarray)
