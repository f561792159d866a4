"""EMA hooks: the average of the weights after each optimizer step, resumed bit-identically."""
import math
import os
import subprocess
import sys

import pytest
import torch

from ckptzoo.registry import build_hook
from ckptzoo.runner import (CheckpointHook, EMAHook, EpochBasedRunner, EvalHook,
                            ExpMomentumEMAHook, GradientCumulativeFp16OptimizerHook,
                            GradientCumulativeOptimizerHook, IterBasedRunner)

from tests.helpers.ema import ema_checkpoint_hook, run_ema
from tests.helpers.toy import ToyDataset, loader

NAMES = ('fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias')


def _reference_ema(recorder, momentum_fun, interval=1, mmcv=False):
    ema = {n: v.clone() for n, v in recorder.initial.items()}
    for step, weights in enumerate(recorder.steps):
        if (step % interval == 0) if mmcv else ((step + 1) % interval == 0):
            m = momentum_fun(step)
            for n in ema:
                ema[n].mul_(1 - m).add_(weights[n], alpha=m)
    return ema


def _ema_of(model, hook):
    """The average, wherever it is (in the model after an epoch's swap, else in the buffers)."""
    if hook.swapped:
        return {n: p.detach() for n, p in model.named_parameters()}
    return {n: getattr(model, 'ema_' + n.replace('.', '_')) for n in NAMES}


def _exp(momentum, total_iter):
    return lambda x: (1 - momentum) * math.exp(-(1 + x) / total_iter) + momentum


@pytest.mark.parametrize('cumulative', [1, 3])
def test_exp_momentum_matches_reference_once_per_step(cumulative):
    opt = GradientCumulativeOptimizerHook(cumulative_iters=cumulative)
    hook = ExpMomentumEMAHook(momentum=0.1, total_iter=5)
    model, runner, rec = run_ema(IterBasedRunner, opt, hook, max_iters=8)
    assert len(rec.steps) == hook.steps == (8 if cumulative == 1 else 3)
    ref = _reference_ema(rec, _exp(0.1, 5))
    got = _ema_of(model, hook)
    for n in NAMES:
        torch.testing.assert_close(got[n], ref[n], rtol=0, atol=1e-7)
    assert not torch.allclose(ref['fc1.weight'], rec.steps[-1]['fc1.weight'], atol=1e-3)


def test_mmcv_ema_hook_interval_and_warm_up():
    hook = EMAHook(momentum=0.5, interval=2, warm_up=3)
    model, _, rec = run_ema(IterBasedRunner, GradientCumulativeOptimizerHook(), hook, max_iters=7)
    ref = _reference_ema(rec, lambda x: min(0.5 ** 2, (1 + x) / (3 + x)), interval=2,
                         mmcv=True)
    for n in NAMES:
        torch.testing.assert_close(_ema_of(model, hook)[n], ref[n], rtol=0, atol=1e-7)


def test_momentum_one_is_the_model():
    hook = build_hook(dict(type='ExpMomentumEMAHook', momentum=1.0, total_iter=3))
    model, _, rec = run_ema(EpochBasedRunner, GradientCumulativeOptimizerHook(cumulative_iters=2),
                         hook, max_epochs=2)
    assert hook.swapped  # the model holds the average at the end of the epoch
    for n, p in model.named_parameters():
        assert torch.equal(p, rec.steps[-1][n])
        assert torch.equal(getattr(model, 'ema_' + n.replace('.', '_')), rec.steps[-1][n])


class _InfAt(GradientCumulativeFp16OptimizerHook):
    def _step(self, runner):
        if runner.iter in (1, 5):
            runner.model.fc1.weight.grad[0, 0] = float('inf')
        super()._step(runner)


def test_skipped_fp16_steps_do_not_update():
    hook = ExpMomentumEMAHook(momentum=0.2, total_iter=4)
    model, _, rec = run_ema(IterBasedRunner, _InfAt(cumulative_iters=2, loss_scale='dynamic'),
                         hook, max_iters=8)
    assert len(rec.steps) == hook.steps == 2  # 4 windows, 2 overflowed
    ref = _reference_ema(rec, _exp(0.2, 4))
    for n in NAMES:
        torch.testing.assert_close(_ema_of(model, hook)[n], ref[n], rtol=0, atol=1e-7)


