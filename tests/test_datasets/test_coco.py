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


def _train_json(coco_root, tmp_path, edit):
    data = json.load(open(osp.join(coco_root, 'annotations', 'instances_train2017.json')))
    edit(data)
    path = tmp_path / 'instances_crowd.json'
    path.write_text(json.dumps(data))
    return str(path)


def _all_crowd(d):
    for ann in d['annotations']:
        ann['iscrowd'] = 1


def _crowd_or_nothing(d):
    """Every image keeps at most its crowds (images without annotations stay)."""
    d['annotations'] = [a for a in d['annotations'] if a['iscrowd']]


@pytest.mark.parametrize('edit,filter_empty_gt,why', [
    (_all_crowd, True, r'all (\d+) annotations of its 7 training images are crowd \(iscrowd=1, '
                       r'which mmdet ignores for training: crowd boxes become '
                       r'gt_bboxes_ignore\)'),
    (_all_crowd, False, r'all (\d+) annotations of its 8 training images are crowd \(iscrowd=1'),
    # filter_empty_gt=False keeps the images without any annotation
    (_crowd_or_nothing, False, r'the only annotation of its 8 training images is a crowd '
                               r'\(iscrowd=1'),
])
def test_a_training_set_of_crowds_only_is_refused_naming_the_json(coco_root, tmp_path, edit,
                                                                   filter_empty_gt, why):
    """Every annotation ``iscrowd=1``: mmdet trains with loss_bbox and loss_mask at 0."""
    from ckptzoo.datasets import ConcatDataset
    path = _train_json(coco_root, tmp_path, edit)
    kwargs = dict(ann_file=path, img_prefix=osp.join(coco_root, 'train2017'), pipeline=[],
                  classes=SHAPES, filter_empty_gt=filter_empty_gt)
    crowd = CocoDataset(**kwargs)  # built: the loader refuses it, as an all-filtered set
    assert all(len(crowd.get_ann_info(i)['bboxes']) == 0 for i in range(len(crowd)))
    with pytest.raises(ValueError, match=f"^CocoDataset: no training image of '{path}' has an "
                                         f"object to train on: {why}.*, so every box and mask "
                                         f"loss would be 0") as info:
        build_dataloader(crowd, 2, 0, seed=0)
    crowds = sum(a['iscrowd'] == 1 for a in json.load(open(path))['annotations'])
    assert crowds > 1 or 'the only annotation' in str(info.value)
    assert crowds == 1 or f'all {crowds} annotations' in str(info.value)
    # a test set may hold crowds only; so may one part of a training set with objects
    build_dataloader(CocoDataset(**kwargs, test_mode=True), 2, 0, shuffle=False)
    build_dataloader(ConcatDataset([crowd, _dataset(coco_root, 'train2017')]), 2, 0, seed=0)


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


# ------------------------------------------------------------------------------------------
# instance masks
# ------------------------------------------------------------------------------------------
MASK_PIPELINE = [dict(type='LoadImageFromFile'),
                 dict(type='LoadAnnotations', with_bbox=True, with_mask=True)]


def test_with_mask_loads_each_kept_objects_mask_as_pycocotools_draws_it(coco_root):
    ds = CocoDataset(ann_file=osp.join(coco_root, 'annotations', 'instances_train2017.json'),
                     img_prefix=osp.join(coco_root, 'train2017'), pipeline=MASK_PIPELINE,
                     classes=SHAPES)
    seen = 0
    for i in range(len(ds)):
        r = ds[i]
        masks, boxes = r['gt_masks'], r['gt_bboxes']
        assert len(masks) == len(boxes) and r['mask_fields'] == ['gt_masks']
        assert (masks.height, masks.width) == r['img'].shape[:2]
        anns = [a for a in ds.coco.imgToAnns[ds.img_ids[i]] if not a['iscrowd']]
        for mask, ann, box in zip(masks.masks, anns, boxes):
            np.testing.assert_array_equal(mask, ds.coco.annToMask(ann))
            ys, xs = np.nonzero(mask)  # the polygon traces the object's pixels (a
            # triangle's tip may rasterize a little short)
            np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box,
                                       atol=3)
            seen += 1
    assert seen > 5


