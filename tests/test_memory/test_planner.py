"""The probe and the planner on a tiny classifier: predictions against measured steps."""
import importlib.util
import json
import logging
import os
import os.path as osp
import random
import re
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory import (Group, InfeasibleBudget, plan_modes, plan_segments, predict_peak,
                            solve, uniform_plan)
from ckptzoo.memory.planner import PlanResult, apply_plan, plan_memory, plan_training, \
    planning_requested
from ckptzoo.memory.solver import chen_sqrt_plan, minimum_peak
from ckptzoo.memory.probe import measure_step, probe, probe_batch, worst_case_shape

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

TINY = dict(
    model=dict(type='ImageClassifier',
               backbone=dict(type='ResNet', depth=18, base_channels=8, norm_eval=False,
                             zero_init_residual=False),
               head=dict(type='LinearClsHead', num_classes=4, in_channels=64, topk=(1,))),
    data=dict(samples_per_gpu=4, workers_per_gpu=0,
              train=dict(type='SyntheticClassificationDataset', num_samples=16, num_classes=4,
                         img_size=48, seed=0)),
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=1e-4),
    optimizer_config=dict(grad_clip=None), lr_config=None, checkpoint_config=None,
    log_config=None, runner=dict(type='IterBasedRunner', max_iters=4),
    workflow=[('train', 1)], seed=0)


def _run(tmp_path, **overrides):
    set_random_seed(0)
    cfg = Config(dict(TINY, work_dir=str(tmp_path), **overrides))
    return cfg, build_training(cfg, logger=logging.getLogger('test_planner'))


@pytest.fixture(scope='module')
def probed(tmp_path_factory):
    cfg, run = _run(tmp_path_factory.mktemp('probe'))
    batch = probe_batch(run, worst_case_shape(cfg))
    return cfg, run, batch, probe(run, batch, modes=(None, 'full', 'selective'))


def test_probe_predicts_the_measured_peak(probed):
    _, run, batch, table = probed
    model = run.runner.model
    assert table.names[0] == 'backbone.stem' and len(table.units) == 9
    plain = sum(u.kept[None] for u in table.units)
    assert sum(u.kept['full'] for u in table.units) < 0.3 * plain
    rng = random.Random(0)
    plans = [uniform_plan(table, m) for m in (None, 'full', 'selective')] + [
        tuple(Group(i, i + 1, rng.choice(u.modes)) for i, u in enumerate(table.units))
        for _ in range(2)]
    peaks = set()
    for plan in plans:
        model.set_checkpoint_plan(plan_modes(table, plan))
        measured, _ = measure_step(run, batch)
        assert predict_peak(table, plan) == pytest.approx(measured, rel=0.005)
        peaks.add(measured)
    assert max(peaks) > 1.04 * min(peaks)  # the plans differ by far more than the tolerance
    model.set_checkpoint_plan({'*': None})


def test_segment_plans_predict_the_measured_peak(probed):
    """The model's chain (stem and every block) and its exits (stage outputs the head does
    not take are still returned: out_indices are all four stages) reach the table; segment
    plans, applied to the model, peak as predicted."""
    _, run, batch, table = probed
    model = run.runner.model
    assert table.chains == [(0, 9)] and table.exits == [2, 4, 6]
    n = len(table.units)
    plans = [chen_sqrt_plan(table), (Group(0, n, 'full'), ),
             (Group(0, 1, 'selective'), Group(1, 5, 'full'), Group(5, 6, None),
              Group(6, 8, 'full'), Group(8, 9, 'full')), minimum_peak(table).plan]
    assert all(any(g.stop - g.start > 1 for g in plan) for plan in plans)
    for plan in plans:
        apply_plan(model, table, plan)
        assert len(model.checkpoint_segments()) == sum(g.stop - g.start > 1 for g in plan)
        measured, _ = measure_step(run, batch)
        assert predict_peak(table, plan) == pytest.approx(measured, rel=0.002), plan
    apply_plan(model, table, uniform_plan(table, None))
    assert model.checkpoint_segments() == []


