"""A run survives faults (tools/train.py in processes that a signal stops or kills).

Each chain interrupts one run at four points in turn (mid-epoch at an optimizer step, inside an
accumulation window, during evaluation, during a checkpoint save), continues it every time with
``--auto-resume`` and compares the final state with an uninterrupted run: every tensor equal.
FP16 with a dynamic loss scale and ``cumulative_iters=3`` throughout.
"""
import glob
import math
import os
import os.path as osp
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from ckptzoo.runner.preemption import PreemptionFlag

from tests.helpers.faults import ROOT, start_train, wait

pytestmark = pytest.mark.subprocess

BASE_CFG = """
custom_imports = dict(imports=['tests.helpers.toy', 'tests.helpers.faults'],
                      allow_failed_imports=False)
model = dict(type='ToyRegressor')
data = dict(samples_per_gpu=1, workers_per_gpu={workers},
            train=dict(type='ToyDataset', num_samples={num_samples}),
            val=dict(type='ToyEvalDataset', num_samples=3, seed=1))
optimizer = dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-3)
optimizer_config = dict(cumulative_iters=3, grad_clip=dict(max_norm=1.0))
fp16 = dict(loss_scale=dict(init_scale=256., growth_interval=2))
lr_config = dict(policy='step', by_epoch=False, step=[7], warmup='linear', warmup_iters=2,
                 warmup_ratio=0.5)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
custom_hooks = [dict(type='FaultHook')]
workflow = [('train', 1)]
seed = 0
"""

RUNNERS = {
    # 5 iterations an epoch; epoch checkpoints at 5, 10, 15, 20; evaluation after each epoch
    'epoch': dict(
        cfg="runner = dict(type='EpochBasedRunner', max_epochs=4)\n"
            "checkpoint_config = dict(interval=1, max_keep_ckpts=2)\n"
            "evaluation = dict(interval=1)\n",
        iters=20,
        term=[('iter', 3), ('iter', 8), ('eval', 10), ('save', 15)],
        kill=[('iter', 6, 5), ('iter', 8, 5), ('eval', 10, 10), ('save', 15, 10)]),
    # checkpoints at 4, 8, 12, 14; evaluation at 5, 10
    'iter': dict(
        cfg="runner = dict(type='IterBasedRunner', max_iters=14)\n"
            "checkpoint_config = dict(interval=4, by_epoch=False, max_keep_ckpts=2)\n"
            "evaluation = dict(interval=5)\n",
        iters=14,
        term=[('iter', 3), ('iter', 7), ('eval', 10), ('save', 12)],
        kill=[('iter', 6, 4), ('iter', 7, 4), ('eval', 10, 8), ('save', 12, 8)]),
}
K = 3  # cumulative_iters


def _config(tmp_path, runner, num_samples=5, workers=0):
    path = tmp_path / f'{runner}_cfg.py'
    path.write_text(BASE_CFG.format(num_samples=num_samples, workers=workers)
                    + RUNNERS[runner]['cfg'])
    return str(path)


def _train(cfg, work_dir, log, *extra, timeout=120, **env):
    proc = start_train([cfg, '--work-dir', str(work_dir)] + list(extra), log,
                       CKPTZOO_FAULT=env.pop('fault', ''), **env)
    code, = wait([proc], timeout)
    return code, open(log).read()


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def _assert_identical(result, reference):
    assert result['meta']['iter'] == reference['meta']['iter']
    assert result['meta']['fp16']['loss_scaler'] == reference['meta']['fp16']['loss_scaler']
    assert result['state_dict'].keys() == reference['state_dict'].keys()
    for key, value in reference['state_dict'].items():
        assert torch.equal(result['state_dict'][key], value), key
    for i, state in reference['optimizer']['state'].items():
        for name, value in state.items():
            assert torch.equal(result['optimizer']['state'][i][name], value), (i, name)


@pytest.fixture(scope='module')
def references(tmp_path_factory):
    """The uninterrupted run of each runner (computed once, on first use)."""
    cache = {}

    def get(runner):
        if runner not in cache:
            tmp = tmp_path_factory.mktemp(f'reference_{runner}')
            if runner == 'ddp':  # 2 ranks, 4 iterations an epoch each
                codes, logs = _train_2_ranks(_config(tmp, 'epoch', 8), tmp / 'work', tmp, 'r')
                assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
            else:
                code, log = _train(_config(tmp, runner), tmp / 'work', tmp / 'log.txt')
                assert code == 0, log[-3000:]
            cache[runner] = _load(tmp / 'work' / 'latest.pth')
            assert cache[runner]['meta']['iter'] == RUNNERS.get(runner, {}).get('iters', 16)
        return cache[runner]

    return get


