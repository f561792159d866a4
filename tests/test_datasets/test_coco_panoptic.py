"""CocoPanopticDataset and LoadPanopticAnnotations on generated panoptic data (mmdet 2.28.2's
semantics: the audit against mmdet compared them on the same data, see the branch's report),
PQ evaluation end to end, the bad inputs named, and mmdet's ``_base_/datasets/coco_panoptic.py``
building unchanged."""
import copy
import json
import os
import os.path as osp
import shutil

import numpy as np
import pytest
from mmengine.config import Config

from ckptzoo.datasets import CocoPanopticDataset, build_dataset, generate_coco_panoptic
from ckptzoo.datasets.pipelines import Compose
from ckptzoo.datasets.synthetic_coco_panoptic import MARKER
from ckptzoo.evaluation.panoptic_quality import INSTANCE_OFFSET, id2rgb, read_id_map
from tests.helpers.mmdet_config_count import mmdet_configs_root

CLASSES = ('circle', 'square', 'triangle', 'sky', 'sand', 'wall')
LOAD = [dict(type='LoadImageFromFile'), dict(type='LoadPanopticAnnotations')]


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    return generate_coco_panoptic(str(tmp_path_factory.mktemp('pan') / 'coco'), num_train=8,
                                  num_val=4)


def _ds(root, split='train', pipeline=LOAD, **kw):
    kw.setdefault('classes', CLASSES)
    return CocoPanopticDataset(
        ann_file=f'{root}/annotations/panoptic_{split}2017.json', pipeline=pipeline,
        img_prefix=f'{root}/{split}2017/', seg_prefix=f'{root}/annotations/panoptic_{split}2017/',
        **kw)


def _copy(root, tmp_path):
    dst = str(tmp_path / 'copy')
    shutil.copytree(root, dst)
    return dst


def _perfect(ds):
    """Predictions equal to the ground truth (crowds and VOID left VOID)."""
    out = []
    for i in range(len(ds)):
        ann = ds.get_ann_info(i)
        pan = read_id_map(osp.join(ds.seg_prefix, ann['seg_map']), 'gt')
        res = np.full(pan.shape, len(ds.CLASSES), dtype=np.int64)
        for k, m in enumerate(ann['masks'], 1):
            if m['category'] < len(ds.THING_CLASSES):
                if m['is_thing']:
                    res[pan == m['id']] = m['category'] + k * INSTANCE_OFFSET
            else:
                res[pan == m['id']] = m['category']
        out.append(dict(pan_results=res))
    return out


def test_generated_data_is_deterministic_and_consistent(root, tmp_path):
    again = generate_coco_panoptic(str(tmp_path / 'b'), num_train=8, num_val=4)
    for name in ('panoptic_train2017.json', 'instances_val2017.json',
                 'panoptic_val2017/000000500000.png'):
        assert open(osp.join(root, 'annotations', name), 'rb').read() == \
            open(osp.join(again, 'annotations', name), 'rb').read()
    mtime = osp.getmtime(osp.join(again, MARKER))
    generate_coco_panoptic(str(tmp_path / 'b'), num_train=8, num_val=4)
    assert osp.getmtime(osp.join(again, MARKER)) == mtime
    data = json.load(open(osp.join(root, 'annotations', 'panoptic_train2017.json')))
    cats = {c['id']: c for c in data['categories']}
    assert sorted(cats) == [1, 3, 5, 92, 95, 100]
    assert [c['isthing'] for c in data['categories']] == [1, 1, 1, 0, 0, 0]
    void_seen = 0
    for k, ann in enumerate(data['annotations']):
        pan = read_id_map(osp.join(root, 'annotations', 'panoptic_train2017', ann['file_name']),
                          'x')
        ids, counts = np.unique(pan, return_counts=True)
        areas = dict(zip(ids.tolist(), counts.tolist()))
        void_seen += areas.pop(0, 0) > 0
        assert areas == {s['id']: s['area'] for s in ann['segments_info']}
        things = [s for s in ann['segments_info'] if cats[s['category_id']]['isthing']]
        if k == 0:
            assert any(s['iscrowd'] for s in things)  # the first image holds a crowd
        if k == 1:
            assert not things  # the second has stuff only
    assert void_seen
    ins = json.load(open(osp.join(root, 'annotations', 'instances_train2017.json')))
    assert sorted(c['id'] for c in ins['categories']) == [1, 3, 5]
    thing_segs = [s for a in data['annotations'] for s in a['segments_info']
                  if cats[s['category_id']]['isthing']]
    assert [(a['bbox'], a['iscrowd']) for a in ins['annotations']] == \
        [(s['bbox'], s['iscrowd']) for s in thing_segs]
    with pytest.raises(ValueError, match='names must be 6'):
        generate_coco_panoptic(str(tmp_path / 'x'), names=('a',))
    with pytest.raises(ValueError, match='classes must be 1 to 3'):
        generate_coco_panoptic(str(tmp_path / 'x'), classes=('hexagon',))


