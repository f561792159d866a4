"""The data a memory plan is made on (:mod:`ckptzoo.apis.plan_data`): the training set when it
is on disk, else a stand-in of synthetic batches read off the config, said in one line."""
import os.path as osp

import numpy as np
import pytest
from mmengine.config import Config

from ckptzoo.apis.plan_data import planning_datasets, stand_in_dataset
from ckptzoo.datasets import StandInDataset, SyntheticClassificationDataset

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _voc(tmp_path):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/voc/retinanet_r50_fpn_1x_voc0712.py'))
    root = tmp_path / 'VOCdevkit'
    cfg.data.train.dataset.ann_file = [str(root / f'VOC{y}/ImageSets/Main/trainval.txt')
                                       for y in (2007, 2012)]
    cfg.data.train.dataset.img_prefix = [str(root / f'VOC{y}/') for y in (2007, 2012)]
    return cfg, root


def test_the_training_set_on_disk_is_planned_on():
    cfg = Config(dict(model=dict(type='ImageClassifier'), data=dict(
        samples_per_gpu=2, train=dict(type='SyntheticClassificationDataset', num_samples=4))))
    datasets, note = planning_datasets(cfg)
    assert note is None and len(datasets) == 1
    assert isinstance(datasets[0], SyntheticClassificationDataset)


def test_a_detection_set_not_on_disk_is_stood_in_for(tmp_path):
    """VOC07+12 (RepeatDataset over one VOCDataset per year): the stand-in is read off the
    wrapped dataset's pipeline and the model's head."""
    cfg, root = _voc(tmp_path)
    cfg.data.samples_per_gpu = 4
    datasets, note = planning_datasets(cfg, boxes_per_image=42)
    ds, = datasets
    assert isinstance(ds, StandInDataset)
    # VOC's (1000, 600) keep-ratio scale, padded: each orientation's bound, as GroupSampler
    # never batches a landscape and a portrait image together (not 1024x1024)
    assert note == (f'the training data is not on disk ({root}/VOC2007/ImageSets/Main/'
                    'trainval.txt not found): planning on synthetic batches of 608x1024 and '
                    '1024x608 (one orientation per batch, as GroupSampler batches them) '
                    'with 42 boxes per image at samples_per_gpu=4')
    assert ds.shapes == [(608, 1024), (1024, 608)] and ds.boxes_per_image == 42
    assert ds.num_classes == 20 and ds.flag.tolist() == [1, 0] * 4
    assert tuple(ds[1]['img'].shape) == (3, 1024, 608)
    assert ds.keys == ('img', 'gt_bboxes', 'gt_labels') and len(ds) == 8
    np.testing.assert_allclose(ds.img_norm_cfg['mean'], [123.675, 116.28, 103.53])
    assert ds.img_norm_cfg['to_rgb'] is True
    assert ds[0]['gt_labels'].max() < 20


def test_a_classification_set_not_on_disk_is_stood_in_for(tmp_path):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/classification/resnet50_imagefolder.py'))
    cfg.data.train.data_prefix = str(tmp_path / 'imagenet' / 'train')
    datasets, note = planning_datasets(cfg)
    ds, = datasets
    assert ds.task == 'classification' and ds.shape == (224, 224) and ds.num_classes == 1000
    assert note == (f"the training data is not on disk (data_prefix "
                    f"'{tmp_path}/imagenet/train' is not a folder): planning on synthetic "
                    f"batches of 224x224 at samples_per_gpu={cfg.data.samples_per_gpu}")


def test_what_the_stand_in_cannot_be_made_from_is_named(tmp_path):
    cfg, _ = _voc(tmp_path)
    del cfg.model.bbox_head['num_classes']
    with pytest.raises(ValueError, match=r'the training data is not on disk \(x not found\), '
                       r'and neither the model .* nor data.train.classes gives the number of '
                       'classes'):
        stand_in_dataset(cfg, missing='x not found')
    cfg.data.train.dataset.classes = ('cat', 'dog')
    assert stand_in_dataset(cfg).CLASSES == ('cat', 'dog')
    cfg.data.train.dataset.pipeline[-1]['keys'] = ['img', 'gt_semantic_seg']
    with pytest.raises(ValueError, match=r"only for detectors .* and classifiers: got Collect "
                       r"keys \['img', 'gt_semantic_seg'\]"):
        stand_in_dataset(cfg)


@pytest.mark.parametrize('poly2mask', [True, False])
def test_a_mask_models_stand_in_carries_the_masks_it_loads(tmp_path, poly2mask):
    from ckptzoo.core.mask import BitmapMasks, PolygonMasks
    cfg, _ = _voc(tmp_path)
    pipeline = cfg.data.train.dataset.pipeline
    load = next(t for t in pipeline if t['type'] == 'LoadAnnotations')
    load.update(with_mask=True, poly2mask=poly2mask)
    next(t for t in pipeline if t['type'] == 'Collect')['keys'].append('gt_masks')
    cfg.data.samples_per_gpu = 1
    ds = stand_in_dataset(cfg, boxes_per_image=3)
    masks = ds[0]['gt_masks']
    assert isinstance(masks, BitmapMasks if poly2mask else PolygonMasks) and len(masks) == 3
