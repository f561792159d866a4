"""Planning a model prepared by RFSearchHook: the searchable ops replace convs inside the
backbone's blocks (and the neck's and head's levels), which stay the checkpoint units; the
planner's probe measures them, and the plan it picks fits its budget."""
import logging

import pytest
import torch

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.train import build_train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from ckptzoo.ops import Conv2dRFSearchOp
from tests.test_runner.test_rfsearch_hook import _rfnext_cfg
from tests.helpers.plans import plan_midway


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_rfsearch')
    root = generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    cfg = _rfnext_cfg(root, str(tmp / 'work'), mode='search', rfstructure_file=None)
    cfg.custom_hooks[1].verbose = False
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.rfsearch'))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield cfg, run
    torch.set_num_threads(threads)


def test_a_planned_rfsearch_model_fits_its_budget(setup):
    cfg, run = setup
    model = run.runner.model
    ops = [n for n, m in model.named_modules() if isinstance(m, Conv2dRFSearchOp)]
    assert 'backbone.layer2.0.conv1' in ops and 'neck.fpn_convs.0.conv' in ops
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    table, result, budget = plan_midway(
        run, cfg, batch, {'backbone.layer1.0', 'backbone.layer4.1', 'neck.level0'})
    assert measure_step(run, batch)[0] <= budget
    model.set_checkpoint_plan({'*': None})