@pytest.mark.parametrize('runner', ['epoch', 'iter'])
def test_sigterm_saves_exact_position_and_resumes_bit_identical(tmp_path, runner, references):
    cfg, work = _config(tmp_path, runner), tmp_path / 'work'
    for n, (point, at) in enumerate(RUNNERS[runner]['term']):
        code, log = _train(cfg, work, tmp_path / f'log{n}.txt', '--auto-resume',
                           fault=f'TERM:{point}:{at}')
        assert code == 128 + signal.SIGTERM, log[-3000:]
        assert f'training preempted by SIGTERM: saved {work}/preempted_iter_{at}.pth' in log
        if n:
            assert 'resumed' in log and f'iter {RUNNERS[runner]["term"][n - 1][1]}' in log
        ckpt = _load(work / f'preempted_iter_{at}.pth')
        assert osp.realpath(work / 'latest.pth') == str(work / f'preempted_iter_{at}.pth')
        assert ckpt['meta']['iter'] == at  # exactly the iterations trained
        assert ('accumulated_grads' in ckpt) == bool(at % K)  # inside a window: kept
        assert len(glob.glob(str(work / 'preempted_iter_*.pth'))) == 1
        if runner == 'epoch':
            assert ckpt['meta']['inner_iter'] == at % 5
    code, log = _train(cfg, work, tmp_path / 'final.txt', '--auto-resume')
    assert code == 0, log[-3000:]
    _assert_identical(_load(work / 'latest.pth'), references(runner))


def test_sigterm_to_the_process_group_spares_dataloader_workers(tmp_path, references):
    """torchrun and Ctrl-C signal the process group: the DataLoader workers get it too."""
    cfg, work = _config(tmp_path, 'epoch', workers=2), tmp_path / 'work'
    code, log = _train(cfg, work, tmp_path / 'log.txt', fault='TERMPG:iter:3')
    assert code == 143, log[-3000:]
    assert _load(work / 'preempted_iter_3.pth')['meta']['iter'] == 3
    code, log = _train(cfg, work, tmp_path / 'final.txt', '--auto-resume')
    assert code == 0, log[-3000:]
    _assert_identical(_load(work / 'latest.pth'), references('epoch'))


@pytest.mark.parametrize('runner', ['epoch', 'iter'])
def test_kill9_resumes_from_newest_complete_checkpoint_bit_identical(tmp_path, runner,
                                                                    references):
    cfg, work = _config(tmp_path, runner), tmp_path / 'work'
    resumed_at = None
    for n, (point, at, newest) in enumerate(RUNNERS[runner]['kill']):
        code, log = _train(cfg, work, tmp_path / f'log{n}.txt', '--auto-resume',
                           fault=f'KILL:{point}:{at}')
        assert code == -signal.SIGKILL, log[-3000:]
        if resumed_at is not None:
            assert f'iter {resumed_at}\n' in log
        assert _load(work / 'latest.pth')['meta']['iter'] == newest
        resumed_at = newest
    partial = glob.glob(str(work / '.tmp_*.pth'))  # the save killed halfway
    assert len(partial) == 1 and os.path.getsize(partial[0]) > 0
    with pytest.raises(Exception):
        _load(partial[0])
    code, log = _train(cfg, work, tmp_path / 'final.txt', '--auto-resume')
    assert code == 0, log[-3000:]
    assert f'iter {resumed_at}\n' in log and 'ignoring 1 temporary file' in log
    _assert_identical(_load(work / 'latest.pth'), references(runner))


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _train_2_ranks(cfg, work, tmp_path, name, fault='', timeout=120):
    port = str(_free_port())
    procs = [start_train([cfg, '--work-dir', str(work), '--launcher', 'pytorch',
                          '--auto-resume'], tmp_path / f'{name}_rank{rank}.txt',
                         RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2',
                         MASTER_ADDR='127.0.0.1', MASTER_PORT=port, CKPTZOO_FAULT=fault)
             for rank in range(2)]
    codes = wait(procs, timeout)
    logs = [open(tmp_path / f'{name}_rank{rank}.txt').read() for rank in range(2)]
    return codes, logs