def test_labels_split_and_filter(root):
    ds = _ds(root)
    assert ds.THING_CLASSES == CLASSES[:3] and ds.STUFF_CLASSES == CLASSES[3:]
    assert ds.cat2label == {1: 0, 3: 1, 5: 2, 92: 3, 95: 4, 100: 5}
    assert len(ds) == 7  # the stuff-only image is filtered out
    assert len(_ds(root, filter_empty_gt=False)) == 8
    assert len(_ds(root, test_mode=True)) == 8
    ann = _ds(root, filter_empty_gt=False).get_ann_info(0)
    assert len(ann['bboxes_ignore']) == 1  # the crowd
    assert ann['seg_map'] == '000000001000.png'
    crowd = [m for m in ann['masks'] if m['category'] < 3 and not m['is_thing']]
    assert len(crowd) == 1 and len(ann['bboxes']) == sum(m['is_thing'] for m in ann['masks'])


def test_load_panoptic_annotations(root):
    ds = _ds(root, filter_empty_gt=False)
    for i in (0, 1):
        out = ds[i]
        ann = ds.get_ann_info(i)
        pan = read_id_map(osp.join(ds.seg_prefix, ann['seg_map']), 'x')
        seg = out['gt_semantic_seg']
        assert seg.dtype == np.int32 and seg.shape == pan.shape
        assert np.all(seg[pan == 0] == 255)  # VOID
        for m in ann['masks']:
            assert np.all(seg[pan == m['id']] == m['category'])
        thing_ids = [m['id'] for m in ann['masks'] if m['is_thing']]
        assert len(out['gt_masks']) == len(out['gt_bboxes']) == len(thing_ids)
        for mask, sid in zip(out['gt_masks'].masks, thing_ids):
            assert np.array_equal(mask, (pan == sid).astype(np.uint8))
        assert out['seg_fields'] == ['gt_semantic_seg'] and out['mask_fields'] == ['gt_masks']
    # stuff labels come after the things, and only the stuff image has no thing mask
    assert set(np.unique(ds[1]['gt_semantic_seg']).tolist()) <= {3, 4, 5, 255}
    out = Compose([dict(type='LoadImageFromFile'),
                   dict(type='LoadPanopticAnnotations', with_mask=False, with_seg=False)])(
        _prepared(ds, 0))
    assert 'gt_masks' not in out and 'gt_semantic_seg' not in out and len(out['gt_labels'])


def _prepared(ds, i):
    results = dict(img_info=ds.data_infos[i], ann_info=ds.get_ann_info(i))
    ds.pre_pipeline(results)
    return results


def test_categories_checked_against_the_split(root, tmp_path):
    with pytest.raises(ValueError, match=r"category 'circle' \(id 1, isthing=1\) is in neither "
                                         r'THING_CLASSES nor STUFF_CLASSES'):
        _ds(root, classes=None)  # COCO's 133 classes: the shapes are none of them
    with pytest.raises(ValueError, match="category 'wall' .* is in neither"):
        _ds(root, classes=CLASSES[:5])
    with pytest.raises(ValueError, match='must list the things .* first'):
        _ds(root, classes=('circle', 'sky', 'square', 'triangle', 'sand', 'wall'))
    # COCO's names: the default classes read it, a stuff name flagged a thing is refused
    coco = generate_coco_panoptic(str(tmp_path / 'coco'), num_train=3, num_val=0,
                                  names=('person', 'bicycle', 'car', 'sand', 'sky-other-merged',
                                         'wall-other-merged'))
    ds = _ds(coco, classes=None)
    assert ds.cat2label[1] == 0 and ds.cat2label[92] == 80 + 22  # 'sand' is stuff no. 22
    assert len(ds.CLASSES) == 133 and ' truck' not in ds.CLASSES
    path = osp.join(coco, 'annotations', 'panoptic_train2017.json')
    data = json.load(open(path))
    data['categories'][3]['isthing'] = 1
    json.dump(data, open(path, 'w'))
    with pytest.raises(ValueError, match="category 'sand' .* has isthing=1 but is listed in "
                                         'STUFF_CLASSES'):
        _ds(coco, classes=None)


def test_missing_png_and_mismatched_ids_are_named(root, tmp_path):
    bad = _copy(root, tmp_path)
    os.remove(osp.join(bad, 'annotations', 'panoptic_train2017', '000000001007.png'))
    with pytest.raises(FileNotFoundError, match=r'1 of 8 panoptic PNGs are missing, e\.g\. '
                                                r'\[.*000000001007\.png'):
        _ds(bad, filter_empty_gt=False)
    _ds(bad, pipeline=[dict(type='LoadImageFromFile')], filter_empty_gt=False)  # not read
    bad = _copy(root, tmp_path / 'b')
    png = osp.join(bad, 'annotations', 'panoptic_train2017', '000000001000.png')
    pan = read_id_map(png, 'x')
    seg_ids = [i for i in np.unique(pan).tolist() if i]
    pan[pan == seg_ids[0]] = 77  # an id the json does not list, one of its ids gone
    import cv2
    cv2.imwrite(png, id2rgb(pan)[:, :, ::-1])
    ds = _ds(bad)
    with pytest.raises(ValueError, match=rf"000000001000\.png' does not match its "
                                         rf'segments_info: segment ids \[{seg_ids[0]}\] are not '
                                         r'in the PNG; the PNG holds segment ids \[77\]'):
        ds[0]


