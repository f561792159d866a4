"""SSD and YOLOv3 runs assembled from a config: synthetic VOC images through SSD's pipeline
(Expand, MinIoURandomCrop, PhotoMetricDistortion), two training iterations, and the memory
probe over their head levels."""
import logging

import numpy as np
import pytest
import torch

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.datasets.sample_seed import SeededIndex
from ckptzoo.memory.measure.probe import probe, probe_batch, worst_case_shape
from tests.helpers.checkpointing import one_thread
from tests.helpers.configs import tiny_voc_retinanet
from tests.test_models.test_ssd import _cfg as ssd_cfg
from tests.test_models.test_yolo import _cfg as yolo_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)

SSD_AUG = [dict(type='Expand', mean=[123.675, 116.28, 103.53], to_rgb=True, ratio_range=(1, 4)),
           dict(type='MinIoURandomCrop', min_ious=(0.1, 0.3, 0.5, 0.7, 0.9), min_crop_size=0.3)]
PHOTO = dict(type='PhotoMetricDistortion', brightness_delta=32, contrast_range=(0.5, 1.5),
             saturation_range=(0.5, 1.5), hue_delta=18)


def _config(tmp, model_cfg):
    cfg = tiny_voc_retinanet(tmp)
    model = model_cfg()
    model['bbox_head']['num_classes'] = cfg.model.bbox_head.num_classes
    cfg.model = model
    pipeline = [dict(t) for t in cfg.data.train.pipeline]
    i = [t['type'] for t in pipeline].index('Resize')
    pipeline[i:i] = SSD_AUG
    pipeline.insert([t['type'] for t in pipeline].index('RandomFlip') + 1, PHOTO)
    cfg.data.train.pipeline = pipeline
    cfg.runner = dict(type='IterBasedRunner', max_iters=2)
    return cfg


@pytest.mark.parametrize('kind', ['ssd', 'yolo'])
def test_train_two_iterations_and_probe(kind, tmp_path):
    cfg = _config(tmp_path, ssd_cfg if kind == 'ssd' else yolo_cfg)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_ssd_yolo_training'))
    dataset = run.data_loaders[0].dataset
    a, b = dataset[SeededIndex(1, 7)], dataset[SeededIndex(1, 7)]
    assert torch.equal(a['img'].data, b['img'].data)  # the per-sample draws repeat
    run.runner.run(run.data_loaders, run.workflow)
    assert run.runner.iter == 2
    assert all(np.isfinite(v) for v in run.runner.outputs['log_vars'].values())
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=(None, 'full'))
    levels = 4 if kind == 'ssd' else 3
    assert [u.name for u in table.units][-levels:] == [f'bbox_head.level{i}'
                                                       for i in range(levels)]
