"""The probe on a small Deformable DETR (mmdet's config, the model shrunk) trained on generated
COCO data: an encoder layer's output is read by the next layer only through a copy (its
attention transposes the query before the projections), so the plain step frees it, while a
``'full'`` checkpoint of the next layer keeps it. The derived ``'full'`` keeps what a recorded
``'full'`` step keeps, and its peak of every unit ``'full'`` bounds the recorded one closely."""
import logging
import os.path as osp

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.datasets import generate_coco
from ckptzoo.memory import predict_peak, uniform_plan
from ckptzoo.memory.measure.probe import probe, probe_batch, worst_case_shape
from tests.helpers.detr import deformable_detr_cfg

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))))


@pytest.fixture(scope='module')
def detr_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('probe_detr')
    root = generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, obj_size=(12, 32),
                         names=('person', 'bicycle', 'car'), cat_ids=(1, 2, 3), seed=0,
                         crowd_ratio=0.0)
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/deformable_detr_r50_16x2_50e_coco.py'))
    cfg.model = deformable_detr_cfg(dropout=0.0, layers=(3, 3))
    norm = next(t for t in cfg.data.train.pipeline if t['type'] == 'Normalize')
    cfg.data.train.update(ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017') + '/', pipeline=[
        dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
        dict(type='RandomFlip', flip_ratio=0.0),
        dict(type='Resize', img_scale=(128, 96), keep_ratio=True), dict(norm),
        dict(type='Pad', size_divisor=32), dict(type='DefaultFormatBundle'),
        dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])])
    cfg.data.update(samples_per_gpu=2, workers_per_gpu=0)
    cfg.work_dir = str(tmp / 'work')
    cfg.checkpoint_config = cfg.log_config = cfg.lr_config = cfg.custom_hooks = None
    cfg.evaluation = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_probe_transformer'))
    batch = probe_batch(run, worst_case_shape(cfg))
    return run, batch


def test_derived_full_keeps_the_outputs_a_checkpointed_reader_keeps(detr_run):
    run, batch = detr_run
    derived = probe(run, batch, modes=(None, 'full'))
    recorded = probe(run, batch, modes=(None, 'full'), derive_full=False)
    assert derived.names == recorded.names
    encoder = [n for n in derived.names if '.encoder.layers.' in n]
    assert len(encoder) == 3
    for d, r in zip(derived.units, recorded.units):
        # never under what a recorded 'full' keeps
        assert d.kept['full'] >= r.kept['full'], d.name
    for name in encoder[:-1]:  # read by the next layer's checkpoint
        d, r = (t.units[t.index(name)] for t in (derived, recorded))
        assert d.kept['full'] == r.kept['full'] > 0, name
    # every unit 'full': the derived transients bound the recorded ones (a plain forward keeps
    # its saved tensors as it goes, a checkpointed one drops them), within the planner's 5 %
    full_d, full_r = (predict_peak(t, uniform_plan(t, 'full')) for t in (derived, recorded))
    assert full_r <= full_d <= 1.05 * full_r