def test_sigterm_to_one_rank_of_two_stops_both_consistently(tmp_path, references):
    """2 gloo ranks: SIGTERM to rank 0, then (resumed) to rank 1; no rank hangs (timeout)."""
    cfg = _config(tmp_path, 'epoch', num_samples=8)  # 4 iterations an epoch per rank
    reference = references('ddp')
    work = tmp_path / 'work'
    for n, (rank, at) in enumerate([(0, 5), (1, 10)]):
        codes, logs = _train_2_ranks(cfg, work, tmp_path, f'run{n}', f'TERM:iter:{at}:{rank}')
        assert codes == [143, 143], logs[0][-3000:] + logs[1][-3000:]
        ckpt = _load(work / f'preempted_iter_{at}.pth')
        assert ckpt['meta']['iter'] == at and ckpt['meta']['inner_iter'] == at % 4
        grads = ckpt['accumulated_grads_per_rank']  # both windows are open: 5 % 3, 10 % 3
        assert len(grads) == 2 and not torch.equal(grads[0]['fc1.weight'],
                                                   grads[1]['fc1.weight'])  # each rank's own
        assert 'training preempted by SIGTERM' in logs[0]
    codes, logs = _train_2_ranks(cfg, work, tmp_path, 'final')
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    _assert_identical(_load(work / 'latest.pth'), reference)


def test_lr_1e12_stops_at_the_first_nonfinite_iteration(tmp_path):
    """The smoke config (fp16 + accumulation) with lr=1e12: FloatingPointError, no checkpoint
    of that iteration, and the newest checkpoint with finite weights is kept and loads."""
    work = tmp_path / 'work'
    code, log = _train(osp.join(ROOT, 'configs', 'smoke', 'classifier_synthetic.py'), work,
                       tmp_path / 'log.txt', '--cfg-options', 'optimizer.lr=1e12',
                       'log_config.interval=1', 'checkpoint_config.by_epoch=False',
                       'data.train.num_samples=24', 'runner.max_epochs=1')
    assert code == 1, log[-3000:]
    assert 'FloatingPointError: the loss is not finite (loss=nan) at iteration 3 ' in log
    assert f'the last checkpoint with finite weights is {work}/iter_2.pth' in log
    logged = re.findall(r'Epoch \[1\]\[(\d+)/6\].* loss: (\S+),', log)
    assert [int(i) for i, _ in logged] == [1, 2]  # iterations 1 and 2 trained, 3 stopped
    assert all(math.isfinite(float(loss)) for _, loss in logged)
    assert sorted(p.name for p in work.glob('*.pth')) == ['iter_1.pth', 'iter_2.pth',
                                                          'latest.pth']
    ckpt = _load(work / 'iter_2.pth')
    assert ckpt['meta']['finite_weights'] and ckpt['meta']['iter'] == 2
    assert all(torch.isfinite(v).all() for v in ckpt['state_dict'].values()
               if v.is_floating_point())


def _torchrun_2_workers(cfg, work, **env):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS='1', **env)
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', str(_free_port()), osp.join(ROOT, 'tools', 'train.py'), cfg,
         '--work-dir', str(work), '--launcher', 'pytorch'], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    codes = re.findall(r'rank\s*: (\d) \(local_rank: \d\)\n\s*exitcode\s*: (-?\d+)', out)
    return proc.returncode, sorted(codes), out


@pytest.mark.slow
def test_torchrun_sigterm_to_rank_1_stops_both_ranks(tmp_path, references):
    """Under torchrun itself: both workers stop at the same iteration (no hang) and both exit
    143 (not -6: 'terminate called without an active exception' from an interpreter teardown
    with gloo's threads alive; not -15: torchrun's SIGTERM to a rank still on its way out),
    rank 0 wrote the checkpoint, and the run continues from it (here with the forked ranks
    above)."""
    cfg = _config(tmp_path, 'epoch', num_samples=8)
    work = tmp_path / 'work'
    code, codes, out = _torchrun_2_workers(cfg, work, CKPTZOO_FAULT='TERM:iter:7:1')
    assert code != 0 and codes == [('0', '143'), ('1', '143')], out[-3000:]
    assert 'training preempted by SIGTERM' in out and 'terminate called' not in out
    ckpt = _load(work / 'preempted_iter_7.pth')
    assert ckpt['meta']['iter'] == 7 and len(ckpt['accumulated_grads_per_rank']) == 2
    codes, logs = _train_2_ranks(cfg, work, tmp_path, 'resumed')
    assert codes == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    assert 'resumed epoch 1, iter 7' in logs[0]
    _assert_identical(_load(work / 'latest.pth'), references('ddp'))


