import json
import os.path as osp
import re
import sys
import types

import pytest
import torch

from ckptzoo.registry import build_hook
from ckptzoo.runner.hooks import (Hook, IterTimerHook, LoggerHook, TensorboardLoggerHook,
                                  TextLoggerHook)
from ckptzoo.runner.hooks.logger import text as text_module
from ckptzoo.runner.hooks import iter_timer as iter_timer_module
from tests.helpers.hook_fakes import FakeRunner


def _fixed_step(runner, batch):
    """Loss values that vary per iteration, so averages over the interval are checked."""
    runner.log_buffer.update({'data_time': 0.25, 'time': 1.0})
    return dict(log_vars={'loss_cls': 0.5 + batch, 'loss': 0.7 + batch, 'grad_norm': 1.2,
                          'loss_scale': 512.0}, num_samples=2)


def _lines(runner, prefix):
    return [m for m in runner.log_handler.messages if m.startswith(prefix)]


def _json_lines(runner):
    with open(osp.join(runner.work_dir, f'{runner.timestamp}.log.json')) as f:
        return [json.loads(line) for line in f]


def test_text_logger_by_epoch(tmp_path):
    runner = FakeRunner(tmp_path, meta=dict(exp_name='exp1', seed=3), step_fn=_fixed_step)
    runner.register_hook(TextLoggerHook(interval=2), 'VERY_LOW')
    runner.run_epochs([0, 1, 2, 3], max_epochs=2)

    lines = _lines(runner, 'Epoch [')
    assert len(lines) == 4  # [1][2/4] [1][4/4] [2][2/4] [2][4/4]
    # 8 iterations of 1 s each: 6 left after the 2nd, 4 after the 4th
    assert lines[0] == ('Epoch [1][2/4]\tlr: 1.000e-02, eta: 0:00:06, time: 1.000, '
                        'data_time: 0.250, loss_cls: 1.0000, loss: 1.2000, '
                        'grad_norm: 1.2000, loss_scale: 512.0000')
    assert lines[1].startswith('Epoch [1][4/4]\tlr: 1.000e-02, eta: 0:00:04, ')
    assert 'loss_cls: 3.0000, loss: 3.2000' in lines[1]  # mean of iterations 2 and 3
    assert lines[3].startswith('Epoch [2][4/4]\tlr: 1.000e-02, eta: 0:00:00, ')
    assert 'memory' not in lines[0]  # the model is on the CPU
    assert runner.log_handler.messages.count('Exp name: exp1') == 2  # each epoch's end

    records = _json_lines(runner)
    assert records[0] == dict(exp_name='exp1', seed=3)
    assert len(records) == 5
    assert records[1] == dict(mode='train', epoch=1, iter=2, lr=0.01, data_time=0.25,
                              time=1.0, loss_cls=1.0, loss=1.2, grad_norm=1.2,
                              loss_scale=512.0)
    assert [(r['epoch'], r['iter']) for r in records[1:]] == [(1, 2), (1, 4), (2, 2), (2, 4)]


def test_text_logger_eta_hours(tmp_path):
    def slow_step(runner, batch):
        runner.log_buffer.update({'data_time': 0.5, 'time': 900.0})
        return dict(log_vars={'loss': 1.0}, num_samples=1)

    runner = FakeRunner(tmp_path, step_fn=slow_step)
    runner.register_hook(TextLoggerHook(interval=5, by_epoch=False), 'VERY_LOW')
    runner.run_iters(list(range(10)), max_iters=20)
    lines = _lines(runner, 'Iter [')
    assert lines[0].startswith('Iter [5/20]\tlr: 1.000e-02, eta: 3:45:00, time: 900.000, ')
    assert lines[1].startswith('Iter [10/20]\tlr: 1.000e-02, eta: 2:30:00, ')
    assert [r['iter'] for r in _json_lines(runner)] == [5, 10, 15, 20]