def _first_object(data):
    return next(i for i, a in enumerate(data['annotations']) if not a['iscrowd'])


def _mask_broken(coco_root, tmp_path, edit):
    path = _broken(coco_root, tmp_path, edit)
    data = json.load(open(path))
    k = _first_object(data)
    return path, data['annotations'][k]['id'], next(
        img for img in data['images'] if img['id'] == data['annotations'][k]['image_id'])


def test_bad_masks_name_the_json_and_the_annotation(coco_root, tmp_path):
    def only_short(d):
        d['annotations'][_first_object(d)]['segmentation'] = [[1, 2, 3, 4]]

    def odd(d):
        d['annotations'][_first_object(d)]['segmentation'] = [[1, 2, 3, 4, 5, 6, 7]]

    def rle_size(d):
        ann = d['annotations'][_first_object(d)]
        img = next(i for i in d['images'] if i['id'] == ann['image_id'])
        h, w = img['height'] + 1, img['width']
        ann['segmentation'] = dict(size=[h, w], counts=[h * w])

    def one_missing(d):
        d['annotations'][_first_object(d)].pop('segmentation')

    for edit, pattern in ((only_short, r"no polygon of 3 or more points \(coordinates per "
                                       r"polygon: \[4\]\)"),
                          (odd, 'polygon 0 has an odd number of coordinates'),
                          (rle_size, r'the RLE mask has size \[height, width\] = \[{h1}, {w}\], '
                                     r'the image is \[{h}, {w}\]'),
                          (one_missing, r"annotation ids \[{id}\] \(1 in all\) have no "
                                        r"'segmentation'")):
        path, ann_id, img = _mask_broken(coco_root, tmp_path, edit)
        pattern = pattern.format(h=img['height'], h1=img['height'] + 1, w=img['width'],
                                 id=ann_id)
        if edit is not one_missing:
            pattern = (rf"annotation id {ann_id} \(image '{img['file_name']}'\): " + pattern)
        with pytest.raises(ValueError, match=pattern) as info:
            CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'),
                        pipeline=MASK_PIPELINE, classes=SHAPES)
        assert 'broken.json' in str(info.value)
        # the same json trains without masks
        CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'), pipeline=[],
                    classes=SHAPES)


def test_a_json_without_masks_refuses_with_mask(coco_root, tmp_path):
    def no_masks(d):
        for a in d['annotations']:
            a.pop('segmentation')

    path = _broken(coco_root, tmp_path, no_masks)
    with pytest.raises(ValueError, match=r"broken\.json' has no instance masks \(no "
                                         r"annotation has a 'segmentation'\)"):
        CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'),
                    pipeline=MASK_PIPELINE, classes=SHAPES)


def test_short_polygons_beside_valid_ones_are_dropped_with_a_warning(coco_root, tmp_path):
    def extra_short(d):
        d['annotations'][_first_object(d)]['segmentation'].append([1, 2, 3, 4])

    path, ann_id, _ = _mask_broken(coco_root, tmp_path, extra_short)
    with pytest.warns(UserWarning, match=rf'1 polygons of fewer than 3 points are dropped '
                                         rf'\(annotation ids \[{ann_id}\]\)'):
        ds = CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'),
                         pipeline=MASK_PIPELINE, classes=SHAPES)
    i = next(i for i in range(len(ds))
             if ann_id in [a['id'] for a in ds.coco.imgToAnns[ds.img_ids[i]]])
    ann = ds.coco.anns[ann_id]
    ann = dict(ann, segmentation=ann['segmentation'][:-1])
    np.testing.assert_array_equal(ds[i]['gt_masks'].masks[0], ds.coco.annToMask(ann))