def test_png_paired_by_image_id(root, tmp_path):
    """mmdet zipped images with annotations; here the annotation order does not matter."""
    bad = _copy(root, tmp_path)
    path = osp.join(bad, 'annotations', 'panoptic_train2017.json')
    data = json.load(open(path))
    data['annotations'] = data['annotations'][::-1]
    json.dump(data, open(path, 'w'))
    a, b = _ds(root), _ds(bad)
    for i in range(len(a)):
        assert a.get_ann_info(i)['masks'] == b.get_ann_info(i)['masks']
        assert np.array_equal(a[i]['gt_semantic_seg'], b[i]['gt_semantic_seg'])
        assert a.data_infos[i]['segm_file'] == b.data_infos[i]['segm_file']


def test_evaluate_pq(root, tmp_path):
    ds = _ds(root, 'val', test_mode=True)
    results = _perfect(ds)
    kept = copy.deepcopy(results)
    res = ds.evaluate(results, metric='PQ')
    assert res['PQ'] == res['PQ_th'] == res['PQ_st'] == res['SQ'] == res['RQ_st'] == 100.0
    assert res['PQ_copypaste'] == ' '.join(['100.000'] * 9)
    assert all(np.array_equal(a['pan_results'], b['pan_results'])
               for a, b in zip(results, kept))  # the results are not modified
    # one stuff class predicted as another everywhere: its PQ and the other's drop
    for r in results:
        r['pan_results'][r['pan_results'] == 3] = 4
    res = ds.evaluate(results, metric='pq', classwise=True,
                      jsonfile_prefix=str(tmp_path / 'out'))
    assert res['PQ_th'] == 100.0 and res['PQ_st'] < 100.0 and res['PQ'] < 100.0
    assert osp.isfile(tmp_path / 'out.panoptic.json')
    assert osp.isfile(tmp_path / 'panoptic' / ds.data_infos[0]['segm_file'])
    with pytest.raises(KeyError, match=r'mAP.* is not supported by CocoPanopticDataset; '
                                       r'supported: .*PQ.*bbox.*segm.*proposal'):
        ds.evaluate(results, metric='mAP')
    with pytest.raises(KeyError, match='need instance results'):
        ds.evaluate(results, metric='bbox')


def test_evaluate_instances_with_ins_ann_file(root):
    ds = _ds(root, 'val', test_mode=True, ins_ann_file='annotations/instances_val2017.json',
             data_root=root)
    assert ds.ins_ann_file == osp.join(root, 'annotations/instances_val2017.json')
    results = _perfect(ds)
    for r, i in zip(results, range(len(ds))):
        ann = ds.get_ann_info(i)
        pan = read_id_map(osp.join(ds.seg_prefix, ann['seg_map']), 'x')
        bboxes = [np.zeros((0, 5), np.float32) for _ in range(3)]
        segms = [[] for _ in range(3)]
        things = [m for m in ann['masks'] if m['is_thing']]
        for box, label, m in zip(ann['bboxes'], ann['labels'], things):
            bboxes[label] = np.vstack([bboxes[label], np.append(box, 1.0)[None]])
            segms[label].append(pan == m['id'])
        r['ins_results'] = (bboxes, segms)
    res = ds.evaluate(results, metric=['PQ', 'bbox', 'segm'])
    # the json's polygons (contours) rasterize a little off the PNG's pixels: segm below 1
    assert res['PQ'] == 100.0 and res['bbox_mAP'] == 1.0 and res['segm_mAP'] > 0.8
    assert ds.cat_ids == [1, 3, 5, 92, 95, 100]  # restored after the instance evaluation
    with pytest.raises(ValueError, match='need ins_ann_file'):
        _ds(root, 'val', test_mode=True).evaluate(results, metric='segm')


@pytest.mark.skipif(mmdet_configs_root() is None, reason='mmdet 2.28.2 configs not installed')
def test_mmdet_base_config_builds_unchanged(tmp_path, monkeypatch):
    generate_coco_panoptic(str(tmp_path / 'data' / 'coco'), num_train=3, num_val=2,
                           names=('person', 'bicycle', 'car', 'sand', 'sky-other-merged',
                                  'wall-other-merged'))
    monkeypatch.chdir(tmp_path)
    cfg = Config.fromfile(osp.join(mmdet_configs_root(), '_base_/datasets/coco_panoptic.py'))
    train = build_dataset(cfg.data.train)
    sample = train[0]
    assert sample['img'].data.shape[-2:] == (sample['gt_semantic_seg'].data.shape[-2] * 4,
                                             sample['gt_semantic_seg'].data.shape[-1] * 4)
    assert sample['gt_masks'].masks.shape[0] == sample['gt_labels'].data.shape[0]
    test = build_dataset(cfg.data.test, dict(test_mode=True))
    assert len(test) == 2 and test[0]['img'][0].data.shape[0] == 3
    assert cfg.evaluation.metric == ['PQ'] and 'PQ' in test.METRICS
