"""tools/train.py with a memory budget that only gradient accumulation reaches: it trains
with the batch halved and 2-iteration accumulation, exactly as that setting written by hand,
and a resume reuses the saved plan and rebuilds the same run."""
import json
import logging
import os
import os.path as osp
import subprocess
import sys

import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory import minimum_peak
from ckptzoo.memory.probe import probe, probe_batch, probe_modes, worst_case_shape
from tests.test_memory.test_planner import TINY

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