def _segm_results(ds, seed=0):
    """(bbox, segm) per image: each object's mask moved by up to 2 px with its box jittered,
    plus false positives with their boxes filled."""
    from ckptzoo.core.mask import poly2mask
    rng = np.random.default_rng(seed)
    boxes = _detections(ds, seed)
    results = []
    for i, per_class in enumerate(boxes):
        info, ann = ds.data_infos[i], ds.get_ann_info(i)
        h, w = info['height'], info['width']
        gt_masks = [[] for _ in SHAPES]
        for label, seg in zip(ann['labels'], ann['masks']):
            shift = rng.integers(-2, 3, size=2)
            gt_masks[label].append(np.roll(poly2mask(seg, h, w).astype(bool), shift, (0, 1)))
        segms = []
        for label, dets in enumerate(per_class):
            masks = gt_masks[label]
            for x1, y1, x2, y2, _ in dets[len(masks):]:
                m = np.zeros((h, w), bool)
                m[int(y1):int(np.ceil(y2)), int(x1):int(np.ceil(x2))] = True
                masks.append(m)
            segms.append(masks)
        results.append((per_class, segms))
    return results


def test_segm_evaluation_equals_cocoeval_on_its_json(coco_root, tmp_path):
    import copy

    from ckptzoo.core.mask import encode_mask_results
    ds = _dataset(coco_root, test_mode=True)
    results = _segm_results(ds)
    prefix = str(tmp_path / 'res')
    metrics = ds.evaluate(results, metric=['bbox', 'segm'], jsonfile_prefix=prefix)
    names = ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m', 'mAP_l')
    assert list(metrics) == [f'bbox_{n}' for n in names] + ['bbox_mAP_copypaste'] + \
        [f'segm_{n}' for n in names] + ['segm_mAP_copypaste']
    assert {k: v for k, v in metrics.items() if k.startswith('bbox')} == \
        ds.evaluate([r[0] for r in results])  # the boxes score as a detector's

    segm = json.load(open(prefix + '.segm.json'))
    assert len(segm) == sum(len(b) for r in results for b in r[0])
    assert all(isinstance(d['segmentation']['counts'], str) for d in segm)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(osp.join(coco_root, 'annotations', 'instances_val2017.json'))
        for d in segm:  # as mmdet: the area of a predicted mask, not of its box
            d.pop('bbox')
        coco_eval = COCOeval(gt, gt.loadRes(segm), 'segm')
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    assert {f'segm_{n}': metrics[f'segm_{n}'] for n in names} == \
        {f'segm_{n}': float(f'{v:.4f}') for n, v in zip(names, coco_eval.stats)}
    assert metrics['segm_mAP_copypaste'] == ' '.join(f'{v:.4f}' for v in coco_eval.stats[:6])
    assert 0.2 < metrics['segm_mAP'] < 0.95 and metrics['segm_mAP'] != metrics['bbox_mAP']

    # RLE results (what the test loop keeps) score the same, and are left as they were
    encoded = [(b, encode_mask_results(s)) for b, s in results]
    before = copy.deepcopy(encoded)
    assert ds.evaluate(encoded, metric='segm') == \
        {k: v for k, v in metrics.items() if k.startswith('segm')}
    assert encoded[3][1] == before[3][1]
    # mask scoring's (segms, mask scores) pairs: the mask scores rank the masks
    scored = [(b, (s, [[0.5] * len(c) for c in s])) for b, s in results]
    files, tmp_dir = ds.format_results(scored)
    assert {d['score'] for d in json.load(open(files['segm']))} == {0.5}
    tmp_dir.cleanup()


def test_segm_evaluation_needs_ground_truth_masks(coco_root, tmp_path):
    def one_missing(d):
        d['annotations'][_first_object(d)].pop('segmentation')

    path, ann_id, _ = _mask_broken(coco_root, tmp_path, one_missing)
    ds = CocoDataset(ann_file=path, img_prefix=osp.join(coco_root, 'val2017'), pipeline=[],
                     classes=SHAPES, test_mode=True)
    empty = [([np.zeros((0, 5), np.float32)] * 3, [[]] * 3) for _ in range(len(ds))]
    with pytest.raises(ValueError, match=rf"metric 'segm' needs the ground-truth masks, but "
                                         rf"annotation ids \[{ann_id}\]"):
        ds.evaluate(empty, metric='segm')
    with pytest.raises(ValueError, match='class 0: 1 boxes but 0 masks'):
        ds.format_results([([np.zeros((1, 5), np.float32)] * 3, [[]] * 3)] * len(ds))