def test_evaluation_uses_the_ema_weights():
    seen = []

    def test_fn(model, data_loader):
        seen.append({n: p.detach().clone() for n, p in model.named_parameters()})
        return [0.0] * len(data_loader.dataset)

    class Data(ToyDataset):
        def evaluate(self, results, logger=None, **kwargs):
            return dict(mse=0.0)

    for by_epoch, runner_kwargs in ((True, dict(max_epochs=1)), (False, dict(max_iters=8))):
        seen.clear()
        hook = ExpMomentumEMAHook(momentum=0.3, total_iter=4)
        runner_cls = EpochBasedRunner if by_epoch else IterBasedRunner
        evaluation = EvalHook(loader(Data(4), 2), interval=1 if by_epoch else 8,
                              by_epoch=by_epoch, test_fn=test_fn)
        model, _, rec = run_ema(runner_cls, GradientCumulativeOptimizerHook(), hook,
                             extra=[(evaluation, 'LOW')], **runner_kwargs)
        ref = _reference_ema(rec, _exp(0.3, 4))
        assert len(seen) == 1
        for n in NAMES:
            torch.testing.assert_close(seen[0][n], ref[n], rtol=0, atol=1e-7)
            assert not torch.allclose(seen[0][n], rec.steps[-1][n], atol=1e-4)


def test_resume_at_every_iteration_is_bit_identical(tmp_path):
    """Epoch runner (swaps at the epoch ends), accumulation windows across the epoch end,
    fp16 loss scaling; resumed from the checkpoint of every iteration and of every epoch (the
    epoch checkpoints hold the swapped weights)."""
    data = ToyDataset(5)

    def opt():
        return GradientCumulativeFp16OptimizerHook(cumulative_iters=3, loss_scale='dynamic')

    def ema():
        return ExpMomentumEMAHook(momentum=0.05, total_iter=6)

    full_dir = tmp_path / 'full'
    model, runner, _ = run_ema(EpochBasedRunner, opt(), ema(), data, str(full_dir),
                            extra=[(ema_checkpoint_hook(), 'NORMAL'),
                                   (CheckpointHook(interval=1, max_keep_ckpts=-1), 'NORMAL')],
                            max_epochs=3)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    names = [f'iter_{it}.pth' for it in range(1, 15)] + ['epoch_1.pth', 'epoch_2.pth']
    for name in names:
        model, runner, _ = run_ema(EpochBasedRunner, opt(), ema(), data,
                                str(tmp_path / f'resumed_{name}'),
                                resume=str(full_dir / name), max_epochs=3)
        for key, value in expected.items():
            assert torch.equal(model.state_dict()[key], value), (name, key)


_FRESH = """
import sys, torch
sys.path.insert(0, {root!r})
from tests.helpers.ema import run_ema, ema_checkpoint_hook
from tests.helpers.toy import ToyDataset
from ckptzoo.runner import GradientCumulativeOptimizerHook, IterBasedRunner, ExpMomentumEMAHook
model, runner, _ = run_ema(IterBasedRunner, GradientCumulativeOptimizerHook(cumulative_iters=3),
                        ExpMomentumEMAHook(momentum=0.05, total_iter=6), ToyDataset(5),
                        {work_dir!r}, resume={resume!r}, max_iters=10)
torch.save(model.state_dict(), {out!r})
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_resume_in_a_fresh_process(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    model, _, _ = run_ema(IterBasedRunner, GradientCumulativeOptimizerHook(cumulative_iters=3),
                       ExpMomentumEMAHook(momentum=0.05, total_iter=6), ToyDataset(5),
                       str(tmp_path / 'full'), extra=[(ema_checkpoint_hook(), 'NORMAL')], max_iters=10)
    out = str(tmp_path / 'resumed.pth')
    code = _FRESH.format(root=root, work_dir=str(tmp_path / 'resumed'), out=out,
                         resume=str(tmp_path / 'full' / 'iter_4.pth'))
    subprocess.run([sys.executable, '-c', code], check=True, cwd=root)
    resumed = torch.load(out, weights_only=True)
    assert any(k.startswith('ema_') for k in resumed)
    for key, value in model.state_dict().items():
        assert torch.equal(resumed[key], value), key


@pytest.mark.parametrize('kwargs', [dict(momentum=0), dict(momentum=1.5), dict(interval=0),
                                    dict(total_iter=0)])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ExpMomentumEMAHook(**kwargs)
