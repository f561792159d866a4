"""MultiImageMixDataset (mmdet 2.x) with the YOLOX training pipeline of mmdet's configs:
built from the config schema, partners drawn under the sample's seed (a resumed run mixes
the same images the same way), the skip switch, refetching."""
import os.path as osp

import numpy as np
import pytest
import torch

from ckptzoo.datasets import (MultiImageMixDataset, SeededIndex, build_dataset, generate_coco,
                              sample_seed)

SCALE = (64, 64)
PIPELINE = [
    dict(type='Mosaic', img_scale=SCALE, pad_val=114.0),
    dict(type='RandomAffine', scaling_ratio_range=(0.1, 2),
         border=(-SCALE[0] // 2, -SCALE[1] // 2)),
    dict(type='MixUp', img_scale=SCALE, ratio_range=(0.8, 1.6), pad_val=114.0),
    dict(type='YOLOXHSVRandomAug'),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Resize', img_scale=SCALE, keep_ratio=True),
    dict(type='Pad', pad_to_square=True, pad_val=dict(img=(114.0, 114.0, 114.0))),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1, 1), keep_empty=False),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])]


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    root = generate_coco(str(tmp_path_factory.mktemp('data') / 'coco'), num_train=6, num_val=1,
                         img_size=((48, 80), (48, 80)))
    return build_dataset(dict(
        type='MultiImageMixDataset',
        dataset=dict(type='CocoDataset',
                     ann_file=osp.join(root, 'annotations', 'instances_train2017.json'),
                     img_prefix=osp.join(root, 'train2017'),
                     classes=('circle', 'square', 'triangle'),
                     pipeline=[dict(type='LoadImageFromFile'),
                               dict(type='LoadAnnotations', with_bbox=True)],
                     filter_empty_gt=False),
        pipeline=PIPELINE))


def _data(item):
    return [np.asarray(getattr(item[k], 'data', item[k])) for k in ('img', 'gt_bboxes',
                                                                    'gt_labels')]


def test_builds_from_the_config_and_yields_training_samples(dataset):
    assert isinstance(dataset, MultiImageMixDataset) and len(dataset) == 6
    assert dataset.pipeline_types[0] == 'Mosaic' and dataset.CLASSES
    np.random.seed(0)
    item = dataset[2]
    img, boxes, labels = _data(item)
    assert img.shape == (3, 64, 64) and boxes.shape[1:] == (4, ) and len(labels) == len(boxes)
    meta = getattr(item['img_metas'], 'data', item['img_metas'])
    assert meta['pad_shape'][:2] == (64, 64)


def test_a_seeded_index_mixes_the_same_whatever_the_global_state(dataset):
    index = SeededIndex(3, sample_seed(0, 5, 3))
    np.random.seed(1)
    first = _data(dataset[index])
    np.random.seed(2)
    torch.manual_seed(7)
    state = np.random.get_state()[1].copy()
    second = _data(dataset[index])
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # the trainer's untouched
    other = _data(dataset[SeededIndex(3, sample_seed(0, 6, 3))])
    assert not all(a.shape == b.shape and (a == b).all() for a, b in zip(first, other))


def test_skip_type_keys_leave_out_the_mixing(dataset):
    dataset.update_skip_type_keys(['Mosaic', 'RandomAffine', 'MixUp'])
    try:
        i = next(i for i in range(len(dataset)) if len(dataset.dataset[i]['gt_bboxes']))
        inner = dataset.dataset[i]
        np.random.seed(0)
        img, boxes, _ = _data(dataset[i])
        h, w = inner['img'].shape[:2]
        scale = min(64 / max(h, w), 64 / min(h, w))  # Resize keep_ratio to (64, 64)
        new_w = int(w * scale + 0.5)
        expected = inner['gt_bboxes'] * scale
        flipped = expected.copy()
        flipped[:, 0::2] = new_w - expected[:, 2::-2]
        assert img.shape == (3, 64, 64)
        assert np.allclose(boxes, expected, atol=0.5) or np.allclose(boxes, flipped, atol=0.5)
    finally:
        dataset.update_skip_type_keys(None)
    with pytest.raises(TypeError, match='skip_type_keys must be a list'):
        dataset.update_skip_type_keys('Mosaic')


def test_refetch_and_errors():
    class Toy:
        CLASSES = ('a', )

        def __len__(self):
            return 2

        def __getitem__(self, i):
            return dict(n=0)

    from ckptzoo.registry import TRANSFORMS

    @TRANSFORMS.register_module(force=True)
    class _NoneTwice:
        def __init__(self):
            self.calls = 0

        def __call__(self, results):
            self.calls += 1
            return None if self.calls <= 2 else dict(results, n=self.calls)

    ds = MultiImageMixDataset(Toy(), [dict(type='_NoneTwice')], max_refetch=3)
    assert ds[0]['n'] == 3
    with pytest.raises(RuntimeError, match='returned None 1 times'):
        MultiImageMixDataset(Toy(), [dict(type='_NoneTwice')], max_refetch=1)[0]
    with pytest.raises(ValueError, match='dynamic_scale is deprecated'):
        MultiImageMixDataset(Toy(), [], dynamic_scale=(640, 640))
    with pytest.raises(TypeError, match='a list of transform configs'):
        MultiImageMixDataset(Toy(), [lambda r: r])


def test_the_planners_batch_shapes_are_the_pipeline_bound(dataset):
    """Mosaic / MixUp make each item out of several images: the sizes of the inner dataset's
    images say nothing about the batches; the pipeline's Resize + Pad bound them."""
    from mmengine.config import Config

    from ckptzoo.datasets.batch_shapes import loader_shapes
    cfg = Config(dict(data=dict(train=dict(type='MultiImageMixDataset', pipeline=PIPELINE)),
                      seed=0))
    shapes = loader_shapes(cfg, dataset, 2)
    assert [g.worst for g in shapes.groups] == [(64, 64)]
    assert 'MultiImageMixDataset mixes several images' in shapes.note


def test_random_affine_border_must_crop_the_mosaic_back_to_img_scale():
    from ckptzoo.datasets.dataset_wrappers import MultiImageMixDataset
    pipeline = [dict(type='Mosaic', img_scale=(64, 96), pad_val=114.0),
                dict(type='RandomAffine', border=(-32, -32))]
    with pytest.raises(ValueError, match=r'RandomAffine border=\(-32, -32\) does not match '
                                         r'Mosaic img_scale=\(64, 96\).*\(-32, -48\)'):
        MultiImageMixDataset(dataset=[], pipeline=pipeline)
