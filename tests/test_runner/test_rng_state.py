"""The trainer's random state survives a resume: a model with dropout (and draws from numpy and
Python's ``random``, as multi-scale steps make) continues exactly, in one process and per rank
under DDP."""
import io
import logging
import os
import random
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ckptzoo.datasets import build_dataloader
from ckptzoo.runner import (CheckpointHook, EpochBasedRunner, IterBasedRunner,
                            MMDistributedDataParallel, OptimizerHook)
from ckptzoo.runner.hooks import EvalHook
from ckptzoo.runner.rng_state import get_rng_state, restore_rng_state, set_rng_state

from tests.helpers.faults import ToyEvalDataset

from tests.helpers.toy import DropoutRegressor, ToyDataset, quiet_logger


def _seed(seed):
    """What ``tools/train.py`` does at the start of a process."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _draws():
    return random.random(), float(np.random.rand()), float(np.random.randn()), torch.rand(3)


def _same_draws(a, b):
    return a[:3] == b[:3] and torch.equal(a[3], b[3])


def test_state_round_trips_through_a_weights_only_load():
    _seed(3)
    np.random.randn()  # numpy keeps a cached Gaussian: part of the state
    buf = io.BytesIO()
    torch.save(dict(meta=dict(rng_state=[get_rng_state()])), buf)
    expected = _draws()
    _seed(4)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)['meta']['rng_state']
    set_rng_state(loaded[0])
    assert _same_draws(_draws(), expected)


def test_restore_warns_in_one_line_when_the_checkpoint_cannot_give_the_state(caplog):
    _seed(5)
    state, saved = get_rng_state(), _draws()
    _seed(6)
    current = _draws()
    logger = quiet_logger()
    cases = [(None, 0, 1, 'holds no random state (saved by mmcv or an older ckptzoo)'),
             ([state], 0, 2, 'holds the random state of 1 rank(s), this run has 2'),
             ([state, None], 1, 2, 'holds no random state for rank 1 (rank 0 saved it alone')]
    for states, rank, world_size, message in cases:
        _seed(6)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=logger.name):
            restore_rng_state(states, rank, world_size, 'ckpt.pth', logger)
        assert len(caplog.records) == 1 and message in caplog.text, caplog.text
        assert 'ckpt.pth' in caplog.text and 'continue from the seed' in caplog.text
        assert _same_draws(_draws(), current)  # left alone
    _seed(6)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=logger.name):
        restore_rng_state([None, state], 1, 2, 'ckpt.pth', logger)  # rank 1 takes its own
    assert not caplog.records and _same_draws(_draws(), saved)
    # CUDA states for another number of devices: the CPU generators are still restored
    state = dict(state, cuda=[bytes(16)] * 9)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        restore_rng_state([state], 0, 1, 'ckpt.pth', logger)
    assert 'holds the CUDA random state of 9 device(s), this process sees' in caplog.text
    assert _same_draws(_draws(), saved)


def _runner(work_dir, max_epochs=3, kind='epoch'):
    """A fresh process's run: seeded, 5 iterations an epoch, a checkpoint after every iteration
    and an evaluation after every 5 (which must not disturb the training's draws)."""
    _seed(0)
    model = DropoutRegressor()
    train = build_dataloader(ToyDataset(10), 2, 0, seed=0)
    val = build_dataloader(ToyEvalDataset(num_samples=3, seed=1), 1, 0, shuffle=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    runner_cls, length = ((EpochBasedRunner, dict(max_epochs=max_epochs)) if kind == 'epoch'
                          else (IterBasedRunner, dict(max_iters=max_epochs * 5)))
    runner = runner_cls(model, optimizer=optimizer, work_dir=str(work_dir),
                        logger=quiet_logger(), meta={}, **length)
    runner.register_hook(OptimizerHook(), 'ABOVE_NORMAL')
    runner.register_hook(CheckpointHook(interval=1, by_epoch=False), 'NORMAL')
    runner.register_hook(EvalHook(val, interval=1 if kind == 'epoch' else 5,
                                  by_epoch=kind == 'epoch'), 'LOW')
    return runner, train


def _final(path):
    ckpt = torch.load(path, weights_only=True)
    return ckpt['state_dict'], ckpt['optimizer']['state']


def _assert_equal(result, reference):
    (weights, optim), (ref_weights, ref_optim) = result, reference
    assert weights.keys() == ref_weights.keys()
    differ = [k for k in weights if not torch.equal(weights[k], ref_weights[k])]
    assert not differ, differ
    assert all(torch.equal(optim[i]['momentum_buffer'], ref_optim[i]['momentum_buffer'])
               for i in ref_optim)


@pytest.mark.parametrize('kind', ['epoch', 'iter'])
def test_dropout_resumes_exactly_mid_epoch_and_at_an_epoch_end(tmp_path, caplog, kind):
    runner, train = _runner(tmp_path / 'full', kind=kind)
    runner.run([train], [('train', 1)])
    reference = _final(tmp_path / 'full' / 'latest.pth')
    start = _final(tmp_path / 'full' / 'iter_7.pth')[0]
    assert not torch.equal(start['fc1.weight'], reference[0]['fc1.weight'])  # it trained on
    for at in (7, 10):  # inside epoch 2; the end of epoch 2, before its evaluation
        runner, train = _runner(tmp_path / f'from_{at}', kind=kind)
        with caplog.at_level(logging.WARNING, logger=runner.logger.name):
            runner.resume(str(tmp_path / 'full' / f'iter_{at}.pth'))
        assert not caplog.records, caplog.text
        assert 'rng_state' not in runner.meta  # never carried into later checkpoints as stale
        runner.run([train], [('train', 1)])
        _assert_equal(_final(tmp_path / f'from_{at}' / 'latest.pth'), reference)


def test_old_checkpoint_resumes_with_a_warning_and_load_from_ignores_the_state(tmp_path,
                                                                              caplog):
    runner, train = _runner(tmp_path / 'full', max_epochs=1)
    runner.run([train], [('train', 1)])
    old = torch.load(tmp_path / 'full' / 'iter_3.pth', weights_only=True)
    del old['meta']['rng_state']  # as mmcv 1.x and older ckptzoo versions write them
    torch.save(old, tmp_path / 'old.pth')
    runner, train = _runner(tmp_path / 'resumed', max_epochs=1)
    with caplog.at_level(logging.WARNING, logger=runner.logger.name):
        runner.resume(str(tmp_path / 'old.pth'))
    assert len(caplog.records) == 1 and 'holds no random state' in caplog.text
    runner.run([train], [('train', 1)])
    assert runner.iter == 5
    # load_from: the weights only; the generators stay where this run's seed put them
    _seed(0)
    expected = _draws()
    runner, _ = _runner(tmp_path / 'load_from', max_epochs=1)
    _seed(0)
    runner.load_checkpoint(str(tmp_path / 'full' / 'iter_3.pth'))
    assert _same_draws(_draws(), expected)


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _ddp_runner(rank, work_dir):
    _seed(rank)  # tools/train.py --diff-seed: each rank its own dropout
    model = MMDistributedDataParallel(DropoutRegressor(), broadcast_buffers=False)
    train = build_dataloader(ToyDataset(8), 1, 0, dist=True, seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    runner = EpochBasedRunner(model, optimizer=optimizer,
                              work_dir=str(work_dir), logger=quiet_logger(), meta={},
                              max_epochs=3)
    runner.register_hook(OptimizerHook(), 'ABOVE_NORMAL')
    runner.register_hook(CheckpointHook(interval=1, by_epoch=False), 'NORMAL')
    return runner, train


def _ddp_worker(rank, port, out_dir):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=2)
    try:
        runner, train = _ddp_runner(rank, os.path.join(out_dir, 'full'))
        runner.run([train], [('train', 1)])  # 4 iterations an epoch, 12 in all
        dist.barrier()
        runner, train = _ddp_runner(rank, os.path.join(out_dir, 'resumed'))
        runner.resume(os.path.join(out_dir, 'full', 'iter_6.pth'))  # inside epoch 2
        runner.run([train], [('train', 1)])
    finally:
        dist.destroy_process_group()


@pytest.mark.subprocess
@pytest.mark.skipif(not dist.is_available(), reason='torch.distributed is not available')
def test_each_rank_resumes_its_own_random_state(tmp_path):
    """2 gloo ranks seeded differently (``--diff-seed``): rank 0's checkpoint holds both ranks'
    states, and each rank continues from its own."""
    mp.start_processes(_ddp_worker, args=(_free_port(), str(tmp_path)), nprocs=2,
                       start_method='fork')
    states = torch.load(tmp_path / 'full' / 'iter_6.pth', weights_only=True)['meta']['rng_state']
    assert len(states) == 2 and states[0]['torch'] != states[1]['torch']
    _assert_equal(_final(tmp_path / 'resumed' / 'latest.pth'),
                  _final(tmp_path / 'full' / 'latest.pth'))
