"""MemoryPlanHook on a small RetinaNet (ResNet-18 with a frozen stage, FPN, RetinaHead) trained
by the real runner on batches of different padded shapes: the plan follows the batch and
changes no number, the measured memory reaches the log, and a step over the budget is reported
and re-planned."""
import copy
import json
import logging
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import attach_memory_hook, build_training, set_random_seed
from ckptzoo.apis.config import DEFAULT_MEMORY_CHECK_INTERVAL, ConfigError, check_config
from ckptzoo.apis.train import build_train_model
from ckptzoo.memory.model.budget import format_bytes
from ckptzoo.memory.model.buckets import Bucket
from ckptzoo.memory.plan_hook import PRIORITY, MemoryPlanHook, memory_mib
from ckptzoo.models.checkpointing.plan import resolve_plan
from ckptzoo.runner.hooks import CheckpointHook, OptimizerHook
from tests.helpers.configs import tiny_voc_retinanet

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


SEGMENT = ['backbone.layer1.0', 'backbone.layer3.1']
BUCKETS = [Bucket((32, 32), {}, [], 100, 1.0),
           Bucket((64, 64), {'backbone': 'full'}, [], 150, 2.0),
           Bucket((64, 96), {'neck': 'selective', 'bbox_head.level0': 'full'}, [SEGMENT],
                  200, 3.0),
           Bucket((96, 96), {'*': 'full'}, [], 400, 9.0)]  # dominates all; never the fastest
