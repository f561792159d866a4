import os
import os.path as osp
import xml.etree.ElementTree as ET

import cv2
import numpy as np
import pytest
import torch

from ckptzoo.datasets import SYNTHETIC_CLASSES, build_dataloader, build_dataset, generate_voc
from ckptzoo.datasets import synthetic_voc

IMG_NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
TRAIN_PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=(160, 128), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **IMG_NORM),
    dict(type='Pad', size_divisor=32),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore']),
]
TEST_PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiScaleFlipAug', img_scale=(160, 128), flip=False, transforms=[
        dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),
        dict(type='Normalize', **IMG_NORM), dict(type='Pad', size_divisor=32),
        dict(type='ImageToTensor', keys=['img']), dict(type='Collect', keys=['img'])]),
]


def _files(devkit):
    out = {}
    for d, _, names in os.walk(devkit):
        for n in names:
            p = osp.join(d, n)
            with open(p, 'rb') as f:
                out[osp.relpath(p, devkit)] = f.read()
    return out


@pytest.fixture(scope='module')
def voc_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('synth')
    generate_voc(str(root), num_trainval=24, num_test=8, seed=0)
    return str(root)


def test_deterministic(voc_root, tmp_path):
    other = generate_voc(str(tmp_path / 'b'), num_trainval=24, num_test=8, seed=0)
    a, b = _files(osp.join(voc_root, 'VOCdevkit')), _files(other)
    assert len(a) == 24 + 8 + 24 + 8 + 2 + 1 and a == b
    diff = generate_voc(str(tmp_path / 'c'), num_trainval=24, num_test=8, seed=1)
    assert _files(diff) != a


def test_idempotent_regenerates_on_change_and_guards_foreign_dirs(tmp_path):
    devkit = generate_voc(str(tmp_path), num_trainval=3, num_test=1)
    xml = osp.join(devkit, 'VOC2007', 'Annotations', '000001.xml')
    mtime = os.stat(xml).st_mtime_ns
    generate_voc(str(tmp_path), num_trainval=3, num_test=1)
    assert os.stat(xml).st_mtime_ns == mtime  # complete: nothing rewritten
    generate_voc(str(tmp_path), num_trainval=2, num_test=1)
    ids = open(osp.join(devkit, 'VOC2007', 'ImageSets', 'Main', 'trainval.txt')).read().split()
    assert ids == ['000001', '000002']
    assert not osp.exists(osp.join(devkit, 'VOC2007', 'JPEGImages', '000004.jpg'))
    os.makedirs(tmp_path / 'real' / 'VOCdevkit' / 'VOC2007')
    with pytest.raises(FileExistsError, match='not made'):
        generate_voc(str(tmp_path / 'real'))


def test_interrupted_run_leaves_nothing_and_is_regenerated(tmp_path, monkeypatch):
    calls = {'n': 0}
    real = synthetic_voc.cv2.imencode

    def failing(*args, **kwargs):
        calls['n'] += 1
        if calls['n'] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(synthetic_voc.cv2, 'imencode', failing)
    with pytest.raises(KeyboardInterrupt):
        generate_voc(str(tmp_path), num_trainval=4, num_test=1)
    assert os.listdir(tmp_path / 'VOCdevkit') == []
    monkeypatch.setattr(synthetic_voc.cv2, 'imencode', real)
    devkit = generate_voc(str(tmp_path), num_trainval=4, num_test=1)
    assert len(os.listdir(osp.join(devkit, 'VOC2007', 'JPEGImages'))) == 5


def _voc_cfg(root, split, pipeline, **kw):
    prefix = osp.join(root, 'VOCdevkit', 'VOC2007') + '/'
    return dict(type='VOCDataset', classes=SYNTHETIC_CLASSES, img_prefix=prefix,
                ann_file=prefix + f'ImageSets/Main/{split}.txt', pipeline=pipeline, **kw)


def test_valid_voc_read_by_vocdataset(voc_root):
    ds = build_dataset(_voc_cfg(voc_root, 'trainval', [], test_mode=True))
    assert len(ds) == 24 and ds.year == 2007
    xml_objects = difficult = truncated = 0
    for i, info in enumerate(ds.data_infos):
        root = ET.parse(osp.join(ds.img_prefix, 'Annotations', info['id'] + '.xml')).getroot()
        objs = root.findall('object')
        assert 1 <= len(objs) <= 3
        xml_objects += len(objs)
        difficult += sum(int(o.find('difficult').text) for o in objs)
        truncated += sum(int(o.find('truncated').text) for o in objs)
        ann = ds.get_ann_info(i)
        assert len(ann['bboxes']) + len(ann['bboxes_ignore']) == len(objs)
        assert len(ann['bboxes_ignore']) == sum(int(o.find('difficult').text) for o in objs)
        boxes = np.vstack([ann['bboxes'], ann['bboxes_ignore']])
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= info['width'] - 1).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        w, h = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
        assert (np.minimum(w, h) <= 48).all()
        assert 96 <= info['width'] <= 128 and 96 <= info['height'] <= 128
    assert difficult > 0 and truncated > 0 and xml_objects > 24
    assert len(build_dataset(_voc_cfg(voc_root, 'test', [], test_mode=True))) == 8


