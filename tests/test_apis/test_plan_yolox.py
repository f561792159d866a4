"""YOLOX under a memory budget: the model resizes each batch to a size it draws every
``random_size_interval`` iterations, so the planner's buckets are the sizes it trains at (not
the loader's one padded shape), the probe steps run at each bucket's own size, the plan hook
switches to the bucket of the size each forward trains at, and every step of the epoch stays
within the budget. Box counts of a Mosaic pipeline are bounded by its own boxes and all of
its three partners'."""
import copy
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.plan import ProbeSession, batch_shapes
from ckptzoo.apis.train import build_train_model, train_model
from ckptzoo.datasets import generate_coco
from ckptzoo.memory.model.buckets import bucket_for
from ckptzoo.memory.plan_hook import MemoryPlanHook
from ckptzoo.memory.measure.step import probe_batch

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SIZE = 96
SIZES = [(64, 64), (96, 96), (128, 128)]  # size_multiplier 32 x random_size_range (2, 4)


def _cfg(root, work_dir):
    cfg = Config.fromfile(osp.join(ROOT, 'configs/coco/yolox_tiny_synthetic_coco_cp.py'))
    cfg.model.update(input_size=(SIZE, SIZE), random_size_range=(2, 4),
                     random_size_interval=1)
    cfg.model.backbone.update(widen_factor=0.125, with_cp=False)
    cfg.model.neck.update(in_channels=[32, 64, 128], out_channels=16, with_cp=False)
    cfg.model.bbox_head.update(in_channels=16, feat_channels=16, with_cp=False)
    pipeline = [dict(t) for t in cfg.data.train.pipeline]
    for t in pipeline:
        if t['type'] in ('Mosaic', 'Resize'):
            t['img_scale'] = (SIZE, SIZE)
        if t['type'] == 'RandomAffine':
            t['border'] = (-SIZE // 2, -SIZE // 2)
    cfg.data.train.pipeline = pipeline
    cfg.data.train.dataset.update(ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                                  img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=2, workers_per_gpu=0)
    cfg.pop('synthetic_data')
    cfg.work_dir = work_dir
    cfg.checkpoint_config = cfg.evaluation = None
    cfg.custom_hooks = []
    cfg.lr_config = dict(policy='fixed')
    cfg.log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
    cfg.runner = dict(type='EpochBasedRunner', max_epochs=1)
    cfg.seed = 0
    return cfg


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_yolox')
    root = generate_coco(str(tmp / 'coco'), num_train=12, num_val=0,
                         img_size=((48, 80), (48, 80)), max_objects=3, seed=0)
    cfg = _cfg(root, str(tmp / 'work'))
    set_random_seed(0)
    model = build_train_model(cfg)
    state = copy.deepcopy(model.state_dict())
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.yolox'))
    shapes = batch_shapes(run, cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with ProbeSession(run) as session:  # the plain and all-'full' peaks at the largest size
        batch = probe_batch(run, shapes.worst, shapes.max_boxes_per_image)
        session.measure_step(batch)  # the optimizer state, as in every later step
        session.model.set_checkpoint_plan({'*': None})
        plain = session.measure_step(batch)[0]
        session.model.set_checkpoint_plan({'*': 'full'})
        full = session.measure_step(batch)[0]
        session.model.set_checkpoint_plan({'*': None})
    yield cfg, state, run, shapes, (full, plain)
    torch.set_num_threads(threads)


def test_the_shapes_are_the_sizes_yolox_draws(setup):
    cfg, _, run, shapes, _ = setup
    model = run.runner.model
    assert model.drawable_sizes() == SIZES
    assert {s for s, _ in shapes.candidates} == set(SIZES)
    assert shapes.worst == (128, 128)
    assert abs(sum(f for _, f in shapes.candidates) - 1) < 1e-9
    assert 'YOLOX resizes each batch' in shapes.note and '64x64, 96x96, 128x128' in shapes.note
    # Mosaic: an item holds its own boxes and all of its three partners'
    counts = [len(run.data_loaders[0].dataset.dataset.get_ann_info(i)['bboxes'])
              for i in range(12)]
    assert shapes.max_boxes_per_image == 4 * max(counts)


def test_the_probe_runs_each_batch_at_its_own_shape(setup):
    """A resumed YOLOX at a drawn size: the probe still measures the batch's shape."""
    _, _, run, _, _ = setup
    model = run.runner.model
    model._progress_in_iter = 5  # the 5th draw is in force
    try:
        drawn = model.random_size(5)
        assert model.train_shape((SIZE, SIZE)) == drawn
        seen = []
        handle = model.backbone.register_forward_pre_hook(
            lambda m, args: seen.append(tuple(args[0].shape[-2:])))
        try:
            with ProbeSession(run) as session:
                assert model.train_shape((128, 128)) == (128, 128)
                session.measure_step(probe_batch(run, (128, 128), 2))
        finally:
            handle.remove()
        assert seen == [(128, 128)]
        assert model._progress_in_iter == 5  # the probe's forwards are not counted
        assert model.train_shape((SIZE, SIZE)) == drawn
    finally:
        model._progress_in_iter = 0


def test_every_step_fits_under_the_plan_of_the_size_it_trains_at(setup, tmp_path):
    cfg, state, _, _, (full, plain) = setup
    budget = (full + plain) // 2
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.memory_budget = budget
    cfg.memory_check_interval = 1
    model = build_train_model(cfg)
    model.load_state_dict(state)
    trained = []  # (the size the backbone sees, the plan in force)
    model.backbone.register_forward_pre_hook(
        lambda m, args: trained.append((tuple(args[0].shape[-2:]),
                                        dict(model.checkpoint_plan()))))
    set_random_seed(0)
    runner = train_model(model, build_training(cfg, model=model).data_loaders[0].dataset, cfg,
                         logger=logging.getLogger('ckptzoo.test.yolox.train'))
    hook = next(h for h in runner.hooks if isinstance(h, MemoryPlanHook))
    assert {b.shape for b in hook.buckets} <= set(SIZES) and (128, 128) in \
        {b.shape for b in hook.buckets}
    assert len(hook.records) == len(runner.data_loader) >= 6
    assert not hook.over_budget
    steps = trained[-len(hook.records):]
    assert [r['shape'] for r in hook.records] == [s for s, _ in steps]
    assert len({s for s, _ in steps}) >= 2  # the sizes changed within the epoch
    for record, (shape, plan) in zip(hook.records, steps):
        assert record['peak_bytes'] <= budget, record
        bucket = bucket_for(hook.buckets, shape)
        assert record['bucket'] == bucket.shape
        expected = dict.fromkeys(plan)
        expected.update(bucket.plan)
        assert plan == expected, shape