def test_text_logger_not_ignore_last_and_reset(tmp_path):
    runner = FakeRunner(tmp_path, step_fn=_fixed_step)
    first, last = TextLoggerHook(interval=2, ignore_last=False), TextLoggerHook(interval=2)
    runner.register_hook(first, 'VERY_LOW')
    runner.register_hook(last, 'VERY_LOW')
    runner.run_epochs([0, 1, 2, 3, 4], max_epochs=1)
    assert last.reset_flag and not first.reset_flag  # mmcv: the last logger resets
    # the first logger also logs the short window at the end of the epoch
    iters = [line.split('\t')[0] for line in _lines(runner, 'Epoch [')]
    # (the last logger prints the window too: the buffer is still ``ready``, as in mmcv)
    assert iters == ['Epoch [1][2/5]', 'Epoch [1][2/5]', 'Epoch [1][4/5]', 'Epoch [1][4/5]',
                     'Epoch [1][5/5]', 'Epoch [1][5/5]']
    assert 'loss_cls: 4.0000' in _lines(runner, 'Epoch [1][5/5]')[0]  # 0.5 + mean of 3, 4


def test_text_logger_dict_lr_and_val_line(tmp_path):
    a, b = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    optim = dict(a=torch.optim.SGD(a.parameters(), lr=0.1),
                 b=torch.optim.SGD(b.parameters(), lr=0.02))
    runner = FakeRunner(tmp_path, optimizer=optim, step_fn=_fixed_step)
    hook = TextLoggerHook(interval=1)
    runner.register_hook(hook, 'VERY_LOW')
    runner.data_loader = [0, 1]
    hook.before_run(runner)
    runner._max_iters = 2
    _fixed_step(runner, 0)
    runner.log_buffer.update({'loss': 0.5})
    hook.after_train_iter(runner)
    assert runner.log_handler.messages[-1].startswith(
        'Epoch [1][1/2]\tlr_a: 1.000e-01 lr_b: 2.000e-02, eta: ')
    # evaluation results written by an EvalHook after the epoch: a val line
    runner.inner_iter = 1
    runner.log_buffer.output.update(eval_iter_num=7, bbox_mAP=0.25)
    runner.log_buffer.ready = True
    hook.after_train_epoch(runner)
    assert runner.log_handler.messages[-1] == 'Epoch(val) [1][7]\tbbox_mAP: 0.2500'
    last = _json_lines(runner)[-1]
    assert last == dict(mode='val', epoch=1, iter=7, lr=dict(a=0.1, b=0.02), bbox_mAP=0.25)


def test_text_logger_out_dir(tmp_path):
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    (work_dir / 'cfg.py').write_text('x = 1')
    (work_dir / 'skip.pth').write_text('w')
    runner = FakeRunner(work_dir, step_fn=_fixed_step, meta=dict(seed=0))
    runner.register_hook(TextLoggerHook(interval=1, out_dir=str(tmp_path / 'out'),
                                        keep_local=False), 'VERY_LOW')
    runner.run_epochs([0], max_epochs=1)
    out = tmp_path / 'out' / 'work'
    assert sorted(p.name for p in out.iterdir()) == ['20240101_000000.log.json', 'cfg.py']
    assert not (work_dir / 'cfg.py').exists() and (work_dir / 'skip.pth').exists()
    assert len((out / '20240101_000000.log.json').read_text().splitlines()) == 2


def test_iter_timer(tmp_path, monkeypatch):
    clock = iter([10.0, 10.5, 12.0, 12.25, 13.0])  # epoch start, iter0 in/out, iter1 in/out
    monkeypatch.setattr(iter_timer_module.time, 'time', lambda: next(clock))
    runner = FakeRunner(tmp_path, step_fn=lambda r, b: dict(log_vars={}, num_samples=1))
    runner.register_hook(IterTimerHook(), 'LOW')
    runner.run_epochs([0, 1], max_epochs=1)
    assert runner.log_buffer.val_history['data_time'] == pytest.approx([0.5, 0.25])
    assert runner.log_buffer.val_history['time'] == pytest.approx([2.0, 1.0])