def test_boxes_enclose_the_drawn_shapes(voc_root):
    ds = build_dataset(_voc_cfg(voc_root, 'trainval', [], test_mode=True))
    for i, info in enumerate(ds.data_infos[:8]):
        img = cv2.imread(osp.join(ds.img_prefix, info['filename'])).astype(np.int16)
        ann = ds.get_ann_info(i)
        inside = np.zeros(img.shape[:2], bool)
        for box, label in zip(np.vstack([ann['bboxes'], ann['bboxes_ignore']]),
                              np.concatenate([ann['labels'], ann['labels_ignore']])):
            colour = np.array(synthetic_voc.SHAPE_COLORS[SYNTHETIC_CLASSES[label]])
            x1, y1, x2, y2 = box.astype(int)
            region = np.abs(img[y1:y2 + 1, x1:x2 + 1] - colour).max(-1) < 50
            assert region.mean() > 0.4  # a triangle fills half its box, a circle ~79%
            inside[max(y1 - 1, 0):y2 + 2, max(x1 - 1, 0):x2 + 2] = True
        shape_pixels = np.zeros(img.shape[:2], bool)
        for colour in synthetic_voc.SHAPE_COLORS.values():
            shape_pixels |= np.abs(img - np.array(colour)).max(-1) < 50
        assert shape_pixels[~inside].sum() == 0


def test_train_batch_format(voc_root):
    ds = build_dataset(dict(type='RepeatDataset', times=2,
                            dataset=_voc_cfg(voc_root, 'trainval', TRAIN_PIPELINE)))
    assert len(ds) == 48
    np.random.seed(0)
    loader = build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, seed=0)
    batch = next(iter(loader))
    assert set(batch) == {'img', 'img_metas', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore'}
    img = batch['img']
    assert img.dtype == torch.float32 and img.shape[:2] == (2, 3)
    assert img.shape[2] % 32 == 0 and img.shape[3] % 32 == 0
    assert len(batch['img_metas']) == 2
    for meta, boxes, labels, ign in zip(batch['img_metas'], batch['gt_bboxes'],
                                        batch['gt_labels'], batch['gt_bboxes_ignore']):
        assert set(meta) == {'filename', 'ori_filename', 'ori_shape', 'img_shape', 'pad_shape',
                             'scale_factor', 'flip', 'flip_direction', 'img_norm_cfg'}
        h, w, c = meta['img_shape']
        assert c == 3 and max(h, w) <= 160 and min(h, w) <= 128
        assert meta['pad_shape'][0] % 32 == 0 and meta['pad_shape'][0] >= h
        assert meta['scale_factor'].dtype == np.float32 and meta['scale_factor'].shape == (4,)
        assert boxes.dtype == torch.float32 and boxes.shape[1] == 4 and len(boxes) >= 1
        assert labels.dtype == torch.int64 and labels.shape == (len(boxes),)
        assert ((labels >= 0) & (labels < 3)).all()
        assert (boxes[:, 2] <= w).all() and (boxes[:, 3] <= h).all()
        assert ign.shape[1] == 4


def test_test_batch_and_perfect_evaluation(voc_root):
    ds = build_dataset(_voc_cfg(voc_root, 'test', TEST_PIPELINE, test_mode=True))
    loader = build_dataloader(ds, 2, 0, shuffle=False)
    batch = next(iter(loader))
    assert isinstance(batch['img'], list) and len(batch['img']) == 1
    assert batch['img'][0].shape[:2] == (2, 3)
    assert len(batch['img_metas']) == 1 and len(batch['img_metas'][0]) == 2
    results = []
    for i in range(len(ds)):
        ann = ds.get_ann_info(i)
        results.append([np.hstack([ann['bboxes'][ann['labels'] == c],
                                   np.ones((np.sum(ann['labels'] == c), 1), np.float32)])
                        for c in range(3)])
    out = ds.evaluate(results, logger='silent')
    assert out['mAP'] == pytest.approx(1.0)


def test_cli(tmp_path, capsys):
    synthetic_voc.main([str(tmp_path), '--num-trainval', '2', '--num-test', '1'])
    assert 'VOC2007' in capsys.readouterr().out
    assert len(os.listdir(tmp_path / 'VOCdevkit' / 'VOC2007' / 'JPEGImages')) == 3


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match='classes'):
        generate_voc(str(tmp_path), classes=('dog',))
    with pytest.raises(ValueError, match='img_size'):
        generate_voc(str(tmp_path), img_size='big')
