"""CocoDataset: mmdet 2.x parsing and filtering, label order, input checks, and evaluation equal
to pycocotools' COCOeval run directly on the json it writes."""
import contextlib
import io
import json
import os.path as osp

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from ckptzoo.datasets import CocoDataset, GroupSampler, build_dataloader, generate_coco

SHAPES = ('circle', 'square', 'triangle')  # category ids 1, 3, 5


@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    return generate_coco(str(tmp_path_factory.mktemp('coco') / 'coco'), num_train=8,
                         num_val=8, img_size=((40, 48), (56, 72)), max_objects=3)


def _dataset(root, split='val2017', **kwargs):
    kwargs.setdefault('classes', SHAPES)
    return CocoDataset(ann_file=osp.join(root, 'annotations', f'instances_{split}.json'),
                       img_prefix=osp.join(root, split), pipeline=[], **kwargs)


def test_parse_filter_flag_and_crowd(coco_root):
    full = _dataset(coco_root, 'train2017', test_mode=True)
    train = _dataset(coco_root, 'train2017')
    assert len(full) == 8 and full.img_ids[:2] == [1000, 1007]
    # image 1 has no annotation: dropped in training; image 0 holds only a crowd: kept (mmdet)
    assert 1007 not in train.img_ids and 1000 in train.img_ids
    assert len(train) == len(train.img_ids) == len(train.flag) == 7
    assert train.flag.tolist() == [1] * 7  # every image is wider than high
    ann = train.get_ann_info(0)
    assert ann['bboxes'].shape == (0, 4) and ann['labels'].shape == (0,)
    crowd = next(a for a in train.coco.dataset['annotations'] if a['iscrowd'])
    x, y, w, h = crowd['bbox']
    np.testing.assert_array_equal(ann['bboxes_ignore'], [[x, y, x + w, y + h]])
    # every non-crowd annotation becomes a box in xyxy with its class's label
    for i in range(len(train)):
        anns = train.coco.imgToAnns[train.img_ids[i]]
        boxes = [a['bbox'] for a in anns if not a['iscrowd']]
        np.testing.assert_array_equal(train.get_ann_info(i)['bboxes'],
                                      np.array([[b[0], b[1], b[0] + b[2], b[1] + b[3]]
                                                for b in boxes], np.float32).reshape(-1, 4))
    assert len(_dataset(coco_root, 'train2017', min_size=100)) == 0
    assert len(_dataset(coco_root, 'train2017', filter_empty_gt=False)) == 8
    assert len(list(iter(GroupSampler(train, samples_per_gpu=2)))) == 8  # 7 padded to 8


def test_labels_follow_classes_order(coco_root):
    ds = _dataset(coco_root, classes=('triangle', 'hexagon', 'circle'))
    assert ds.cat2label == {5: 0, 1: 2} and ds.cat_ids == [5, 1]
    for i in range(len(ds)):
        anns = [a for a in ds.coco.imgToAnns[ds.img_ids[i]]
                if not a['iscrowd'] and a['category_id'] in (1, 5)]
        labels = [0 if a['category_id'] == 5 else 2 for a in anns]
        assert ds.get_ann_info(i)['labels'].tolist() == labels
        assert sorted(ds.get_cat_ids(i)) == sorted(
            0 if a['category_id'] == 5 else 2 for a in ds.coco.imgToAnns[ds.img_ids[i]]
            if a['category_id'] in (1, 5))
    with pytest.raises(ValueError, match='none of the classes'):
        _dataset(coco_root, classes=('hexagon',))


def _broken(coco_root, tmp_path, edit):
    data = json.load(open(osp.join(coco_root, 'annotations', 'instances_val2017.json')))
    edit(data)
    path = tmp_path / 'broken.json'
    path.write_text(json.dumps(data))
    return str(path)


def test_bad_json_names_the_file_and_entry(coco_root, tmp_path):
    def missing_image(d):
        d['images'][2]['file_name'] = 'nope.jpg'

    def unknown_cat(d):
        d['annotations'][3]['category_id'] = 99

    def bad_bbox(d):
        d['annotations'][4]['bbox'] = [1, 2, 3]

    for edit, error, pattern in (
            (missing_image, FileNotFoundError, r"images\[2\] \(id 500014\).*nope\.jpg"),
            (unknown_cat, ValueError, r"annotations\[3\] .*unknown category_id 99"),
            (bad_bbox, ValueError, r"annotations\[4\] .*malformed bbox \[1, 2, 3\]")):
        path = _broken(coco_root, tmp_path, edit)
        with pytest.raises(error, match=pattern) as info:
            CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'), pipeline=[],
                        classes=SHAPES)
        assert 'broken.json' in str(info.value)


