"""Preemption handlers belong to the process that installed them; a stop that cannot wait for
the next iteration still stops. (Whole training runs stopped by signals: tests/test_tools.)

What may hang runs in a forked child with a hard timeout, so a regression fails the test.
"""
import os
import signal
import sys
import time
import traceback
from multiprocessing import get_context

import pytest
import torch
from torch.utils.data import DataLoader

from ckptzoo.runner import (CheckpointHook, Hook, IterBasedRunner, OptimizerHook,
                            TrainingPreempted)
from ckptzoo.runner.checkpoint import load_file
from ckptzoo.runner.preemption import GRACE_ENV, PreemptionFlag

from tests.helpers.toy import ToyDataset, make_model, quiet_logger


def _runner(work_dir, *hooks, max_iters=1, ckpt=False):
    model = make_model()
    runner = IterBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             work_dir=str(work_dir), logger=quiet_logger(), max_iters=max_iters)
    runner.register_hook(OptimizerHook(), 'ABOVE_NORMAL')
    if ckpt:
        runner.register_hook(CheckpointHook(interval=1, by_epoch=False), 'NORMAL')
    for hook, priority in hooks:
        runner.register_hook(hook, priority)
    return runner


def _reap(pid, timeout, group=False):
    """The wait status of ``pid``; kills it (with its process ``group``) and fails when it
    still runs after ``timeout`` s."""
    for _ in range(int(timeout / 0.02)):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    (os.killpg if group else os.kill)(pid, signal.SIGKILL)  # a hung pool's workers too
    os.waitpid(pid, 0)
    raise AssertionError(f'process {pid} still ran after {timeout} s: it hung')