@pytest.mark.slow
def test_torchrun_sigterm_to_a_rank_still_on_its_way_out_changes_nothing(tmp_path):
    """Rank 1 (SIGTERM after iteration 7) takes 3 s more than rank 0 to exit; torchrun sends it
    SIGTERM as soon as rank 0 has exited 143. Past the agreed stop that signal is ignored: rank
    1 exits 143 too (it was killed, -15, before) with the checkpoint complete."""
    cfg = _config(tmp_path, 'epoch', num_samples=8)
    work = tmp_path / 'work'
    code, codes, out = _torchrun_2_workers(cfg, work, CKPTZOO_FAULT='TERM:iter:7:1',
                                           CKPTZOO_SLOW_EXIT='3')
    assert 'Sending process' in out and 'closing signal SIGTERM' in out, out[-3000:]
    assert code != 0 and codes == [('0', '143'), ('1', '143')], out[-3000:]
    assert 'terminate called' not in out and 'stopping now' not in out
    ckpt = _load(work / 'preempted_iter_7.pth')
    assert ckpt['meta']['iter'] == 7 and len(ckpt['accumulated_grads_per_rank']) == 2


def _poll_log(log, text, proc, timeout=120):
    """Wait until ``text`` is in the log (the run reached that point); fail on a hang."""
    for _ in range(int(timeout / 0.05)):
        if osp.exists(log) and text in open(log).read():
            return
        if not proc.is_alive():
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f'{text!r} never appeared in the log:\n' + open(log).read()[-3000:])


@pytest.mark.parametrize('how', ['second', 'grace', 'wedge'])
def test_sigterm_while_stuck_in_evaluation_stops_with_the_last_checkpoint(tmp_path, how,
                                                                         references):
    """The evaluation after iteration 10 never returns (a join that hangs). A second SIGTERM,
    or the grace period (1 s here), stops the run at once with exit status 143; the last
    complete checkpoint (epoch_2.pth, saved before the evaluation) is intact and the run
    continues from it. ``wedge`` also swallows the exception: the process exits 5 s later."""
    cfg, work, log = _config(tmp_path, 'epoch'), tmp_path / 'work', tmp_path / 'log.txt'
    fault = 'WEDGE:eval:10' if how == 'wedge' else 'HANG:eval:10'
    grace = 'inf' if how == 'second' else '1'  # 'second': only the second signal can stop it
    proc = start_train([cfg, '--work-dir', str(work)], log, CKPTZOO_FAULT=fault,
                       CKPTZOO_PREEMPTION_GRACE=grace)
    _poll_log(log, 'stuck in the evaluation after iteration 10', proc)
    os.kill(proc.pid, signal.SIGTERM)
    if how == 'second':
        _poll_log(log, 'SIGTERM received', proc)
        time.sleep(PreemptionFlag.repeat_s + 0.2)  # not the same signal delivered twice
        os.kill(proc.pid, signal.SIGTERM)
    code, = wait([proc], timeout=60)
    out = open(log).read()
    assert code == 143, out[-3000:]
    reason = ('second SIGTERM' if how == 'second' else 'SIGTERM not honoured within 1 s')
    assert f'{reason}: stopping now; the last complete checkpoint is {work}/epoch_2.pth' in out
    if how == 'wedge':
        assert 'the run did not end within 5 s of stopping: exiting with status 143' in out
    else:
        assert (f'training preempted by SIGTERM ({reason}): stopped at once, nothing new '
                f'saved; the last complete checkpoint is {work}/epoch_2.pth') in out
    assert osp.realpath(work / 'latest.pth') == str(work / 'epoch_2.pth')
    assert _load(work / 'epoch_2.pth')['meta']['iter'] == 10
    assert not glob.glob(str(work / '.tmp_*')) and not glob.glob(str(work / 'preempted_*'))
    if how == 'second':  # nothing lost: the continued run ends as the uninterrupted one
        code, out = _train(cfg, work, tmp_path / 'final.txt', '--auto-resume')
        assert code == 0 and 'resumed epoch 2, iter 10' in out, out[-3000:]
        _assert_identical(_load(work / 'latest.pth'), references('epoch'))


