"""Semantic maps for HTC: the synthetic COCO's stuff maps, ``LoadAnnotations(with_seg=True)``,
the maps through Resize / RandomFlip / Pad / ``SegRescale`` / the collate, the dataset's
check of every map before training, and a tiny HTC trained on a batch of them."""
import os
import os.path as osp

import cv2
import numpy as np
import pytest
import torch

from ckptzoo.datasets import build_dataloader, build_dataset, generate_coco
from ckptzoo.datasets.pipelines import LoadAnnotations, Pad, RandomFlip, Resize, SegRescale
from ckptzoo.registry import build_detector

from tests.helpers.detectors import htc_cfg

CLASSES = ('circle', 'square', 'triangle')
NORM = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
PIPELINE = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True, with_seg=True),
    dict(type='Resize', img_scale=(80, 64), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', **NORM),
    dict(type='Pad', size_divisor=32),
    dict(type='SegRescale', scale_factor=1 / 8),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks', 'gt_semantic_seg']),
]


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('seg') / 'coco')
    return generate_coco(root, num_train=4, num_val=2, img_shapes=[(64, 64), (48, 64)],
                         stuff_maps=True)


def _dataset(root, seg_prefix='stuffthingmaps/train2017/'):
    return build_dataset(dict(
        type='CocoDataset', classes=CLASSES, data_root=root + '/',
        ann_file='annotations/instances_train2017.json', img_prefix='train2017/',
        seg_prefix=seg_prefix, pipeline=PIPELINE))


def test_stuff_maps_are_the_objects_labels(coco, tmp_path):
    import json
    data = json.load(open(osp.join(coco, 'annotations', 'instances_train2017.json')))
    for img in data['images']:
        seg = cv2.imread(osp.join(coco, 'stuffthingmaps', 'train2017',
                                  img['file_name'].replace('.jpg', '.png')),
                         cv2.IMREAD_UNCHANGED)
        assert seg.dtype == np.uint8 and seg.shape == (img['height'], img['width'])
        cats = {a['category_id'] - 1 for a in data['annotations'] if a['image_id'] == img['id']}
        assert set(np.unique(seg)) - {255} == cats
    # the images and annotations are those made without the maps; the maps are deterministic
    plain = generate_coco(str(tmp_path / 'plain'), num_train=4, num_val=2,
                          img_shapes=[(64, 64), (48, 64)])
    again = generate_coco(str(tmp_path / 'again'), num_train=4, num_val=2,
                          img_shapes=[(64, 64), (48, 64)], stuff_maps=True)
    for name in ('annotations/instances_train2017.json', 'train2017/000000001000.jpg'):
        assert open(osp.join(plain, name), 'rb').read() == open(osp.join(coco, name), 'rb').read()
    name = 'stuffthingmaps/val2017/000000500000.png'
    assert open(osp.join(again, name), 'rb').read() == open(osp.join(coco, name), 'rb').read()


def test_the_maps_follow_the_image_through_the_transforms():
    seg = np.arange(48 * 64, dtype=np.int64).reshape(48, 64) % 7
    results = dict(img=np.zeros((48, 64, 3), np.uint8), img_shape=(48, 64, 3),
                   gt_semantic_seg=seg.astype(np.uint8), seg_fields=['gt_semantic_seg'],
                   img_fields=['img'])
    results = Resize(img_scale=(128, 96), keep_ratio=True)(results)
    assert results['gt_semantic_seg'].shape == (96, 128)
    np.testing.assert_array_equal(results['gt_semantic_seg'][::2, ::2], seg)  # nearest
    results = RandomFlip(flip_ratio=1.0)(results)
    np.testing.assert_array_equal(results['gt_semantic_seg'][::2, ::-2], seg)
    results = Pad(size=(100, 130))(results)
    assert results['gt_semantic_seg'].shape == (100, 130)
    assert (results['gt_semantic_seg'][96:] == 255).all()
    results = SegRescale(scale_factor=1 / 2)(results)
    assert results['gt_semantic_seg'].shape == (50, 65)
    with pytest.raises(ValueError, match='scale_factor'):
        SegRescale(scale_factor=0)


def test_dataset_and_loader_give_the_padded_maps(coco):
    ds = _dataset(coco)
    sample = ds[0]
    assert sample['gt_semantic_seg'].shape == (1, 8, 8)
    loader = build_dataloader(ds, 2, 0, dist=False, shuffle=False)
    batch = next(iter(loader))
    seg = batch['gt_semantic_seg']
    assert seg.shape == (2, 1, 8, 8) and seg.dtype == torch.uint8
    # a tiny HTC trains on the batch, the semantic loss among its losses
    torch.manual_seed(0)
    model = build_detector(htc_cfg(num_classes=3, seg_classes=8))
    out = model.train_step(batch, None)
    assert 'loss_semantic_seg' in out['log_vars'] and torch.isfinite(out['loss'])
    out['loss'].backward()


def test_a_missing_map_fails_before_training_naming_the_file(coco, tmp_path):
    maps = tmp_path / 'maps'
    maps.mkdir()
    src = osp.join(coco, 'stuffthingmaps', 'train2017')
    names = sorted(os.listdir(src))
    for name in names[1:]:
        (maps / name).write_bytes(open(osp.join(src, name), 'rb').read())
    with pytest.raises(FileNotFoundError, match=names[0]):
        _dataset(coco, seg_prefix=str(maps))
    with pytest.raises(ValueError, match='seg_prefix'):
        _dataset(coco, seg_prefix=None)


def test_load_annotations_names_an_unreadable_map(tmp_path):
    (tmp_path / 'a.png').write_bytes(b'not a png')
    results = dict(img_info=dict(filename='a.jpg'), ann_info=dict(seg_map='a.png'),
                   seg_prefix=str(tmp_path), seg_fields=[])
    with pytest.raises(FileNotFoundError, match='a.png'):
        LoadAnnotations(with_bbox=False, with_label=False, with_seg=True)(results)
    cv2.imwrite(str(tmp_path / 'a.png'), np.full((4, 5), 3, np.uint8))
    out = LoadAnnotations(with_bbox=False, with_label=False, with_seg=True)(results)
    assert out['gt_semantic_seg'].shape == (4, 5) and out['seg_fields'] == ['gt_semantic_seg']