def test_logger_base_helpers(tmp_path):
    runner = FakeRunner(tmp_path)
    hook = build_hook(dict(type='TextLoggerHook', interval=3))
    assert isinstance(hook, LoggerHook) and hook.interval == 3 and hook.by_epoch
    runner.epoch, runner.iter, runner.inner_iter = 2, 25, 4
    runner.log_buffer.output.update(time=1., data_time=0.1, loss=0.5, msg='hi')
    assert hook.get_mode(runner) == 'train' and hook.get_epoch(runner) == 3
    assert hook.get_iter(runner) == 26 and hook.get_iter(runner, inner_iter=True) == 5
    assert hook.get_loggable_tags(runner) == {'train/loss': 0.5, 'learning_rate': 0.01,
                                              'momentum': 0.9}
    runner.mode = 'val'
    assert hook.get_mode(runner) == 'val' and hook.get_epoch(runner) == 2
    with pytest.raises(ValueError, match='interval must be a positive int, got 0'):
        TextLoggerHook(interval=0)


def test_tensorboard_missing_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'torch.utils.tensorboard', None)  # as if not installed
    runner = FakeRunner(tmp_path)
    hook = TensorboardLoggerHook()
    runner.register_hook(hook, 'VERY_LOW')
    with pytest.raises(ImportError, match='pip install tensorboard'):
        hook.before_run(runner)


def test_tensorboard_writes_tags(tmp_path, monkeypatch):
    calls = []

    class SummaryWriter:

        def __init__(self, log_dir):
            calls.append(('init', log_dir))

        def add_scalar(self, tag, val, step):
            calls.append(('scalar', tag, val, step))

        def add_text(self, tag, val, step):
            calls.append(('text', tag, val, step))

        def close(self):
            calls.append(('close',))

    fake = types.ModuleType('torch.utils.tensorboard')
    fake.SummaryWriter = SummaryWriter
    monkeypatch.setitem(sys.modules, 'torch.utils.tensorboard', fake)
    runner = FakeRunner(tmp_path, step_fn=_fixed_step)
    runner.register_hook(TensorboardLoggerHook(interval=2), 'VERY_LOW')
    runner.run_epochs([0, 1], max_epochs=1)
    assert calls[0] == ('init', osp.join(str(tmp_path), 'tf_logs'))
    assert ('scalar', 'train/loss', pytest.approx(1.2), 2) in calls
    assert ('scalar', 'learning_rate', 0.01, 2) in calls
    assert ('scalar', 'momentum', 0.9, 2) in calls
    assert not any(c[1] in ('train/time', 'train/data_time') for c in calls if len(c) > 1)
    assert calls[-1] == ('close',)


@pytest.mark.cuda
def test_text_logger_memory_on_cuda(tmp_path):
    runner = FakeRunner(tmp_path, model=torch.nn.Linear(2, 2).cuda(), step_fn=_fixed_step)
    runner.register_hook(TextLoggerHook(interval=1), 'VERY_LOW')
    runner.run_epochs([0], max_epochs=1)
    line = _lines(runner, 'Epoch [')[0]
    assert re.search(r'data_time: 0\.250, memory: \d+, loss_cls', line)
    assert isinstance(_json_lines(runner)[0]['memory'], int)


def test_eta_counts_every_iteration(tmp_path):
    # epochs of 5 with interval 2: the 5th iteration of each epoch is not logged, but its
    # time counts (mmcv's ETA counted 2 per line and said 0:00:02 here)
    runner = FakeRunner(tmp_path, step_fn=_fixed_step)
    runner.register_hook(TextLoggerHook(interval=2), 'VERY_LOW')
    runner.run_epochs([0, 1, 2, 3, 4], max_epochs=2)
    line = _lines(runner, 'Epoch [2][2/5]')[0]
    assert line.startswith('Epoch [2][2/5]\tlr: 1.000e-02, eta: 0:00:03, ')


class _MemoryStub(Hook):
    """What MemoryPlanHook leaves in the log buffer: the largest measured MiB since the last
    line (cleared with the output after each line)."""

    def __init__(self, mibs):
        self.mibs = mibs

    def after_train_iter(self, runner):
        output = runner.log_buffer.output
        output['memory'] = max(output.get('memory', 0), self.mibs[runner.iter])


class _EvalStub(Hook):
    def after_train_epoch(self, runner):
        runner.log_buffer.output['mAP'] = 0.5
        runner.log_buffer.ready = True