SHAPES = [(32, 32), (64, 32), (64, 96), (32, 32)]  # buckets 0, 1, 2, 0


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('plan_hook')
    cfg = tiny_voc_retinanet(tmp, size=32)
    cfg.runner = dict(type='EpochBasedRunner', max_epochs=1)
    set_random_seed(0)
    model = build_train_model(cfg)
    state = copy.deepcopy(model.state_dict())
    run = build_training(cfg, model=model)
    real = list(run.data_loaders[0])
    batches = [_padded(real[i % 2], shape) for i, shape in enumerate(SHAPES)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convs: threads only contend on a shared machine
    yield cfg, state, run.data_loaders[0].dataset, batches
    torch.set_num_threads(threads)


def _padded(batch, shape):
    batch = copy.deepcopy(batch)
    img = batch['img']
    out = img.new_zeros(img.shape[:-2] + tuple(shape))
    out[..., :img.shape[-2], :img.shape[-1]] = img
    batch['img'] = out
    for meta in batch['img_metas']:
        meta['pad_shape'] = (shape[0], shape[1], img.shape[1])
    return batch


def _train(setup, hook=None, plan=None, log_interval=None, steps=None, name='plan_hook',
           **options):
    """Train one epoch over the batches from the same weights; ``(runner, model, forwards)``
    with the plan and segments in force at each forward."""
    cfg, state, dataset, batches = setup
    cfg = copy.deepcopy(cfg)
    cfg.work_dir = osp.join(cfg.work_dir, name)
    for key, value in options.items():
        cfg[key] = value
    if plan is not None:
        cfg.checkpoint_plan = plan
    if log_interval is not None:
        cfg.log_config = dict(interval=log_interval, hooks=[dict(type='TextLoggerHook')])
    model = build_train_model(cfg)
    model.load_state_dict(state)
    set_random_seed(0)
    run = build_training(cfg, model=model, datasets=[dataset],
                         logger=logging.getLogger(f'ckptzoo.test.{name}'))
    if hook is not None:
        run.runner.register_hook(hook, PRIORITY)
    else:  # the measuring hook of memory_check_interval, as train_model attaches it
        attach_memory_hook(run, cfg)
    forwards = []
    model.register_forward_pre_hook(
        lambda m, args, kwargs: forwards.append((tuple(kwargs['img'].shape[-2:]),
                                                 dict(m.checkpoint_plan()),
                                                 m.checkpoint_segments())), with_kwargs=True)
    run.runner.run([copy.deepcopy(batches[:steps])], [('train', 1)])
    return run.runner, model, forwards


def _exact_plan(model, bucket):
    units = model.checkpoint_units()
    plan = dict.fromkeys(units)
    plan.update(resolve_plan(bucket.plan, units))
    return plan


def test_the_plan_follows_the_batch_and_changes_no_number(setup):
    """Buckets (plain; backbone 'full'; a segment with 'selective' and 'full' units), one
    fixed plan, no plan: the same weights and gradients after four steps of three shapes."""
    hook = MemoryPlanHook(copy.deepcopy(BUCKETS), interval=0)
    _, per_batch, forwards = _train(setup, hook)
    _, fixed, fixed_forwards = _train(setup, plan={'*': 'full'})
    _, plain, _ = _train(setup)

    # the bucket's plan, exactly (the one before is not merged in), at each forward
    assert [f[0] for f in forwards] == SHAPES
    for (shape, plan, segments), b in zip(forwards, [BUCKETS[i] for i in (0, 1, 2, 0)]):
        assert plan == _exact_plan(per_batch, b), shape
        assert segments == b.segments, shape
    assert set(fixed_forwards[0][1].values()) == {'full'}

    for other in (fixed, plain):
        for (name, p), q in zip(per_batch.named_parameters(), other.parameters()):
            assert torch.equal(p, q), name
            assert (p.grad is None) == (q.grad is None), name
            if p.grad is not None:
                assert torch.equal(p.grad, q.grad), name
        for (name, b), c in zip(per_batch.named_buffers(), other.buffers()):
            assert torch.equal(b, c), name


def test_iter_based_runner(setup):
    """The iteration-based runner sets ``data_batch`` before the hooks too."""
    hook = MemoryPlanHook(copy.deepcopy(BUCKETS), interval=2)
    _, model, forwards = _train(setup, hook, name='iter_based',
                                runner=dict(type='IterBasedRunner', max_iters=4))
    assert [f[0] for f in forwards] == SHAPES
    for (shape, plan, segments), b in zip(forwards, [BUCKETS[i] for i in (0, 1, 2, 0)]):
        assert (plan, segments) == (_exact_plan(model, b), b.segments), shape
    assert [(r['iter'], r['shape'], r['bucket']) for r in hook.records] == \
        [(1, (64, 32), (64, 64)), (3, (32, 32), (32, 32))]


def test_no_dominating_bucket_runs_under_the_largest_and_warns_once(setup, caplog):
    hook = MemoryPlanHook([copy.deepcopy(BUCKETS[0]), copy.deepcopy(BUCKETS[1])], interval=0)
    with caplog.at_level(logging.WARNING):
        _, model, forwards = _train(setup, hook, name='no_bucket')
    assert forwards[2][1] == _exact_plan(model, BUCKETS[1])  # 64x96: the largest, 64x64
    warned = [r.getMessage() for r in caplog.records if 'fits no memory-plan bucket' in
              r.getMessage()]
    assert len(warned) == 1 and 'batch of shape 64x96' in warned[0]


def _logged(caplog, runner):
    lines = [m for m in caplog.messages if m.startswith('Epoch [')]
    with open(osp.join(runner.work_dir, f'{runner.timestamp}.log.json')) as f:
        records = [json.loads(line) for line in f]
    return lines, records


def test_memory_in_the_log_is_the_max_of_the_interval(setup, caplog):
    """``memory`` (MiB) in the text line and the JSON log is the largest measured peak since
    the last line: every step with interval 1; with ``memory_check_interval = 2`` only the 2nd
    and 4th steps, so the largest batch (the 3rd) is not seen."""
    cfg, state, dataset, batches = setup
    shapes = [(64, 64), (32, 32), (256, 256), (32, 32)]  # the 3rd: MiBs more than the others
    real = [batches[0], batches[3]]  # 32x32
    setup = (cfg, state, dataset, [_padded(real[i % 2], s) for i, s in enumerate(shapes)])
    every = MemoryPlanHook(interval=1)
    with caplog.at_level(logging.INFO):
        runner, _, _ = _train(setup, every, log_interval=2, name='log_every')
    peaks = [r['peak_bytes'] for r in every.records]
    assert [r['iter'] for r in every.records] == [0, 1, 2, 3]
    assert [r['shape'] for r in every.records] == shapes
    lines, records = _logged(caplog, runner)
    want = [memory_mib(max(peaks[:2])), memory_mib(max(peaks[2:]))]
    assert [r['memory'] for r in records] == want
    assert memory_mib(sum(peaks[2:]) / 2) < want[1]  # the max, not the mean
    for line, mib in zip(lines, want):
        assert re.search(rf'data_time: [\d.]+, memory: {mib}, loss_cls', line), line
    assert list(records[0])[:5] == ['mode', 'epoch', 'iter', 'lr', 'memory']  # mmcv's order

    caplog.clear()
    with caplog.at_level(logging.INFO):
        runner, _, _ = _train(setup, log_interval=4, name='log_every_2nd',
                              memory_check_interval=2)
    hook = next(h for h in runner.hooks if isinstance(h, MemoryPlanHook))
    assert [r['iter'] for r in hook.records] == [1, 3]
    lines, records = _logged(caplog, runner)
    mib = memory_mib(max(r['peak_bytes'] for r in hook.records))
    assert [r['memory'] for r in records] == [mib]
    assert f'memory: {mib}, ' in lines[0]
    assert mib < memory_mib(peaks[2])  # the 3rd step was not measured


def test_select_is_injected(setup):
    calls = []

    def select(buckets, shape):
        calls.append(shape)
        return buckets[-1]
    hook = MemoryPlanHook(copy.deepcopy(BUCKETS), interval=0, select=select)
    _, model, forwards = _train(setup, hook, steps=2, name='select')
    assert calls == SHAPES[:2]
    assert all(set(plan.values()) == {'full'} for _, plan, _ in forwards)


def test_hook_order_after_the_optimizer_hook(setup):
    """The measurement ends after the optimizer hook's backward and step, and before the
    checkpoint hook saves."""
    cfg = copy.deepcopy(setup[0])
    cfg.memory_check_interval = 3
    cfg.checkpoint_config = dict(interval=1)
    run = build_training(cfg, model=build_train_model(cfg), datasets=[setup[2]])
    attach_memory_hook(run, cfg)
    runner = run.runner
    kinds = [type(h) for h in runner.hooks]
    hook = runner.hooks[kinds.index(MemoryPlanHook)]
    assert hook.interval == 3 and hook.priority == PRIORITY
    assert kinds.index(OptimizerHook) < kinds.index(MemoryPlanHook) < kinds.index(CheckpointHook)
    cfg.memory_check_interval = 0
    run = build_training(cfg, model=build_train_model(cfg), datasets=[setup[2]])
    attach_memory_hook(run, cfg)
    runner = run.runner
    assert MemoryPlanHook not in [type(h) for h in runner.hooks]
    cfg.pop('memory_check_interval')  # unset: sparsely, so that a CPU run logs memory too
    run = build_training(cfg, model=build_train_model(cfg), datasets=[setup[2]])
    hook = attach_memory_hook(run, cfg)
    assert hook.interval == DEFAULT_MEMORY_CHECK_INTERVAL == 50


@pytest.mark.parametrize('value', [-1, 1.5, '2', True])
def test_memory_check_interval_is_checked(value):
    cfg = Config(dict(memory_check_interval=value))
    with pytest.raises(ConfigError, match=r"memory_check_interval must be a non-negative int "
                                          r"\(0: off.*got " + re.escape(repr(value))):
        check_config(cfg)
    check_config(Config(dict(memory_check_interval=4)))


def test_guard_reports_and_replans(setup, caplog):
    """A budget below what the 32x32 step needs: the step is reported (iteration, measured,
    budget, batch shape, boxes, bucket), ``replan`` gets them, and the next step runs under
    the plan it returned."""
    calls = []
    replanned = Bucket((32, 32), {'*': 'full'}, [], 50, 1.5)

    def replan(bucket, measured, shape, boxes):
        calls.append((bucket.shape, measured, shape, boxes))
        return replanned
    buckets = copy.deepcopy(BUCKETS)
    hook = MemoryPlanHook(buckets, budget=100_000, interval=1, replan=replan,
                          plan_file='work/memory_plan.json')
    cfg, state, dataset, batches = setup
    boxes = max(len(b) for b in batches[0]['gt_bboxes'])
    with caplog.at_level(logging.WARNING):
        _, model, forwards = _train((cfg, state, dataset, [batches[0], batches[0]]), hook,
                                    name='guard')
    peak = hook.records[0]['peak_bytes']
    assert peak > 100_000
    assert calls[0] == ((32, 32), peak, (32, 32), boxes)
    assert forwards[0][1] == _exact_plan(model, BUCKETS[0])
    assert forwards[1][1] == _exact_plan(model, replanned)  # the next step: the new plan
    assert hook.buckets[0] is replanned and hook.buckets[1:] == BUCKETS[1:]
    event = hook.over_budget[0]
    assert (event['iter'], event['shape'], event['boxes'], event['bucket']) == \
        (0, (32, 32), boxes, (32, 32))
    msg = [m for m in caplog.messages if 'over the memory budget' in m][0]
    for part in ('iteration 1', '97.7 KiB', 'batch 32x32', f'at most {boxes} ground-truth box',
                 'bucket 32x32', 'planned again',
                 # a plan made for other data is the usual cause: how to plan again
                 'If the data or the model changed since the plan was made, plan again: a '
                 'resumed run plans again by itself when the model, the image sizes or the box '
                 'counts differ from those the plan file (work/memory_plan.json) records; to '
                 'plan again now, stop the run, delete the plan file and resume'):
        assert part in msg, (part, msg)
    assert format_bytes(peak) in msg


def test_guard_without_replan_takes_the_most_frugal_plan(setup, caplog):
    """Without ``replan`` the bucket takes the most frugal bucket's plan, then 'full' on every
    unit, then the warning says that training goes on over the budget: never silently."""
    buckets = copy.deepcopy(BUCKETS)
    hook = MemoryPlanHook(buckets, budget=100_000, interval=1)
    cfg, state, dataset, batches = setup
    with caplog.at_level(logging.WARNING):
        _, model, forwards = _train((cfg, state, dataset, [batches[0]] * 3), hook,
                                    name='frugal')
    # 64x96's peak per pixel (200 / 6144) is the smallest: 32x32 takes its plan
    assert forwards[1][1] == _exact_plan(model, BUCKETS[2])
    assert forwards[1][2] == [SEGMENT]
    assert forwards[2][1] == _exact_plan(model, BUCKETS[3]) and forwards[2][2] == []
    assert [e['action'] for e in hook.over_budget] == [
        'given the plan of the bucket 64x96 (the most frugal)', "given 'full' on every unit",
        'none: no more frugal plan']
    assert hook.buckets[0].shape == (32, 32) and hook.buckets[0].plan == {'*': 'full'}
    assert hook.buckets[1:] == BUCKETS[1:]
    assert 'training goes on over the budget' in caplog.messages[-1]
    assert 'delete the plan file and resume' in caplog.messages[-1]


def test_on_cuda_every_step_is_measured_from_its_start(tmp_path, monkeypatch):
    """On CUDA the peak is the allocator's, reset at each step's start: every step is measured
    (``interval`` is for the CPU's costly count) and no tracker runs."""
    from ckptzoo.memory import plan_hook
    from tests.helpers.hook_fakes import FakeRunner
    allocator = dict(peak=0, resets=0)
    sizes = [3, 7, 2]

    def step(runner, batch):
        allocator['peak'] = max(allocator['peak'], sizes[batch] * 2 ** 20)
        return dict(log_vars={'loss': 1.0}, num_samples=1)

    def reset(device=None):
        allocator.update(peak=0, resets=allocator['resets'] + 1)
    from ckptzoo.memory.measure import peak_meter
    monkeypatch.setattr(plan_hook, 'cuda_device', lambda model: torch.device('cuda:0'))
    monkeypatch.setattr(peak_meter, 'LiveTensorTracker', None)  # not used on CUDA
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device=None: allocator['peak'])
    monkeypatch.setattr(torch.cuda, 'reset_peak_memory_stats', reset)
    hook = MemoryPlanHook(interval=0, budget=5 * 2 ** 20)
    runner = FakeRunner(tmp_path, step_fn=step)
    runner.register_hook(hook, PRIORITY)
    runner.run_epochs([0, 1, 2], max_epochs=1)
    assert [r['peak_bytes'] for r in hook.records] == [3 * 2 ** 20, 7 * 2 ** 20, 2 * 2 ** 20]
    assert allocator['resets'] == 3
    assert runner.log_buffer.output['memory'] == 7
    assert [e['iter'] for e in hook.over_budget] == [1]  # no plan to change: said so
    assert any('no memory plan to change' in m for m in runner.log_handler.messages)


