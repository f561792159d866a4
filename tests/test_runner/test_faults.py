"""Faults inside one process: non-finite numbers, fp16 overflow, a full disk, SIGINT, and what
``--auto-resume`` picks. (Signals and kills of whole training processes: tests/test_tools.)"""
import errno
import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader

from ckptzoo.runner import (CheckpointHook, Fp16OptimizerHook, Hook, IterBasedRunner,
                            OptimizerHook, TrainingPreempted, find_latest_checkpoint)
from ckptzoo.runner.checkpoint import load_file

from tests.helpers.toy import ToyDataset, ToyRegressor, make_model, quiet_logger


class NanFrom(ToyDataset):
    """Targets become nan from sample ``start`` on."""

    def __init__(self, start, num_samples=6):
        super().__init__(num_samples)
        self.y[start:] = float('nan')


class InfGradRegressor(ToyRegressor):
    """A finite loss whose gradient is inf: d sqrt(x) / dx at x = 0."""

    def forward_train(self, img, target, **kwargs):
        losses = super().forward_train(img, target)
        bias = self.fc2.bias
        losses['loss_mse'] = losses['loss_mse'] + torch.sqrt(bias - bias.detach()).sum()
        return losses


def _runner(tmp_path, hook, dataset, max_iters=5, model=None, ckpt=True, max_keep=2):
    model = model or make_model()
    runner = IterBasedRunner(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             work_dir=str(tmp_path), logger=quiet_logger(), meta={},
                             max_iters=max_iters)
    runner.register_hook(hook, 'ABOVE_NORMAL')
    if ckpt:
        runner.register_hook(CheckpointHook(interval=1, by_epoch=False,
                                            max_keep_ckpts=max_keep), 'NORMAL')
    return runner, DataLoader(dataset, batch_size=1)


def _finite(path):
    return all(torch.isfinite(v).all() for v in load_file(str(path))['state_dict'].values())


def test_nonfinite_loss_stops_before_saving_and_names_last_finite_checkpoint(tmp_path):
    runner, data = _runner(tmp_path, OptimizerHook(), NanFrom(2))
    with pytest.raises(FloatingPointError) as err:
        runner.run([data], [('train', 1)])
    msg = str(err.value)
    assert 'the loss is not finite (loss_mse=nan, loss=nan) at iteration 3' in msg
    assert f'the last checkpoint with finite weights is {tmp_path}/iter_2.pth' in msg
    assert sorted(os.listdir(tmp_path)) == ['iter_1.pth', 'iter_2.pth', 'latest.pth']
    assert _finite(tmp_path / 'iter_2.pth')


def test_check_finite_false_trains_on_and_rotation_keeps_last_finite(tmp_path):
    runner, data = _runner(tmp_path, OptimizerHook(check_finite=False), NanFrom(2))
    runner.run([data], [('train', 1)])  # mmcv 1.x: on with nan
    assert runner.last_finite_checkpoint == str(tmp_path / 'iter_2.pth')
    # max_keep_ckpts=2 keeps the newest two and the newest with finite weights
    assert sorted(os.listdir(tmp_path)) == ['iter_2.pth', 'iter_4.pth', 'iter_5.pth',
                                            'latest.pth']
    assert _finite(tmp_path / 'iter_2.pth') and not _finite(tmp_path / 'iter_5.pth')
    assert load_file(str(tmp_path / 'iter_5.pth'))['meta']['finite_weights'] is False
    resumed, _ = _runner(tmp_path / 'r', OptimizerHook(), NanFrom(2))
    resumed.resume(str(tmp_path / 'iter_5.pth'))  # the run's record survives a resume
    assert resumed.last_finite_checkpoint == str(tmp_path / 'iter_2.pth')


def test_nonfinite_gradient_norm_and_weights_stop(tmp_path):
    hook = OptimizerHook(grad_clip=dict(max_norm=1.))
    runner, data = _runner(tmp_path / 'a', hook, ToyDataset(6), model=InfGradRegressor())
    start = [p.clone() for p in runner.model.parameters()]
    with pytest.raises(FloatingPointError, match=r'the gradient norm is (inf|nan) .*at '
                       r'iteration 1;.*no checkpoint with finite weights on disk'):
        runner.run([data], [('train', 1)])
    assert all(torch.equal(a, b) for a, b in zip(start, runner.model.parameters()))  # no step

    class Poison(Hook):  # between the optimizer step and the checkpoint hook
        def after_train_iter(self, runner):
            if runner.iter == 2:
                with torch.no_grad():
                    runner.model.fc1.weight[0, 0] = float('inf')

    runner, data = _runner(tmp_path / 'b', OptimizerHook(), ToyDataset(6), ckpt=False)
    runner.register_hook(Poison(), 'NORMAL')
    runner.register_hook(CheckpointHook(interval=1, by_epoch=False), 'NORMAL')
    with pytest.raises(FloatingPointError, match=r'the weights are not finite \(fc1.weight\) '
                       r'at iteration 3;.*finite weights is .*iter_2.pth'):
        runner.run([data], [('train', 1)])
    assert not (tmp_path / 'b' / 'iter_3.pth').exists()