def test_text_logger_memory_from_the_log_buffer(tmp_path, monkeypatch):
    """A hook's ``memory`` is printed on CPU in the head of the training line and in the JSON
    log, reduced with MAX over the ranks; the evaluation line that follows does not carry it."""
    reduced = []

    class FakeDist:
        ReduceOp = types.SimpleNamespace(MAX='max')

        @staticmethod
        def is_available():
            return True

        @staticmethod
        def is_initialized():
            return True

        @staticmethod
        def reduce(tensor, dst, op):
            reduced.append((tensor.item(), dst, op))
            tensor.fill_(max(tensor.item(), 9))  # the other rank measured 9 MiB

    monkeypatch.setattr(text_module, 'dist', FakeDist)
    runner = FakeRunner(tmp_path, step_fn=_fixed_step, world_size=2)
    runner.register_hook(_MemoryStub([3, 11, 4, 6, 2]), 45)
    runner.register_hook(_EvalStub(), 'LOW')
    runner.register_hook(TextLoggerHook(interval=2), 'VERY_LOW')
    runner.run_epochs([0, 1, 2, 3, 4], max_epochs=1)
    lines = _lines(runner, 'Epoch [')
    assert 'data_time: 0.250, memory: 11, loss_cls' in lines[0]  # max(3, 11; 9 on the other)
    assert 'data_time: 0.250, memory: 9, loss_cls' in lines[1]  # max(4, 6; 9 on the other)
    assert reduced == [(11, 0, 'max'), (6, 0, 'max')]
    records = _json_lines(runner)  # the 5th step (2) is not logged, as its losses
    assert [r.get('memory') for r in records] == [11, 9, None]
    assert records[2]['mode'] == 'val' and records[2]['mAP'] == 0.5


def test_text_logger_cuda_memory_is_the_peak_since_the_last_line(tmp_path, monkeypatch):
    """mmcv printed ``max_memory_allocated`` since the start of the run; the peak is reset
    after each line, so a line shows its own interval's peak."""
    allocator = dict(peak=0, resets=0)
    sizes = [5, 1, 2, 1]

    def step(runner, batch):
        allocator['peak'] = max(allocator['peak'], sizes[batch] * 2 ** 20 + 7)
        return _fixed_step(runner, batch)

    def reset(device=None):
        allocator.update(peak=0, resets=allocator['resets'] + 1)
    monkeypatch.setattr(text_module, 'cuda_device', lambda model: torch.device('cpu'))
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda device=None: allocator['peak'])
    monkeypatch.setattr(torch.cuda, 'reset_peak_memory_stats', reset)
    runner = FakeRunner(tmp_path, step_fn=step)
    runner.register_hook(TextLoggerHook(interval=2), 'VERY_LOW')
    runner.run_epochs([0, 1, 2, 3], max_epochs=1)
    assert [r['memory'] for r in _json_lines(runner)] == [5, 2]
    assert allocator['resets'] == 2


def test_eta_after_a_resume_with_another_batch_size_counts_what_is_left():
    """Resumed after 2 of 4 epochs of 16 iterations with a 4x batch: 4 iterations an epoch, so
    max_iters is 16 while the iteration count is 32 (``max_iters - iter`` < 0: the log said
    ``eta: -1 day, 23:59:35``). Left: 3 of this epoch and 4 of the next."""
    from types import SimpleNamespace
    from ckptzoo.runner.hooks.logger.text import TextLoggerHook
    hook = TextLoggerHook()
    hook.start_iter = hook._timed_until = 32
    runner = SimpleNamespace(iter=32, max_iters=16, epoch=2, max_epochs=4, inner_iter=0,
                             data_loader=[None] * 4, mode='train')
    assert hook._eta(dict(time=1.0), runner) == '0:00:07'
    runner.iter, runner.inner_iter = 35, 3  # the epoch's last iteration, timed 1 s each
    assert hook._eta(dict(time=1.0), runner) == '0:00:04'
    iter_based = SimpleNamespace(iter=9, max_iters=8, epoch=0, max_epochs=None, inner_iter=0,
                                 data_loader=None, mode='train')
    hook.start_iter = hook._timed_until = 9
    assert hook._eta(dict(time=1.0), iter_based) == '0:00:00'  # never negative
