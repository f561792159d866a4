"""The probe and the planner on a tiny classifier: predictions against measured steps."""
import json
import logging
import os
import os.path as osp
import random
import re
import subprocess
import sys

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory import (Group, InfeasibleBudget, apply_plan, plan_modes, plan_segments,
                            predict_peak, solve, uniform_plan)
from ckptzoo.memory.solver import chen_sqrt_plan, minimum_peak
from ckptzoo.memory.probe import measure_step, probe, probe_batch, worst_case_shape
from tests.tool_loader import load_tool

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
    from ckptzoo.memory.solver import choose_plan
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
    tool = load_tool('plan_memory.py')
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
