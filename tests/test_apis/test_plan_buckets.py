"""A plan per batch-shape bucket, end to end on a small RetinaNet over mixed-shape COCO data
(landscape, portrait, wide, square; a crowded image): the buckets cover every batch the loader
gives, every step of the epoch stays within the budget under its bucket's plan, the plan file
carries the buckets through a resume, and a budget nothing fits names the bucket's shape."""
import copy
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.plan import (ProbeSession, batch_shapes, plan_checkpoints, plan_memory,
                               plan_training)
from ckptzoo.apis.batch_plans import attach_plan_hook
from ckptzoo.apis.train import build_train_model, train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory import InfeasibleBudget, PlanResult, read_plan_file
from ckptzoo.memory.model.buckets import bucket_for
from ckptzoo.memory.plan_hook import MemoryPlanHook
from ckptzoo.memory.measure.step import probe_batch
from tests.helpers.configs import shrink_retinanet

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SHAPES = [(48, 64), (64, 48), (56, 56), (36, 90), (90, 36), (40, 60)]


def _cfg(root, work_dir):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/retinanet_r50_fpn_1x_coco.py'))
    shrink_retinanet(cfg)
    pipeline = [dict(t) for t in cfg.data.train.pipeline]
    for t in pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=(80, 48))
        if t['type'] == 'Pad':
            t.update(size_divisor=8)
    cfg.data.train = dict(type='CocoDataset', classes=SYNTHETIC_CLASSES, pipeline=pipeline,
                          ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=2, workers_per_gpu=0)
    cfg.work_dir = work_dir
    cfg.checkpoint_config = cfg.lr_config = cfg.custom_hooks = cfg.evaluation = None
    cfg.log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
    cfg.runner = dict(type='EpochBasedRunner', max_epochs=1)
    cfg.seed = 0
    return cfg


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_buckets')
    root = generate_coco(str(tmp / 'coco'), num_train=12, num_val=0, img_shapes=SHAPES,
                         crowded_objects=40, crowded_obj_size=(4, 8), seed=0)
    cfg = _cfg(root, str(tmp / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    state = copy.deepcopy(model.state_dict())
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.buckets'))
    shapes = batch_shapes(run, cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convs: threads only contend on a shared machine
    with ProbeSession(run) as session:  # the plain and all-'full' peaks of the worst batch
        batch = probe_batch(run, shapes.worst, shapes.max_boxes_per_image)
        session.measure_step(batch)  # the optimizer state, as in every later step
        session.model.set_checkpoint_plan({'*': None})
        plain = session.measure_step(batch)[0]
        session.model.set_checkpoint_plan({'*': 'full'})
        full = session.measure_step(batch)[0]
        session.model.set_checkpoint_plan({'*': None})
    yield cfg, state, run, shapes, (full + plain) // 2
    torch.set_num_threads(threads)


def test_the_loader_gives_two_orientation_groups_and_a_crowded_image(setup):
    _, _, _, shapes, _ = setup
    assert shapes.from_data and shapes.note is None
    assert len(shapes.groups) == 2  # GroupSampler: no batch mixes portrait and landscape
    assert shapes.max_boxes_per_image == 40


def test_a_plan_per_bucket_fits_and_is_validated(setup):
    cfg, _, run, shapes, budget = setup
    result = plan_checkpoints(run, cfg, budget)
    assert len(result.buckets) >= 3
    for shape, _ in shapes.candidates:  # every batch the loader gives has a bucket
        assert bucket_for(result.buckets, shape) is not None, shape
    worst = {g.worst for g in shapes.groups}
    assert worst <= {b.shape for b in result.buckets}
    # no bucket mixes the orientations: the largest is a group's worst, not their union
    assert max(b.pixels for b in result.buckets) == max(h * w for h, w in worst)
    assert result.measured_peak_bytes <= budget
    # a fresh run (no optimizer state yet): the probe counts the state its first step makes
    assert result.replans == 0
    assert abs(result.predicted_peak_bytes - result.measured_peak_bytes) <= \
        0.01 * result.measured_peak_bytes
    assert all(b.predicted_peak_bytes <= budget for b in result.buckets)
    times = sorted((b.pixels, b.predicted_step_time) for b in result.buckets)
    assert times[0][1] < times[-1][1]  # the smallest batches recompute less
    assert result.boxes_per_image == 40
    assert result.plan == result.buckets[0].plan  # the single-plan view: the largest bucket
    again = PlanResult.from_dict(result.to_dict())
    assert [b.shape for b in again.buckets] == [b.shape for b in result.buckets]


def test_every_step_of_the_epoch_fits_under_its_buckets_plan(setup, tmp_path):
    """train_model with memory_budget: every step measured (memory_check_interval=1) is within
    the budget, runs under the plan of its batch's bucket, and the log carries memory; a
    resume reuses the buckets of memory_plan.json."""
    cfg, state, run, _, budget = setup
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.memory_budget = budget
    cfg.memory_check_interval = 1
    model = build_train_model(cfg)
    model.load_state_dict(state)
    forwards = []
    model.register_forward_pre_hook(
        lambda m, args, kwargs: forwards.append((tuple(kwargs['img'].shape[-2:]),
                                                 dict(m.checkpoint_plan()))), with_kwargs=True)
    set_random_seed(0)
    runner = train_model(model, run.data_loaders[0].dataset, cfg,
                         logger=logging.getLogger('ckptzoo.test.buckets.train'))
    hooks = [h for h in runner.hooks if isinstance(h, MemoryPlanHook)]
    assert len(hooks) == 1  # built once, from the plan (memory_check_interval set too)
    hook = hooks[0]
    saved = read_plan_file(osp.join(cfg.work_dir, 'memory_plan.json'))
    with open(osp.join(cfg.work_dir, 'memory_report.html'), encoding='utf-8') as f:
        report = f.read()  # the report of the plan made now, its measured peak drawn
    assert f'data-max-bytes="{saved["measured_peak_bytes"]}"' in report
    assert '<title>Memory plan: retinanet_r50_fpn_1x_coco.py</title>' in report  # the file
    assert len(saved['buckets']) == len(hook.buckets) >= 3
    assert len(hook.records) == len(runner.data_loader) >= 4
    assert not hook.over_budget
    for record in hook.records:
        assert record["peak_bytes"] <= budget, record
    trained = [f for f in forwards if f[1] is not None]
    used = set()
    for shape, plan in trained[-len(hook.records):]:
        bucket = bucket_for(hook.buckets, shape)
        used.add(bucket.shape)
        expected = dict.fromkeys(plan)
        expected.update(bucket.plan)
        assert plan == expected, shape
    assert len(used) >= 2  # the plan followed the batch

    result, _ = plan_training(run, cfg, resume=True)  # the saved file, not a new probe
    assert [b.shape for b in result.buckets] == [tuple(b['shape']) for b in saved['buckets']]


def test_a_budget_the_largest_bucket_cannot_reach_names_its_shape(setup):
    cfg, _, run, shapes, budget = setup
    with pytest.raises(InfeasibleBudget) as info:
        plan_memory(run, cfg, budget // 4)
    worst = max((g.worst for g in shapes.groups), key=lambda s: s[0] * s[1])
    message = str(info.value)
    assert 'for batches of shape' in message
    assert info.value.shape[0] * info.value.shape[1] == worst[0] * worst[1]
    assert 'set memory_budget to at least that' in message


def test_a_bucket_over_the_budget_is_planned_again_and_saved(setup, tmp_path):
    """The hook's re-planner: a bucket measured over the budget is solved again from the cost
    model with the error as a margin, and the plan file keeps it for a resume."""
    cfg, _, run, _, budget = setup
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = str(tmp_path)
    result = plan_checkpoints(run, cfg, budget)
    hook = attach_plan_hook(run, cfg, result)
    assert isinstance(hook, MemoryPlanHook) and hook.buckets == result.buckets
    bucket = result.buckets[0]
    given = copy.deepcopy(result.to_dict())
    measured = int(bucket.predicted_peak_bytes * 1.03)  # 3 % more than predicted
    new = hook.replan(bucket, measured, bucket.shape, 40)
    assert new.shape == bucket.shape and new.measured_peak_bytes == measured
    assert new.predicted_peak_bytes <= budget * (1 - 0.03)
    saved = read_plan_file(osp.join(cfg.work_dir, 'memory_plan.json'))
    assert saved['margin'] >= 0.03  # the new plan's margin
    assert result.to_dict() == given  # the plan the hook was given is not changed
    assert saved['buckets'][0]['predicted_peak_bytes'] == new.predicted_peak_bytes
    run.runner.hooks.remove(hook)
