"""tools/train.py with a memory budget that only gradient accumulation reaches: it trains
with the batch halved and 2-iteration accumulation, exactly as that setting written by hand,
and a resume reuses the saved plan and rebuilds the same run."""
import json
import logging
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory import minimum_peak, predict_peak, uniform_plan
from ckptzoo.memory.measure.probe import probe, probe_batch, probe_modes, worst_case_shape
from tests.helpers.configs import TINY, build_tiny
from tests.helpers.tools import load_tool

pytestmark = pytest.mark.subprocess

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _config(**overrides):
    data = dict(TINY['data'], train=dict(TINY['data']['train'], img_size=64))
    return dict(TINY, data=data, checkpoint_config=dict(interval=2, by_epoch=False),
                **overrides)


def _minimum(tmp_path, samples_per_gpu, cumulative_iters):
    set_random_seed(0)
    spec = _config(work_dir=str(tmp_path),
                   optimizer_config=dict(grad_clip=None, cumulative_iters=cumulative_iters))
    spec['data'] = dict(spec['data'], samples_per_gpu=samples_per_gpu)
    cfg = Config(spec)
    run = build_training(cfg, logger=logging.getLogger('test_train_planned'))
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=probe_modes(run))
    return minimum_peak(table, segments=False).peak


def _train(cfg_path, work_dir, *args):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', 'train.py'), str(cfg_path),
                           '--work-dir', str(work_dir)] + list(args),
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def _weights(path):
    return torch.load(path, map_location='cpu', weights_only=True)['state_dict']


@pytest.mark.slow
def test_budget_reached_by_accumulation_trains_with_it(tmp_path):
    at4, at2 = _minimum(tmp_path / 'p4', 4, 1), _minimum(tmp_path / 'p2', 2, 2)
    assert at2 < at4
    budget = (at2 + at4) // 2  # no checkpoint plan fits at samples_per_gpu=4
    planned = tmp_path / 'planned.py'
    Config(_config(memory_budget=budget)).dump(str(planned))
    log = _train(planned, tmp_path / 'work')
    plan = json.loads((tmp_path / 'work' / 'memory_plan.json').read_text())
    assert (plan['fp16'], plan['cumulative_iters'], plan['samples_per_gpu']) == (False, 2, 2)
    assert plan['measured_peak_bytes'] <= budget
    assert 'GradientCumulativeOptimizerHook' in log

    # the same setting by hand: identical weights after 4 iterations (2 optimizer updates)
    by_hand = tmp_path / 'by_hand.py'
    spec = _config(optimizer_config=dict(grad_clip=None, cumulative_iters=2),
                   checkpoint_plan=plan['plan'])
    spec['data'] = dict(spec['data'], samples_per_gpu=2)
    Config(spec).dump(str(by_hand))
    _train(by_hand, tmp_path / 'hand')
    final = _weights(tmp_path / 'work' / 'iter_4.pth')
    reference = _weights(tmp_path / 'hand' / 'iter_4.pth')
    assert not all(torch.equal(final[k], _weights(tmp_path / 'hand' / 'iter_2.pth')[k])
                   for k in final)  # the last window stepped
    for key, value in reference.items():
        assert torch.equal(final[key], value), key

    # a resume reuses the plan and rebuilds the same run
    log = _train(planned, tmp_path / 'work', '--resume-from',
                 str(tmp_path / 'work' / 'iter_2.pth'))
    assert 'memory plan: reusing' in log
    resumed = _weights(tmp_path / 'work' / 'iter_4.pth')
    for key, value in reference.items():
        assert torch.equal(resumed[key], value), key


def _tool(script, args, tmp_path):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', script)] + args,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    return proc


@pytest.mark.slow
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
    _, run = build_tiny(tmp_path / 'check')
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


@pytest.mark.slow
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