@pytest.mark.parametrize('loss_scale, kwargs, match', [
    ('dynamic', {}, r'dynamic loss scale fell to 0.5, below min_loss_scale=1, after 17 '),
    (512., dict(max_consecutive_skips=4), r'4 optimizer steps in a row were skipped'),
])
def test_fp16_stops_when_the_scale_collapses(tmp_path, loss_scale, kwargs, match):
    hook = Fp16OptimizerHook(loss_scale=loss_scale, **kwargs)
    runner, data = _runner(tmp_path, hook, ToyDataset(30), max_iters=30,
                           model=InfGradRegressor(), ckpt=False)
    with pytest.warns(UserWarning, match=r"on a CPU.*fp16 = dict\(dtype='bfloat16'\)"):
        with pytest.raises(FloatingPointError, match=match + r".*dtype='bfloat16'"):
            runner.run([data], [('train', 1)])
    assert runner.meta['fp16']['skipped_in_a_row'] == (17 if loss_scale == 'dynamic' else 4)
    # check_finite=False: skips forever, as mmcv 1.x
    hook = Fp16OptimizerHook(loss_scale=loss_scale, check_finite=False, **kwargs)
    runner, data = _runner(tmp_path, hook, ToyDataset(30), max_iters=30,
                           model=InfGradRegressor(), ckpt=False)
    runner.run([data], [('train', 1)])
    assert runner.meta['fp16']['skipped_in_a_row'] == 30


def test_bf16_on_cpu_does_not_warn(tmp_path, recwarn):
    runner, data = _runner(tmp_path, Fp16OptimizerHook(dtype='bfloat16'), ToyDataset(2),
                           max_iters=1, ckpt=False)
    runner.run([data], [('train', 1)])
    assert not [w for w in recwarn if 'on a CPU' in str(w.message)]


def test_disk_full_names_path_and_size_and_keeps_previous_checkpoints(tmp_path, monkeypatch):
    runner, data = _runner(tmp_path, OptimizerHook(), ToyDataset(6), max_iters=6, max_keep=-1)
    real_save, calls = torch.save, []

    def full_disk_save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) < 3 * 2 + 1:  # a checkpoint and the latest.pth copy
            return real_save(obj, f, *args, **kwargs)
        f.write(b'the first bytes')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, 'symlink', lambda *a: (_ for _ in ()).throw(OSError('no links')))
    monkeypatch.setattr(torch, 'save', full_disk_save)
    with pytest.raises(OSError) as err:
        runner.run([data], [('train', 1)])
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC
    assert err.value.filename == str(tmp_path / 'iter_4.pth')
    needed = sum(p.numel() * 4 for p in runner.model.parameters())
    assert f'iter_4.pth: it needs at least {needed} bytes' in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ['iter_1.pth', 'iter_2.pth', 'iter_3.pth',
                                            'latest.pth']  # no partial file left
    latest = load_file(str(tmp_path / 'latest.pth'))
    assert latest['meta']['iter'] == 3 and _finite(tmp_path / 'iter_3.pth')
    resumed, _ = _runner(tmp_path / 'r', OptimizerHook(), ToyDataset(6))
    resumed.resume(str(tmp_path / 'latest.pth'))
    assert resumed.iter == 3


def test_sigint_saves_and_exits_130_and_restores_handlers(tmp_path):

    class CtrlC(Hook):
        def after_train_iter(self, runner):
            if runner.iter == 1:
                os.kill(os.getpid(), signal.SIGINT)

    runner, data = _runner(tmp_path, OptimizerHook(), ToyDataset(6), ckpt=False)
    runner.register_hook(CtrlC())
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingPreempted) as err:
        runner.run([data], [('train', 1)])
    assert err.value.code == 130 and isinstance(err.value, SystemExit)
    assert err.value.checkpoint == str(tmp_path / 'preempted_iter_2.pth')
    assert load_file(err.value.checkpoint)['meta']['iter'] == 2
    assert os.path.realpath(tmp_path / 'latest.pth') == err.value.checkpoint
    assert signal.getsignal(signal.SIGINT) is before


def test_two_sigints_at_once_are_one_ctrl_c(tmp_path):
    """A terminal or launcher may deliver Ctrl-C twice within milliseconds: one stop, with
    its checkpoint, as for SIGTERM."""

    class CtrlCTwice(Hook):
        def after_train_iter(self, runner):
            if runner.iter == 1:
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)

    runner, data = _runner(tmp_path, OptimizerHook(), ToyDataset(6), ckpt=False)
    runner.register_hook(CtrlCTwice())
    with pytest.raises(TrainingPreempted) as err:
        runner.run([data], [('train', 1)])
    assert err.value.code == 130 and not err.value.stopped_now
    assert load_file(str(tmp_path / 'preempted_iter_2.pth'))['meta']['iter'] == 2