def test_full_derived_from_the_plain_step(probed):
    """'full' is derived from the plain step, not run: its kept bytes are those of a recorded
    'full' step, its transients bound the recorded ones from above and closely."""
    _, run, batch, table = probed
    recorded = probe(run, batch, modes=(None, 'full'), derive_full=False)
    for derived, real in zip(table.units, recorded.units):
        assert derived.kept['full'] == real.kept['full'], derived.name
        assert derived.kept['full'] < 0.5 * derived.kept[None]
        # the forward transient is bounded by the plain one (plus the spare BN counters)
        assert real.fwd_peak['full'] <= derived.fwd_peak['full'] <= \
            derived.fwd_peak[None] + 64, derived.name
        assert real.bwd_peak['full'] <= derived.bwd_peak['full'] <= \
            real.bwd_peak['full'] + 0.01 * real.bwd_peak['full'], derived.name


def test_segments_only_where_no_per_unit_plan_fits():
    """choose_plan keeps to one checkpoint per unit down to the per-unit floor, takes segments
    below it, and the chosen peak never rises as the budget falls across the switch."""
    from ckptzoo.memory.planner import choose_plan
    from tests.test_memory.test_solver import random_table
    table = random_table(12, 5, modes=(None, 'full', 'selective'))
    floor = minimum_peak(table, segments=False).peak
    lowest = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    assert lowest < floor
    budgets = sorted({floor, floor - 1, lowest, (lowest + floor) // 2,
                      *range(floor, high + 1, max(1, (high - floor) // 8))}, reverse=True)
    peaks = []
    for budget in budgets:
        plan = choose_plan(table, budget).plan
        assert bool(plan_segments(table, plan)) == (budget < floor), budget
        if budget >= floor:  # the fastest per-unit plan
            assert plan == solve(table, budget, segments=False).plan
        peaks.append(predict_peak(table, plan))
    assert peaks == sorted(peaks, reverse=True)
    with pytest.raises(InfeasibleBudget) as info:
        choose_plan(table, lowest - 1)
    assert info.value.minimum.peak == lowest  # the smallest with segments


def test_plan_memory_fits_validates_and_restores_the_weights(probed):
    _, _, _, table = probed
    low = predict_peak(table, uniform_plan(table, 'full'))
    high = predict_peak(table, uniform_plan(table, None))
    cfg, run, _, _ = probed
    model = run.runner.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt_before = {p: {k: v.clone() for k, v in s.items()}
                  for p, s in run.runner.optimizer.state.items()}
    result = plan_memory(run, cfg, (low + high) // 2)
    assert result.measured_peak_bytes <= result.budget_bytes
    assert result.predicted_peak_bytes <= result.budget_bytes
    assert set(result.plan.values()) - {None} and None in result.plan.values()
    assert dict(model.checkpoint_plan()) == result.plan
    assert model.checkpoint_segments() == result.segments
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert all(torch.equal(s['momentum_buffer'], opt_before[p]['momentum_buffer'])
               for p, s in run.runner.optimizer.state.items())  # as the probe found them
    assert measure_step(run, probed[2])[0] == result.measured_peak_bytes  # segments included
    with pytest.raises(InfeasibleBudget, match=r'smallest predicted peak is \d+ B'):
        solve(table, low // 2, segments=False)


def test_a_segment_plan_round_trips_through_json_and_resume(probed, tmp_path):
    """A plan with segments, as its JSON, applied to the model by hand or by a resumed run:
    the same plan, the same measured peak."""
    cfg, run, batch, table = probed
    model = run.runner.model
    plan = chen_sqrt_plan(table)
    apply_plan(model, table, plan)
    peak, _ = measure_step(run, batch)
    result = PlanResult(peak, predict_peak(table, plan), peak, plan_modes(table, plan),
                        plan_segments(table, plan), False, 1, 4)
    saved = json.loads(json.dumps(result.to_json()))
    assert saved['segments'] == [['backbone.stem', 'backbone.layer1.1'],
                                 ['backbone.layer2.0', 'backbone.layer3.0'],
                                 ['backbone.layer3.1', 'backbone.layer4.1']]
    model.set_checkpoint_plan({'*': None})
    model.set_checkpoint_segments([])
    model.set_checkpoint_plan(saved['plan'])
    model.set_checkpoint_segments(saved['segments'])
    assert measure_step(run, batch)[0] == peak
    model.set_checkpoint_segments([])
    (tmp_path / 'memory_plan.json').write_text(json.dumps(saved))
    resumed = plan_training(run, Config(dict(cfg.to_dict(), work_dir=str(tmp_path),
                                             memory_budget=peak)), resume=True)
    assert resumed.to_json() == result.to_json()
    assert model.checkpoint_segments() == saved['segments']
    assert dict(model.checkpoint_plan()) == saved['plan']
    apply_plan(model, table, uniform_plan(table, None))


def test_config_interface_errors():
    cfg = Config(dict(TINY, model=dict(TINY['model'], backbone=dict(
        TINY['model']['backbone'], with_cp='auto'))))
    with pytest.raises(ValueError, match=r"model.backbone.with_cp='auto' needs a memory "
                                         r"budget: set memory_budget = '6GB'"):
        planning_requested(cfg)
    cfg.memory_budget = '6GiBs'
    with pytest.raises(ValueError, match=r"units B, KB, MB, GB, KiB, MiB, GiB"):
        planning_requested(cfg)
    cfg.memory_budget = '5800MiB'
    assert planning_requested(cfg) == 5800 * 2 ** 20
    assert cfg.model.backbone.with_cp is False  # the plan sets the modes
    assert planning_requested(Config(TINY)) is None


@pytest.mark.parametrize('resize,pad,expected', [
    (dict(img_scale=(1000, 600), keep_ratio=True), dict(size_divisor=32), (1024, 1024)),
    (dict(img_scale=(320, 256), keep_ratio=False), dict(size_divisor=32), (256, 320)),
    (dict(img_scale=[(1333, 640), (1333, 800)], keep_ratio=True), None, (1333, 1333)),
])
def test_worst_case_shape(resize, pad, expected):
    pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', **resize)]
    pipeline += [dict(type='Pad', **pad)] if pad else []
    cfg = Config(dict(data=dict(train=dict(type='RepeatDataset', times=2,
                                           dataset=dict(pipeline=pipeline)))))
    assert worst_case_shape(cfg) == expected


def _tool(script, args, tmp_path):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', script)] + args,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    return proc


def test_tools_plan_memory_and_train(tmp_path, probed, capsys):
    _, _, _, table = probed
    budget = (predict_peak(table, uniform_plan(table, 'full')) +
              predict_peak(table, uniform_plan(table, None))) // 2
    cfg_path = tmp_path / 'tiny.py'
    Config(dict(TINY, memory_budget=f'{budget}B',
                checkpoint_config=dict(interval=2, by_epoch=False))).dump(str(cfg_path))
    out = tmp_path / 'plan.json'
    spec = importlib.util.spec_from_file_location('plan_memory_tool',
                                                  osp.join(ROOT, 'tools', 'plan_memory.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([str(cfg_path), '--out', str(out), '--work-dir', str(tmp_path)]) == 0
    stdout = capsys.readouterr().out
    assert 'selective MiB' in stdout and 'measured peak' in stdout
    plan = json.loads(out.read_text())
    assert set(plan) >= {'budget_bytes', 'predicted_peak_bytes', 'measured_peak_bytes', 'plan',
                         'segments', 'fp16', 'cumulative_iters', 'samples_per_gpu'}
    assert plan['budget_bytes'] == budget and plan['measured_peak_bytes'] <= budget
    _, run = _run(tmp_path / 'check')
    assert dict(run.runner.model.set_checkpoint_plan(plan['plan'])) == plan['plan']

    work = tmp_path / 'work'
    proc = _tool('train.py', [str(cfg_path), '--work-dir', str(work)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    saved = json.loads((work / 'memory_plan.json').read_text())
    assert saved['measured_peak_bytes'] <= budget
    proc = _tool('train.py', [str(cfg_path), '--work-dir', str(work), '--resume-from',
                              str(work / 'latest.pth')], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'memory plan: reusing' in proc.stdout + proc.stderr


def test_ddp_every_rank_trains_rank0s_plan(tmp_path, probed):
    """2-rank gloo: the probe steps all-reduce their log variables on every rank, so all ranks
    probe in step and follow rank 0's table and measurements."""
    import socket
    _, _, _, table = probed
    # every rank also holds DDP's gradient buckets, which a single process does not
    budget = (predict_peak(table, uniform_plan(table, 'full')) +
              predict_peak(table, uniform_plan(table, None))) // 2 + table.fixed['gradients']
    cfg_path = tmp_path / 'tiny_ddp.py'
    Config(dict(TINY, memory_budget=budget, dist_params=dict(backend='gloo'),
                checkpoint_config=dict(interval=4, by_epoch=False))).dump(str(cfg_path))
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', str(port), osp.join(ROOT, 'tools', 'train.py'), str(cfg_path),
         '--launcher', 'pytorch', '--work-dir', str(tmp_path / 'work')],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
        env=dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS='1'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((tmp_path / 'work' / 'memory_plan.json').read_text())
    assert saved['measured_peak_bytes'] <= budget
    assert (tmp_path / 'work' / 'iter_4.pth').exists()
    # the peak counts the reducer's buckets: a copy of every gradient
    fixed = re.search(r'fixed: parameters .*', proc.stdout + proc.stderr).group(0)
    gradients = re.search(r'gradients ([\d.]+ \w+)', fixed).group(1)
    assert f'ddp_buckets {gradients}' in fixed, fixed


def _tiny64(tmp_path, samples_per_gpu=4, **overrides):
    """TINY at 64 px, where the activations (not the optimizer step) set the peak."""
    data = dict(TINY['data'], samples_per_gpu=samples_per_gpu,
                train=dict(TINY['data']['train'], img_size=64))
    set_random_seed(0)
    cfg = Config(dict(TINY, data=data, work_dir=str(tmp_path), **overrides))
    return cfg, build_training(cfg, logger=logging.getLogger('test_planner'))


def test_outer_options_divide_the_batch_under_accumulation():
    from ckptzoo.memory.planner import apply_options, outer_options
    cfg = Config(dict(TINY, optimizer_config=dict(grad_clip=None, cumulative_iters=3)))
    assert outer_options(cfg, cuda=False) == [
        dict(fp16=False, cumulative_iters=6, samples_per_gpu=2),
        dict(fp16=False, cumulative_iters=12, samples_per_gpu=1)]
    assert outer_options(cfg, cuda=True)[:3] == [
        dict(fp16=True, cumulative_iters=3, samples_per_gpu=4),
        dict(fp16=True, cumulative_iters=6, samples_per_gpu=2),
        dict(fp16=False, cumulative_iters=6, samples_per_gpu=2)]
    apply_options(cfg, dict(fp16=False, cumulative_iters=6, samples_per_gpu=2))
    assert cfg.optimizer_config == dict(grad_clip=None, cumulative_iters=6)
    assert cfg.data.samples_per_gpu == 2 and cfg.optimizer.lr == TINY['optimizer']['lr']


def test_infeasible_budget_names_the_minimum_and_its_options(tmp_path):
    """samples_per_gpu=2: the outer search tries samples_per_gpu=1 with 2-iteration
    accumulation; below its smallest peak nothing fits, and the error says what reaches it."""
    from ckptzoo.memory import minimum_peak
    from ckptzoo.memory.planner import probe_modes
    cfg, run = _tiny64(tmp_path / 'one', 1, optimizer_config=dict(grad_clip=None,
                                                                  cumulative_iters=2))
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=probe_modes(run))
    smallest = minimum_peak(table, segments=False).peak
    cfg, run = _tiny64(tmp_path / 'two', 2)
    with pytest.raises(InfeasibleBudget) as info:
        plan_memory(run, cfg, smallest - 1)
    assert info.value.minimum.peak == smallest
    assert info.value.options == dict(fp16=False, cumulative_iters=2, samples_per_gpu=1)
    message = str(info.value)
    assert f'smallest predicted peak is {smallest} B' in message
    assert 'with fp16=False, cumulative_iters=2, samples_per_gpu=1' in message
    assert 'fp16 is not available on a CPU' in message


def test_a_batch_too_small_for_batchnorm_ends_the_outer_search(tmp_path):
    """At 32 px the last stage of the ResNet is 1x1: one image leaves BatchNorm one value per
    channel, which torch refuses in training. The outer search stops at two images and says
    why, instead of ending in BatchNorm's ValueError."""
    data = dict(TINY['data'], samples_per_gpu=2, train=dict(TINY['data']['train'], img_size=32))
    set_random_seed(0)
    cfg = Config(dict(TINY, data=data, work_dir=str(tmp_path)))
    run = build_training(cfg, logger=logging.getLogger('test_planner'))
    before = {k: v.clone() for k, v in run.runner.model.state_dict().items()}
    with pytest.raises(InfeasibleBudget) as info:
        plan_memory(run, cfg, 10 ** 5)
    message = str(info.value)
    assert message.startswith('no checkpoint plan fits memory_budget=100000 B')
    assert 'samples_per_gpu=1 and below cannot train this model (Expected more than 1 value ' \
           'per channel when training, got input size torch.Size([1, 64, 1, 1]): ' \
           'normalisation in training needs more than one value per channel), so the search ' \
           'stopped at samples_per_gpu=2' in message
    for key, value in run.runner.model.state_dict().items():
        assert torch.equal(value, before[key]), key