def _forked(fn, out, timeout=120):
    """``fn()`` in a forked child (a process group of its own) whose stdout and stderr (the
    descriptors: signal handlers write there) go to ``out``; its exit code (0: ``fn``
    returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(1, 'w', buffering=1, closefd=False)
            fn()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(_reap(pid, timeout, group=True))


@pytest.mark.slow
def test_fork_pools_under_the_runners_handler_never_hang(tmp_path):
    """``with Pool()`` ends its workers with SIGTERM (terminate): 50 of them inside a run."""

    class ForkPools(Hook):
        def before_run(self, runner):  # inside the runner's handlers
            assert signal.getsignal(signal.SIGTERM) == runner._preemption._handle
            for _ in range(50):
                with get_context('fork').Pool(4) as pool:
                    assert pool.map(abs, range(-50, 50)) == [abs(i) for i in range(-50, 50)]
            print('50 pools closed')

    def run():
        _runner(tmp_path, (ForkPools(), 'NORMAL')).run(
            [DataLoader(ToyDataset(2), batch_size=1)], [('train', 1)])

    code = _forked(run, tmp_path / "out.txt", timeout=120)
    out = (tmp_path / 'out.txt').read_text()
    assert code == 0 and '50 pools closed' in out, out[-3000:]
    assert 'received' not in out  # no worker took a pool's SIGTERM for a preemption


def _block_on_pipe(fd):
    os.read(fd, 1)  # blocks: nobody writes
    os._exit(0)


def test_sigterm_ends_a_child_forked_under_the_handler(tmp_path):
    """A forked child of a running runner (os.fork, multiprocessing) dies of SIGTERM; so does
    one whose inherited handler is still installed (forked past the fork hooks, by C code)."""
    codes = {}

    class ForkAndTerminate(Hook):
        def before_run(self, runner):
            handler = runner._preemption._handle
            assert signal.getsignal(signal.SIGTERM) == handler
            for how in ('os.fork', 'inherited handler'):
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    if how == 'inherited handler':
                        signal.signal(signal.SIGTERM, handler)
                    _block_on_pipe(r)
                if how == 'inherited handler':  # the child must have installed it
                    time.sleep(0.5)
                os.kill(pid, signal.SIGTERM)
                codes[how] = os.waitstatus_to_exitcode(_reap(pid, 30))
                os.close(r)
                os.close(w)
            r, w = os.pipe()
            proc = get_context('fork').Process(target=_block_on_pipe, args=(r, ))
            proc.start()
            proc.terminate()
            proc.join(30)
            if proc.is_alive():
                proc.kill()
            codes['multiprocessing'] = proc.exitcode
            os.close(r)
            os.close(w)

    _runner(tmp_path, (ForkAndTerminate(), 'NORMAL')).run(
        [DataLoader(ToyDataset(2), batch_size=1)], [('train', 1)])
    assert codes == {'os.fork': -signal.SIGTERM, 'inherited handler': -signal.SIGTERM,
                     'multiprocessing': -signal.SIGTERM}


def test_shielded_dataloader_workers_wait_for_their_shield(tmp_path, monkeypatch):
    """SIGINT and a stranger's SIGTERM reach every DataLoader worker before it has shielded
    itself (at the start of torch's worker loop): they wait for the shield, which drops them;
    the workers live, take no preemption for their own, and their children get the default
    handlers back."""
    from torch.utils.data._utils import signal_handling
    real = signal_handling._set_worker_signal_handlers

    def signalled_early(*args):
        os.kill(os.getpid(), signal.SIGINT)
        worker, sender = os.getpid(), os.fork()
        if sender == 0:  # a stranger's SIGTERM, as a process group's
            os.kill(worker, signal.SIGTERM)
            os._exit(0)
        os.waitpid(sender, 0)
        real(*args)

    class WorkerState(ToyDataset):
        def __getitem__(self, i):
            child = os.fork()  # a process the worker starts: SIGTERM, SIGINT as by default
            if child == 0:
                blocked = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
                ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
                os._exit(10 * blocked + ignored)
            return dict(super().__getitem__(i),
                        child=os.waitstatus_to_exitcode(_reap(child, 30)))

    def run():
        monkeypatch.setattr(signal_handling, '_set_worker_signal_handlers', signalled_early)
        children = []

        class Record(Hook):
            def after_train_iter(self, runner):
                children.extend(runner.data_batch['child'].tolist())

        runner = _runner(tmp_path, (Record(), 'NORMAL'), max_iters=4)
        runner.run([DataLoader(WorkerState(4), batch_size=1, num_workers=2)], [('train', 1)])
        assert runner.iter == 4 and children == [0] * 4, children
        print('all batches')

    code = _forked(run, tmp_path / 'out.txt', timeout=120)
    out = (tmp_path / 'out.txt').read_text()
    assert code == 0 and 'all batches' in out, out[-3000:]
    assert 'received' not in out


def test_a_stop_at_once_during_a_save_waits_for_the_complete_checkpoint(tmp_path, monkeypatch):
    """A second SIGTERM arrives while iter_1.pth is being written: the save completes, then
    the run stops at once (no preemption checkpoint) naming it."""
    real_save = torch.save

    class FirstSigterm(Hook):
        def after_train_iter(self, runner):  # before the checkpoint hook
            os.kill(os.getpid(), signal.SIGTERM)
            runner._preemption.repeat_s = 0  # this test's second signal is a real one

    def save(obj, f, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)  # the handler runs here
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, 'save', save)
    runner = _runner(tmp_path, (FirstSigterm(), 'HIGH'), max_iters=3, ckpt=True)
    with pytest.raises(TrainingPreempted) as err:
        runner.run([DataLoader(ToyDataset(3), batch_size=1)], [('train', 1)])
    monkeypatch.undo()
    assert err.value.code == 143 and err.value.stopped_now == 'second SIGTERM'
    assert err.value.checkpoint == str(tmp_path / 'iter_1.pth')
    assert 'stopped at once, nothing new saved; the last complete checkpoint is' in str(err.value)
    assert load_file(str(tmp_path / 'iter_1.pth'))['meta']['iter'] == 1  # complete
    assert os.path.realpath(tmp_path / 'latest.pth') == str(tmp_path / 'iter_1.pth')
    assert sorted(os.listdir(tmp_path)) == ['iter_1.pth', 'latest.pth']  # no temporary file
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_stop_at_once_while_a_save_is_prepared_still_writes_it(tmp_path):
    """The second SIGTERM arrives after "Saving checkpoint" while the state dict is copied and
    checked (here: in a hook's before_save_checkpoint): the announced checkpoint is written in
    full, then the run stops at once naming it."""

    class FirstSigterm(Hook):
        def after_train_iter(self, runner):  # before the checkpoint hook
            os.kill(os.getpid(), signal.SIGTERM)
            runner._preemption.repeat_s = 0  # this test's second signal is a real one

    class SlowCopy(Hook):
        def before_save_checkpoint(self, runner, checkpoint):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # the handler runs here

    runner = _runner(tmp_path, (FirstSigterm(), 'HIGH'), (SlowCopy(), 'NORMAL'), max_iters=3,
                     ckpt=True)
    with pytest.raises(TrainingPreempted) as err:
        runner.run([DataLoader(ToyDataset(3), batch_size=1)], [('train', 1)])
    assert err.value.code == 143 and err.value.stopped_now == 'second SIGTERM'
    assert err.value.checkpoint == str(tmp_path / 'iter_1.pth')
    assert load_file(str(tmp_path / 'iter_1.pth'))['meta']['iter'] == 1
    assert os.path.realpath(tmp_path / 'latest.pth') == str(tmp_path / 'iter_1.pth')
    assert sorted(os.listdir(tmp_path)) == ['iter_1.pth', 'latest.pth']


@pytest.mark.parametrize('value', ['soon', '0', '-5', 'nan'])
def test_a_bad_grace_period_fails_before_training(tmp_path, monkeypatch, value):
    monkeypatch.setenv(GRACE_ENV, value)
    with pytest.raises(ValueError, match=rf'{GRACE_ENV} must be a number of seconds > 0 .*'
                                         rf"got '{value}'"):
        _runner(tmp_path)
    monkeypatch.setenv(GRACE_ENV, 'inf')
    assert PreemptionFlag().grace == float('inf')


def test_past_the_agreed_stop_a_signal_changes_nothing():
    """After ``stop_agreed`` (every rank agreed, the checkpoint complete) a second SIGTERM, one
    that would stop a run at once before, is only noted; the handlers in place before the run
    are back after it (the runner as a library: no ``exit_on_stop``)."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingPreempted) as info:
        with PreemptionFlag(grace='inf') as flag:
            os.kill(os.getpid(), signal.SIGTERM)
            assert flag.signum == signal.SIGTERM
            exc = TrainingPreempted(flag.signum, 'preempted_iter_1.pth')
            flag.stop_agreed(exc)
            time.sleep(PreemptionFlag.repeat_s + 0.1)
            os.kill(os.getpid(), signal.SIGTERM)  # not 'second SIGTERM: stopping now'
            time.sleep(0.05)
            raise exc
    assert info.value.stopped_now is None and info.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is before