def test_second_sigint_a_second_later_stops_at_once(tmp_path):

    class CtrlCTwice(Hook):
        def after_train_iter(self, runner):
            if runner.iter == 1:
                os.kill(os.getpid(), signal.SIGINT)
                runner._preemption.repeat_s = 0  # this test's second signal is a real one
                os.kill(os.getpid(), signal.SIGINT)

    runner, data = _runner(tmp_path, OptimizerHook(), ToyDataset(6), ckpt=False)
    runner.register_hook(CtrlCTwice())
    with pytest.raises(TrainingPreempted) as err:
        runner.run([data], [('train', 1)])
    assert err.value.code == 130 and err.value.stopped_now == 'second SIGINT'
    assert not list(tmp_path.glob('*.pth'))  # stopped before the end of the iteration


def test_sighup_saves_and_exits_129_and_restores_handlers(tmp_path):
    """SIGHUP (schedulers, a closed terminal) is a stop request like SIGTERM; a child forked
    during the run has the handler of before the run back."""
    child_handler = {}

    class HangUp(Hook):
        def before_run(self, runner):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.write(w, b'1' if signal.getsignal(signal.SIGHUP) is before else b'0')
                os._exit(0)
            os.waitpid(pid, 0)
            child_handler['restored'] = os.read(r, 1) == b'1'

        def after_train_iter(self, runner):
            if runner.iter == 1:
                os.kill(os.getpid(), signal.SIGHUP)

    def previous(signum, frame):
        pass

    before = signal.signal(signal.SIGHUP, previous)
    before = previous
    try:
        runner, data = _runner(tmp_path, OptimizerHook(), ToyDataset(6), ckpt=False)
        runner.register_hook(HangUp())
        with pytest.raises(TrainingPreempted) as err:
            runner.run([data], [('train', 1)])
        assert signal.getsignal(signal.SIGHUP) is previous
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert err.value.code == 129 and 'training preempted by SIGHUP' in str(err.value)
    assert load_file(err.value.checkpoint)['meta']['iter'] == 2
    assert child_handler == {'restored': True}


def test_find_latest_checkpoint_ignores_partial_files(tmp_path):
    assert find_latest_checkpoint(str(tmp_path)) is None
    torch.save({}, tmp_path / 'iter_7.pth')
    torch.save({}, tmp_path / 'iter_12.pth')  # the largest N, as mmdet 2.x
    (tmp_path / '.tmp_k2j_83.pth').write_bytes(b'half a checkpoint')
    os.symlink('iter_16.pth', tmp_path / 'latest.pth')  # dangling (rotated away)
    with pytest.warns(UserWarning, match=r'ignoring 1 temporary file.*\.tmp_k2j_83\.pth'):
        assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / 'iter_12.pth')
    os.remove(tmp_path / 'latest.pth')
    os.symlink('iter_7.pth', tmp_path / 'latest.pth')
    with pytest.warns(UserWarning):
        assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / 'latest.pth')


def test_sigterm_in_a_validation_phase_keeps_the_open_accumulation_window(tmp_path):
    """workflow [('train', 2), ('val', 1)], cumulative_iters=3: stopped in the val phase after
    iteration 2, the checkpoint carries the window's gradients and the resume is exact."""
    from ckptzoo.runner import GradientCumulativeOptimizerHook

    class TermInVal(Hook):
        def after_val_iter(self, runner):
            if runner.iter == 2:
                os.kill(os.getpid(), signal.SIGTERM)

    def run(work, resume=None, fault=False):
        runner, data = _runner(work, GradientCumulativeOptimizerHook(cumulative_iters=3),
                               ToyDataset(6), max_iters=6, ckpt=False)
        if fault:
            runner.register_hook(TermInVal())
        if resume:
            runner.resume(resume)
        runner.run([data, DataLoader(ToyDataset(2), batch_size=1)],
                   [('train', 2), ('val', 1)])
        return runner

    reference = run(tmp_path / 'ref').model.state_dict()
    with pytest.raises(TrainingPreempted) as err:
        run(tmp_path / 'a', fault=True)
    assert err.value.code == 143
    ckpt = load_file(err.value.checkpoint)
    assert ckpt['meta']['iter'] == 2 and 'accumulated_grads' in ckpt
    resumed = run(tmp_path / 'b', resume=err.value.checkpoint).model.state_dict()
    assert all(torch.equal(resumed[k], v) for k, v in reference.items())
