"""Planning a knowledge-distillation run (LD: a GFL teacher, an LDHead student): the teacher,
outside the module tree and run under no_grad, is no checkpoint unit and leaves the probe, the
plan and its prediction intact."""
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.train import build_train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from tests.test_models.test_kd_one_stage import _cfg as kd_model_cfg
from tests.helpers.plans import plan_midway
from tests.helpers.configs import one_step_on_generated_coco

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _cfg(root, work_dir):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py'))
    cfg.model = kd_model_cfg()
    one_step_on_generated_coco(cfg, root, work_dir)
    return cfg


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_kd')
    root = generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    cfg = _cfg(root, str(tmp / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.kd'))
    return cfg, run


def test_a_planned_kd_run_fits_its_budget_and_leaves_the_teacher_alone(setup):
    cfg, run = setup
    model = run.runner.model
    teacher = {k: v.clone() for k, v in model.teacher_model.state_dict().items()}
    assert not any('teacher' in n for n in model.checkpoint_units())
    optimized = {id(p) for g in run.runner.optimizer.param_groups for p in g['params']}
    assert not optimized & {id(p) for p in model.teacher_model.parameters()}
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    table, result, budget = plan_midway(run, cfg, batch, {f'bbox_head.level{i}' for i in range(5)})
    assert measure_step(run, batch)[0] <= budget
    for k, v in model.teacher_model.state_dict().items():
        assert torch.equal(v, teacher[k]), k
    model.train()
    assert not model.teacher_model.training
    model.set_checkpoint_plan({'*': None})