def _files(work):
    return {p.name: p.stat().st_mtime_ns for p in work.iterdir()}


def test_a_second_run_in_the_same_work_dir_is_refused(tmp_path, references):
    """Run A is stuck in its evaluation after epoch 2; run B (another seed) in A's work dir
    stops before writing anything and names A; A's checkpoints are untouched. A stopped, the
    lock is gone and ``--auto-resume`` continues A's run to the uninterrupted result."""
    cfg, work = _config(tmp_path, 'epoch'), tmp_path / 'work'
    log_a = tmp_path / 'a.txt'
    run_a = start_train([cfg, '--work-dir', str(work)], log_a, CKPTZOO_FAULT='HANG:eval:10',
                        CKPTZOO_PREEMPTION_GRACE='inf')
    try:
        _poll_log(log_a, 'stuck in the evaluation after iteration 10', run_a)
        before = _files(work)
        code, log_b = _train(cfg, work, tmp_path / 'b.txt', '--seed', '5')
        assert code == 1, log_b[-3000:]
        assert (f'error: work dir {work} is in use by another training run (pid {run_a.pid} '
                f'on host ') in log_b
        assert f'delete {work}/.ckptzoo.lock and start again' in log_b
        assert _files(work) == before and '.ckptzoo.lock' in before  # nothing written
        os.kill(run_a.pid, signal.SIGTERM)
        _poll_log(log_a, 'SIGTERM received', run_a)
        time.sleep(PreemptionFlag.repeat_s + 0.2)
        os.kill(run_a.pid, signal.SIGTERM)
        assert wait([run_a], 60) == [143]
    finally:
        if run_a.is_alive():
            run_a.kill()
    assert not (work / '.ckptzoo.lock').exists()  # released on the way out
    code, log = _train(cfg, work, tmp_path / 'c.txt', '--auto-resume')
    assert code == 0 and 'resumed epoch 2, iter 10' in log, log[-3000:]
    assert 'took over' not in log and not (work / '.ckptzoo.lock').exists()
    _assert_identical(_load(work / 'latest.pth'), references('epoch'))


def test_the_work_dir_lock_is_released_after_a_preemption_and_an_error(tmp_path):
    cfg, work = _config(tmp_path, 'iter'), tmp_path / 'work'
    code, log = _train(cfg, work, tmp_path / 'a.txt', fault='TERM:iter:3')
    assert code == 143 and not (work / '.ckptzoo.lock').exists(), log[-3000:]
    code, log = _train(cfg, work, tmp_path / 'b.txt', '--resume-from', str(work / 'nope.pth'))
    assert code == 1 and 'nope.pth' in log and not (work / '.ckptzoo.lock').exists()
    code, log = _train(cfg, work, tmp_path / 'c.txt', '--auto-resume')
    assert code == 0 and 'resumed epoch 0, iter 3' in log, log[-3000:]
    assert 'took over' not in log and not (work / '.ckptzoo.lock').exists()


def test_a_stop_at_once_ends_the_process_within_5_s_whatever_its_exit_path_waits_for(
        tmp_path):
    """Stopped after the grace period (1 s) while stuck in the evaluation, with 2 loader
    workers and a non-daemon thread that the interpreter would wait 60 s for at exit: the
    process exits 143 within the documented 5 s of the stop."""
    cfg, work, log = _config(tmp_path, 'epoch', workers=2), tmp_path / 'work', tmp_path / 'l.txt'
    proc = start_train([cfg, '--work-dir', str(work)], log, CKPTZOO_FAULT='HANG:eval:10',
                       CKPTZOO_PREEMPTION_GRACE='1', CKPTZOO_LINGER='60')
    _poll_log(log, 'stuck in the evaluation after iteration 10', proc)
    os.kill(proc.pid, signal.SIGTERM)
    _poll_log(log, 'SIGTERM not honoured within 1 s: stopping now', proc)
    stopped = time.monotonic()
    code, = wait([proc], timeout=60)
    took = time.monotonic() - stopped
    out = open(log).read()
    assert code == 143 and took < 5 + 1.5, (took, out[-3000:])
    assert 'the run did not end within 5 s of stopping: exiting with status 143' in out
    assert _load(work / 'epoch_2.pth')['meta']['iter'] == 10