def test_empty_or_all_filtered_images_name_the_file(coco_root, tmp_path):
    def no_images(d):
        d['images'], d['annotations'] = [], []

    path = _broken(coco_root, tmp_path, no_images)
    with pytest.raises(ValueError, match="CocoDataset: the annotation file '.*broken.json' "
                                         "lists no images"):
        CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'), pipeline=[],
                    classes=SHAPES)
    with pytest.raises(ValueError, match=r"all 8 images of '.*instances_val2017.json' are "
                                         r"filtered out for training: 8 have a short side "
                                         r"below 100 px\. Check the image sizes"):
        build_dataloader(_dataset(coco_root, min_size=100), 2, 0, seed=0)


def _detections(ds, seed=0):
    """Per image, per class [k, 5]: jittered ground truth plus false positives."""
    rng = np.random.default_rng(seed)
    results = []
    for i in range(len(ds)):
        ann = ds.get_ann_info(i)
        per_class = [np.zeros((0, 5), np.float32) for _ in ds.CLASSES]
        for box, label in zip(ann['bboxes'], ann['labels']):
            size = np.tile(box[2:] - box[:2], 2)
            jittered = box + rng.normal(0, 0.08, 4) * size
            per_class[label] = np.vstack([per_class[label],
                                          np.append(jittered, rng.random())[None]])
        fp = rng.random((2, 4)) * 40
        fp[:, 2:] += fp[:, :2] + 4
        c = int(rng.integers(3))
        per_class[c] = np.vstack([per_class[c], np.hstack([fp, rng.random((2, 1))])])
        results.append([p.astype(np.float32) for p in per_class])
    return results


def test_evaluate_equals_cocoeval_on_its_json(coco_root, tmp_path, capsys):
    ds = _dataset(coco_root, test_mode=True)
    results = _detections(ds)
    prefix = str(tmp_path / 'res')
    metrics = ds.evaluate(results, jsonfile_prefix=prefix, classwise=True)
    out = capsys.readouterr().out
    assert 'Average Precision' in out and '| category | AP' in out and 'triangle' in out
    assert list(metrics)[0] == 'bbox_mAP'

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(osp.join(coco_root, 'annotations', 'instances_val2017.json'))
        coco_eval = COCOeval(gt, gt.loadRes(prefix + '.bbox.json'), 'bbox')
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    keys = ('bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l')
    assert {k: metrics[k] for k in keys} == {k: float(f'{v:.4f}')
                                             for k, v in zip(keys, coco_eval.stats)}
    assert 0.2 < metrics['bbox_mAP'] < 0.95  # neither trivial 0 nor 1
    assert metrics['bbox_mAP_copypaste'] == ' '.join(f'{v:.4f}' for v in coco_eval.stats[:6])
    # the file holds one detection per box, with the json's category ids
    dets = json.load(open(prefix + '.bbox.json'))
    assert len(dets) == sum(len(b) for r in results for b in r)
    assert {d['category_id'] for d in dets} <= {1, 3, 5}

    at50 = ds.evaluate(results, iou_thrs=[0.5], metric_items=['mAP'])
    assert at50 == {'bbox_mAP': metrics['bbox_mAP_50'],
                    'bbox_mAP_copypaste': at50['bbox_mAP_copypaste']}


def test_evaluate_edge_cases(coco_root):
    ds = _dataset(coco_root, test_mode=True)
    empty = [[np.zeros((0, 5), np.float32) for _ in SHAPES] for _ in range(len(ds))]
    metrics = ds.evaluate(empty)
    assert metrics['bbox_mAP'] == 0.0 and metrics['bbox_mAP_l'] == -1.0
    with pytest.raises(ValueError, match='results for 2 images'):
        ds.evaluate(empty[:2])
    with pytest.raises(KeyError, match="'mAP_1'"):
        ds.evaluate(empty, metric_items=['mAP_1'])
    with pytest.raises(KeyError, match="'foo'"):
        ds.evaluate(empty, metric='foo')
    result_files, tmp_dir = ds.format_results(empty)
    assert osp.isfile(result_files['bbox'])
    tmp_dir.cleanup()


def test_pipeline_reads_generated_images(coco_root):
    pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
                dict(type='Resize', img_scale=[(96, 48), (96, 64)], multiscale_mode='range',
                     keep_ratio=True),
                dict(type='DefaultFormatBundle'),
                dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore'],
                     meta_keys=('filename', 'img_shape'))]
    ds = CocoDataset(ann_file=osp.join(coco_root, 'annotations', 'instances_train2017.json'),
                     img_prefix=osp.join(coco_root, 'train2017'), pipeline=pipeline,
                     classes=SHAPES)
    sample = ds[0]  # the crowd-only image
    assert sample['gt_bboxes'].data.shape == (0, 4)
    assert sample['gt_bboxes_ignore'].data.shape == (1, 4)
    assert 48 <= sample['img'].data.shape[1] <= 64
