"""Planning a Mask R-CNN: the RoI heads are checkpoint units the planner plans, their memory is
probed at the samplers' largest RoI counts (an untrained RPN proposes few positives), the plan
fits its budget on the probe and in training, with the prediction close to the measurement."""
import copy
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.plan import ProbeSession
from ckptzoo.apis.train import build_train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from tests.helpers.plans import plan_midway
from tests.helpers.configs import one_step_on_generated_coco

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
NUM, POS_FRACTION = 32, 0.25


def _cfg(root, work_dir):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py'))
    cfg.model.backbone.update(base_channels=8, with_cp=False)
    cfg.model.neck.update(in_channels=[8, 16, 32, 64], out_channels=16)
    cfg.model.rpn_head.update(in_channels=16, feat_channels=16)
    roi = cfg.model.roi_head
    roi.bbox_roi_extractor.out_channels = roi.mask_roi_extractor.out_channels = 16
    roi.bbox_head.update(in_channels=16, fc_out_channels=32)
    roi.mask_head.update(in_channels=16, conv_out_channels=16)
    cfg.model.train_cfg.rcnn.sampler.update(num=NUM, pos_fraction=POS_FRACTION)
    one_step_on_generated_coco(cfg, root, work_dir)
    return cfg


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_two_stage')
    root = generate_coco(str(tmp / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=SYNTHETIC_CLASSES, seed=0)
    cfg = _cfg(root, str(tmp / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.two_stage'))
    return cfg, run


def test_the_rpn_and_roi_heads_are_units_in_execution_order(setup):
    _, run = setup
    names = list(run.runner.model.checkpoint_units())
    assert names[-7:] == [f'rpn_head.level{i}' for i in range(5)] + ['roi_head.bbox',
                                                                        'roi_head.mask']
    assert names.index('neck.level0') < names.index('rpn_head.level0')


def test_the_probe_sees_the_samplers_at_capacity(setup):
    """Inside the planner's probe session the mask head gets ``int(num * pos_fraction)``
    positives per image and the box head ``num`` RoIs; outside, the sampler is mmdet's."""
    cfg, run = setup
    model = run.runner.model
    seen = {}

    def counter(key):
        def hook(module, args):
            seen.setdefault(key, args[0].shape[0])  # the first forward's RoIs (not recompute)
        return hook

    hooks = [model.roi_head.mask_head.register_forward_pre_hook(counter('mask')),
             model.roi_head.bbox_head.register_forward_pre_hook(counter('bbox'))]
    try:
        # boxes in every image, as the planner's probe batches have (the worst case's count)
        batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
        with ProbeSession(run):
            measure_step(run, batch)
        assert seen == dict(mask=2 * int(NUM * POS_FRACTION), bbox=2 * NUM)
        seen.clear()
        torch.manual_seed(0)
        losses = model(**copy.copy(batch))
        assert seen['mask'] < 2 * int(NUM * POS_FRACTION)  # an untrained RPN's few positives
        assert 'loss_mask' in losses
    finally:
        for h in hooks:
            h.remove()


def test_a_planned_mask_rcnn_fits_its_budget(setup):
    cfg, run = setup
    model = run.runner.model
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    table, result, budget = plan_midway(run, cfg, batch, {'roi_head.bbox', 'roi_head.mask'})
    # a training step outside the probe (mmdet's sampling: fewer positives) stays within it
    assert measure_step(run, batch)[0] <= budget
    model.set_checkpoint_plan({'*': None})
