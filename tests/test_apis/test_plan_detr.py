"""Planning a Deformable DETR run (box refinement, toy size): every encoder / decoder layer is
a unit the probe measures and the planner plans; the plan fits its budget with the prediction
within 5 %."""
import logging
import os.path as osp

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.train import build_train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from tests.helpers.plans import plan_midway
from tests.helpers.detr import deformable_detr_cfg
from tests.helpers.configs import one_step_on_generated_coco

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
LAYERS = [f'bbox_head.transformer.{part}.layers.{i}' for part, n in (('encoder', 2),
                                                                        ('decoder', 3))
          for i in range(n)]


def _cfg(root, work_dir):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py'))
    cfg.model = deformable_detr_cfg(num_classes=len(SYNTHETIC_CLASSES), with_box_refine=True)
    one_step_on_generated_coco(cfg, root, work_dir,
                               optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4))
    return cfg


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_detr')
    root = generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    cfg = _cfg(root, str(tmp / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.detr'))
    return cfg, run


def test_a_planned_deformable_detr_run_fits_its_budget(setup):
    cfg, run = setup
    model = run.runner.model
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    table, result, budget = plan_midway(run, cfg, batch, LAYERS)
    assert measure_step(run, batch)[0] <= budget
    model.set_checkpoint_plan({'*': None})