def test_bad_arguments_fail_before_training(setup):
    with pytest.raises(ValueError, match=r'interval must be a non-negative int.*got -1'):
        MemoryPlanHook(interval=-1)
    assert MemoryPlanHook(budget='6GB').budget == 6 * 10 ** 9
    with pytest.raises(ValueError, match=r"MemoryPlanHook budget: .*got '6gb'"):
        MemoryPlanHook(budget='6gb')
    with pytest.raises(TypeError, match=r'buckets\[0\] .* lacks the attributes shape, plan'):
        MemoryPlanHook([dict(shape=(32, 32))])
    bad = [Bucket((32, 32), {'backbone.layer9': 'full'}, [], 1, 1.0)]
    with pytest.raises(KeyError, match=r'the plan of the bucket 32x32: .*backbone.layer9'):
        _train(setup, MemoryPlanHook(bad), name='bad_plan')


def test_without_an_interval_the_first_step_of_each_kind_is_measured(setup):
    """With a budget and ``interval=0`` (the CPU default) the hook still measures the first
    step of each kind whose memory differs: per bucket, each position of the accumulation
    window (its first iteration, the one that steps) before and after the optimizer's state
    exists; a repeat of a kind is not measured again. Without a budget nothing is measured."""
    cfg, state, dataset, batches = setup
    same = (cfg, state, dataset, [batches[0]] * 6)  # one shape: one bucket
    hook = MemoryPlanHook(copy.deepcopy(BUCKETS), budget=1 << 40, interval=0)
    _train(same, hook, name='first_of_kind', optimizer_config=dict(cumulative_iters=2))
    assert [r['iter'] for r in hook.records] == [0, 1, 2, 3]
    assert hook.records[3]['peak_bytes'] > hook.records[2]['peak_bytes']  # gradients held
    unguarded = MemoryPlanHook(copy.deepcopy(BUCKETS), interval=0)
    _train(same, unguarded, name='first_of_kind_no_budget',
           optimizer_config=dict(cumulative_iters=2))
    assert not unguarded.records
