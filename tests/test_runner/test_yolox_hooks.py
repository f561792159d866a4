"""YOLOX's hooks (mmdet 2.x): YOLOXLrUpdaterHook (lr at every iteration by hand),
YOLOXModeSwitchHook (the switch, and after a resume), SyncNormHook (averaging over two
processes)."""
import math
import os
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ckptzoo.runner.hooks import (SyncNormHook, YOLOXLrUpdaterHook, YOLOXModeSwitchHook,
                                  build_lr_hook)
from tests.helpers.hook_fakes import CumulativeStub, FakeRunner


class _Recorder:
    def __init__(self):
        self.lrs = []

    def before_train_iter(self, runner):
        self.lrs.append(runner.current_lr()[0])


def _lrs(tmp_path, epochs, epoch_len, cumulative=None, **kw):
    runner = FakeRunner(tmp_path, optimizer=torch.optim.SGD(torch.nn.Linear(2, 2).parameters(),
                                                            lr=0.01))
    if cumulative:
        runner.register_hook(CumulativeStub(cumulative), 'ABOVE_NORMAL')
    rec = _Recorder()
    runner.register_hook(build_lr_hook(dict(policy='YOLOX', **kw)), 'VERY_HIGH')
    runner.register_hook(rec, 'LOWEST')
    runner.run_epochs(list(range(epoch_len)), epochs)
    return rec.lrs


def test_lr_schedule_of_the_yolox_configs_by_hand(tmp_path):
    # 10 epochs x 4 iterations, warmup 2 epochs (8 iterations), the last 3 epochs flat
    lrs = _lrs(tmp_path, 10, 4, warmup='exp', by_epoch=False, warmup_by_epoch=True,
               warmup_ratio=1, warmup_iters=2, num_last_epochs=3, min_lr_ratio=0.05)
    assert len(lrs) == 40
    for i in range(8):
        assert lrs[i] == pytest.approx(0.01 * ((i + 1) / 8) ** 2)
    for i in range(8, 40):
        progress = i + 1
        if progress >= 40 - 12:
            expected = 0.0005
        else:
            factor = (progress - 8) / (40 - 8 - 12)
            expected = 0.0005 + 0.5 * (0.01 - 0.0005) * (math.cos(math.pi * factor) + 1)
        assert lrs[i] == pytest.approx(expected), i


def test_lr_by_epoch_counts_the_last_epochs_in_epochs(tmp_path):
    lrs = _lrs(tmp_path, 6, 3, by_epoch=True, num_last_epochs=2, min_lr=0.001)
    per_epoch = lrs[::3]
    assert per_epoch[3:] == [0.001] * 3  # epochs 3, 4, 5: progress + 1 >= 6 - 2
    assert per_epoch[0] > per_epoch[1] > per_epoch[2] > 0.001
    with pytest.raises(ValueError, match='num_last_epochs must be a non-negative int'):
        YOLOXLrUpdaterHook(num_last_epochs=-1)


def test_lr_under_accumulation_counts_updates(tmp_path):
    plain = _lrs(tmp_path, 4, 6, by_epoch=False, num_last_epochs=1, min_lr_ratio=0.1)
    acc = _lrs(tmp_path, 4, 6, cumulative=2, by_epoch=False, num_last_epochs=1,
               min_lr_ratio=0.1)
    assert acc[::2] == acc[1::2]  # one lr per update
    assert acc[-1] == plain[-1] == pytest.approx(0.001)


class _MixSet:
    def __init__(self):
        self.skip = None

    def update_skip_type_keys(self, keys):
        self.skip = keys


def _switch_runner(tmp_path, epoch):
    model = torch.nn.Module()
    model.bbox_head = types.SimpleNamespace(use_l1=False)
    runner = FakeRunner(tmp_path, model=model, optimizer=object())
    runner.epoch = epoch
    runner._max_epochs = 10
    runner.data_loader = types.SimpleNamespace(dataset=types.SimpleNamespace(dataset=_MixSet()))
    return runner


@pytest.mark.parametrize('epoch,switched', [(5, False), (6, True), (9, True)])
def test_mode_switch_from_the_last_epochs_and_after_a_resume(tmp_path, epoch, switched):
    runner = _switch_runner(tmp_path, epoch)
    hook = YOLOXModeSwitchHook(num_last_epochs=3)
    hook.before_train_epoch(runner)
    mix = runner.data_loader.dataset.dataset
    assert runner.model.bbox_head.use_l1 is switched
    assert mix.skip == (['Mosaic', 'RandomAffine', 'MixUp'] if switched else None)


def test_mode_switch_restarts_persistent_workers_and_names_a_wrong_dataset(tmp_path):
    runner = _switch_runner(tmp_path, 9)
    runner.data_loader.persistent_workers = True
    runner.data_loader._iterator = object()
    YOLOXModeSwitchHook(num_last_epochs=3).before_train_epoch(runner)
    assert runner.data_loader._iterator is None
    runner = _switch_runner(tmp_path, 9)
    runner.data_loader.dataset = [1, 2]
    with pytest.raises(TypeError, match='MultiImageMixDataset; the training set is a list'):
        YOLOXModeSwitchHook(num_last_epochs=3).before_train_epoch(runner)


def _sync_worker(rank, port, results):
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=2)
    try:
        torch.manual_seed(rank)
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2))
        model.train()(torch.randn(4, 1, 3, 3))
        runner = types.SimpleNamespace(model=model, epoch=1, max_epochs=10)
        SyncNormHook(num_last_epochs=2, interval=2).after_train_epoch(runner)
        results[rank] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    finally:
        dist.destroy_process_group()


def test_sync_norm_averages_the_norm_states_over_ranks(tmp_path):
    from multiprocessing import Manager
    port = 29500 + os.getpid() % 1000
    with Manager() as manager:
        results = manager.dict()
        mp.spawn(_sync_worker, args=(port, results), nprocs=2)
        r0, r1 = dict(results[0]), dict(results[1])
    for key in ('1.weight', '1.bias', '1.running_mean', '1.running_var'):
        torch.testing.assert_close(r0[key], r1[key])
    assert not torch.equal(r0['0.weight'], r1['0.weight'])  # the convs are left alone
    assert r0['1.num_batches_tracked'] == 1
    # the mean of the two ranks' statistics
    stats = []
    for rank in (0, 1):
        torch.manual_seed(rank)
        bn = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 1), torch.nn.BatchNorm2d(2)).train()
        bn(torch.randn(4, 1, 3, 3))
        stats.append(bn[1].running_mean)
    torch.testing.assert_close(r0['1.running_mean'], (stats[0] + stats[1]) / 2)


def test_sync_norm_interval_and_single_process(tmp_path):
    hook = SyncNormHook(num_last_epochs=2, interval=3)
    runner = types.SimpleNamespace(epoch=4, max_epochs=10, model=torch.nn.BatchNorm2d(2))
    assert hook._interval(runner) == 3
    runner.epoch = 7  # 7 + 1 >= 10 - 2: every epoch, also right after a resume
    assert hook._interval(runner) == 1
    hook.after_train_epoch(runner)  # one process: nothing to do
    with pytest.raises(ValueError, match='interval must be an int >= 1, got 0'):
        SyncNormHook(interval=0)
