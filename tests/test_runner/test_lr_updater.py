import math
import re

import pytest
import torch

from ckptzoo.registry import HOOKS
from ckptzoo.runner.hooks import (CosineAnnealingLrUpdaterHook, CosineRestartLrUpdaterHook,
                                  CyclicLrUpdaterHook, ExpLrUpdaterHook, FixedLrUpdaterHook,
                                  FlatCosineAnnealingLrUpdaterHook, Hook, InvLrUpdaterHook,
                                  LinearAnnealingLrUpdaterHook, OneCycleLrUpdaterHook,
                                  PolyLrUpdaterHook, StepLrUpdaterHook, build_lr_hook)
from tests.helpers.hook_fakes import CumulativeStub, FakeRunner
from tests.helpers.schedules import cyclic_reference


class LrRecorder(Hook):
    """Runs after the lr hook and records the lr each iteration trains with."""

    def __init__(self):
        self.lrs = []

    def before_train_iter(self, runner):
        self.lrs.append(runner.current_lr())


def _runner(tmp_path, lrs=(0.1,), cumulative_iters=None, optimizer=None):
    model = torch.nn.Linear(2, 2)
    if optimizer is None:
        groups = [dict(params=[p], lr=lr) for p, lr in zip(model.parameters(), lrs)]
        optimizer = torch.optim.SGD(groups, lr=lrs[0])
    runner = FakeRunner(tmp_path, model=model, optimizer=optimizer)
    if cumulative_iters is not None:
        runner.register_hook(CumulativeStub(cumulative_iters), 'ABOVE_NORMAL')
    return runner


def _run(runner, hook, epochs=None, epoch_len=None, iters=None):
    recorder = LrRecorder()
    runner.register_hook(hook, 'VERY_HIGH')
    runner.register_hook(recorder, 'LOWEST')
    if iters is not None:
        runner.run_iters(list(range(epoch_len or iters)), iters)
    else:
        runner.run_epochs(list(range(epoch_len)), epochs)
    return recorder.lrs


def _first(lrs):
    return [lr[0] for lr in lrs]


def test_step_by_epoch_list(tmp_path):
    lrs = _run(_runner(tmp_path, lrs=(0.1, 0.2)), StepLrUpdaterHook(step=[2, 4], gamma=0.1),
               epochs=5, epoch_len=3)
    per_epoch = [lrs[3 * e] for e in range(5)]
    expected = [[0.1, 0.2], [0.1, 0.2], [0.01, 0.02], [0.01, 0.02], [0.001, 0.002]]
    for got, want in zip(per_epoch, expected):
        assert got == pytest.approx(want, rel=1e-12)
    # constant within an epoch
    assert all(lrs[3 * e + i] == lrs[3 * e] for e in range(5) for i in range(3))


def test_step_int_with_min_lr(tmp_path):
    lrs = _run(_runner(tmp_path), StepLrUpdaterHook(step=2, gamma=0.1, min_lr=0.005),
               epochs=5, epoch_len=1)
    assert _first(lrs) == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.005], rel=1e-12)


def test_step_by_iter(tmp_path):
    lrs = _run(_runner(tmp_path), StepLrUpdaterHook(by_epoch=False, step=[3, 5], gamma=0.5),
               iters=7)
    assert _first(lrs) == pytest.approx([0.1] * 3 + [0.05] * 2 + [0.025] * 2, rel=1e-12)


def test_cosine_by_iter(tmp_path):
    lrs = _first(_run(_runner(tmp_path), CosineAnnealingLrUpdaterHook(by_epoch=False,
                                                                      min_lr=0.01), iters=10))
    # 0.01 + 0.5 * 0.09 * (1 + cos(pi * i / 10)), by hand
    assert lrs[0] == pytest.approx(0.1, rel=1e-12)
    assert lrs[2] == pytest.approx(0.0914058, rel=1e-6)
    assert lrs[5] == pytest.approx(0.055, rel=1e-12)
    assert lrs[9] == pytest.approx(0.01220246, rel=1e-6)


def test_cosine_by_epoch_min_lr_ratio(tmp_path):
    lrs = _first(_run(_runner(tmp_path), CosineAnnealingLrUpdaterHook(min_lr_ratio=0.1),
                      epochs=4, epoch_len=2))
    # target 0.01; factor e / 4: e=1 -> 0.01 + 0.045 * (1 + cos(pi/4)) = 0.0868198
    assert lrs[::2] == pytest.approx([0.1, 0.0868198, 0.055, 0.0231802], rel=1e-6)


def test_poly_by_iter(tmp_path):
    lrs = _first(_run(_runner(tmp_path), PolyLrUpdaterHook(by_epoch=False, power=2.,
                                                           min_lr=0.001), iters=10))
    # 0.099 * (1 - i / 10) ** 2 + 0.001
    assert lrs[0] == pytest.approx(0.1, rel=1e-12)
    assert lrs[5] == pytest.approx(0.02575, rel=1e-12)
    assert lrs[9] == pytest.approx(0.00199, rel=1e-12)


@pytest.mark.parametrize('warmup,expected', [
    ('linear', [0.025, 0.04375, 0.0625, 0.08125, 0.1, 0.1]),
    ('constant', [0.025, 0.025, 0.025, 0.025, 0.1, 0.1]),
    ('exp', [0.025, 0.035355339, 0.05, 0.070710678, 0.1, 0.1]),
])
def test_warmup_by_iter(tmp_path, warmup, expected):
    hook = FixedLrUpdaterHook(by_epoch=False, warmup=warmup, warmup_iters=4, warmup_ratio=0.25)
    lrs = _first(_run(_runner(tmp_path), hook, iters=6))
    assert lrs == pytest.approx(expected, rel=1e-8)


def test_warmup_in_epoch_schedule(tmp_path):
    # step by epoch; linear warmup over the first 3 iterations (epoch length 2)
    hook = StepLrUpdaterHook(step=[2], warmup='linear', warmup_iters=3, warmup_ratio=0.1)
    lrs = _first(_run(_runner(tmp_path), hook, epochs=3, epoch_len=2))
    # 0.1 * (1 - (1 - i / 3) * 0.9) for i < 3
    assert lrs == pytest.approx([0.01, 0.04, 0.07, 0.1, 0.01, 0.01], rel=1e-9)


def test_warmup_by_epoch(tmp_path):
    hook = FixedLrUpdaterHook(warmup='linear', warmup_iters=1, warmup_by_epoch=True,
                              warmup_ratio=0.5)
    lrs = _first(_run(_runner(tmp_path), hook, epochs=2, epoch_len=4))
    assert hook.warmup_iters == 4
    assert lrs == pytest.approx([0.05, 0.0625, 0.075, 0.0875] + [0.1] * 4, rel=1e-12)


def test_accumulation_counts_updates(tmp_path):
    # k = 3, 10 iterations -> updates 0,0,0,1,1,1,2,2,2,3; warmup over 2 updates, then
    # step after 3 updates
    hook = StepLrUpdaterHook(by_epoch=False, step=[3], warmup='linear', warmup_iters=2,
                             warmup_ratio=0.5)
    lrs = _first(_run(_runner(tmp_path, cumulative_iters=3), hook, iters=10))
    assert lrs == pytest.approx([0.05] * 3 + [0.075] * 3 + [0.1] * 3 + [0.01], rel=1e-12)


def test_accumulation_poly_max_progress(tmp_path):
    # max progress = ceil(10 / 3) = 4 updates
    hook = PolyLrUpdaterHook(by_epoch=False, power=1., min_lr=0.)
    lrs = _first(_run(_runner(tmp_path, cumulative_iters=3), hook, iters=10))
    assert lrs == pytest.approx([0.1] * 3 + [0.075] * 3 + [0.05] * 3 + [0.025], rel=1e-12)


def test_accumulation_warmup_by_epoch(tmp_path):
    # one warmup epoch of 10 iterations = ceil(10 / 3) = 4 updates = iterations 0..11
    hook = FixedLrUpdaterHook(warmup='constant', warmup_iters=1, warmup_by_epoch=True,
                              warmup_ratio=0.5)
    lrs = _first(_run(_runner(tmp_path, cumulative_iters=3), hook, epochs=2, epoch_len=10))
    assert hook.warmup_iters == 4
    assert lrs == pytest.approx([0.05] * 12 + [0.1] * 8, rel=1e-12)


def test_cumulative_iters_one_is_plain(tmp_path):
    hook = StepLrUpdaterHook(by_epoch=False, step=[2])
    lrs = _first(_run(_runner(tmp_path, cumulative_iters=1), hook, iters=4))
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01], rel=1e-12)


def test_dict_of_optimizers(tmp_path):
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    optim = dict(a=torch.optim.SGD(a.parameters(), lr=0.1),
                 b=torch.optim.SGD(b.parameters(), lr=0.2))
    lrs = _run(_runner(tmp_path, optimizer=optim), StepLrUpdaterHook(step=1, gamma=0.5),
               epochs=2, epoch_len=1)
    assert lrs[0] == dict(a=[0.1], b=[0.2])
    assert lrs[1]['a'] == pytest.approx([0.05]) and lrs[1]['b'] == pytest.approx([0.1])


def test_initial_lr_from_resumed_optimizer(tmp_path):
    runner = _runner(tmp_path)
    runner.optimizer.param_groups[0]['initial_lr'] = 0.2  # as a resumed optimizer has it
    lrs = _first(_run(runner, StepLrUpdaterHook(by_epoch=False, step=[1]), iters=2))
    assert lrs == pytest.approx([0.2, 0.02], rel=1e-12)


@pytest.mark.parametrize('policy,name', [
    ('step', 'StepLrUpdaterHook'), ('Step', 'StepLrUpdaterHook'),
    ('CosineAnnealing', 'CosineAnnealingLrUpdaterHook'),
    ('cosineannealing', 'CosineAnnealingLrUpdaterHook'), ('poly', 'PolyLrUpdaterHook'),
    ('fixed', 'FixedLrUpdaterHook'), ('exp', 'ExpLrUpdaterHook'), ('inv', 'InvLrUpdaterHook'),
    ('CosineRestart', 'CosineRestartLrUpdaterHook'), ('cyclic', 'CyclicLrUpdaterHook'),
    ('OneCycle', 'OneCycleLrUpdaterHook'), ('onecycle', 'OneCycleLrUpdaterHook'),
    ('FlatCosineAnnealing', 'FlatCosineAnnealingLrUpdaterHook'),
    ('LinearAnnealing', 'LinearAnnealingLrUpdaterHook')])
def test_build_lr_hook(policy, name):
    extra = dict(StepLrUpdaterHook=dict(step=[8, 11]), ExpLrUpdaterHook=dict(gamma=0.9),
                 InvLrUpdaterHook=dict(gamma=0.1), OneCycleLrUpdaterHook=dict(max_lr=0.1),
                 CosineRestartLrUpdaterHook=dict(periods=[5], min_lr=0.)).get(name, {})
    if 'Annealing' in name:
        extra = dict(min_lr_ratio=0.01)
    cfg = dict(policy=policy, warmup='linear', warmup_iters=500, warmup_ratio=0.001, **extra)
    hook = build_lr_hook(cfg)
    assert type(hook).__name__ == name and type(hook) is HOOKS.get(name)
    assert hook.warmup_iters == 500 and cfg['policy'] == policy  # the config is not changed


def test_build_lr_hook_unknown_policy():
    with pytest.raises(ValueError, match="'stepp'.*Step.*CosineAnnealing"):
        build_lr_hook(dict(policy='stepp', step=[1]))
    assert build_lr_hook(None) is None


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup must be None or one of.*'cosine'"):
        FixedLrUpdaterHook(warmup='cosine', warmup_iters=5)
    with pytest.raises(ValueError, match='warmup_iters must be a positive int'):
        FixedLrUpdaterHook(warmup='linear', warmup_iters=0)
    with pytest.raises(ValueError, match='step must be a positive int'):
        StepLrUpdaterHook(step=[0, 2])
    with pytest.raises(ValueError, match='exactly one of min_lr and min_lr_ratio'):
        CosineAnnealingLrUpdaterHook(min_lr=0., min_lr_ratio=0.1)
    assert math.isclose(StepLrUpdaterHook(step=3).gamma, 0.1)


def test_exp_by_iter_and_inv_by_epoch(tmp_path):
    lrs = _first(_run(_runner(tmp_path), ExpLrUpdaterHook(by_epoch=False, gamma=0.9), iters=5))
    assert lrs == pytest.approx([0.1 * 0.9**i for i in range(5)], rel=1e-12)
    lrs = _first(_run(_runner(tmp_path), InvLrUpdaterHook(gamma=0.5, power=2.), epochs=3,
                      epoch_len=2))
    assert lrs[::2] == pytest.approx([0.1, 0.1 / 1.5**2, 0.1 / 2.0**2], rel=1e-12)


def test_linear_and_flat_cosine_annealing(tmp_path):
    lrs = _first(_run(_runner(tmp_path), LinearAnnealingLrUpdaterHook(
        by_epoch=False, min_lr_ratio=0.5), iters=4))
    assert lrs == pytest.approx([0.1, 0.0875, 0.075, 0.0625], rel=1e-12)
    lrs = _first(_run(_runner(tmp_path), FlatCosineAnnealingLrUpdaterHook(
        by_epoch=False, start_percent=0.5, min_lr=0.), iters=8))
    # flat for round(8 * 0.5) = 4 iterations, then cosine over the remaining 4
    assert lrs == pytest.approx([0.1] * 4 + [0.05 * (1 + math.cos(math.pi * i / 4))
                                            for i in range(4)], rel=1e-12)


def test_cosine_restart(tmp_path):
    hook = CosineRestartLrUpdaterHook(by_epoch=False, periods=[4, 6], restart_weights=[1, 0.5],
                                      min_lr_ratio=0.1)
    lrs = _first(_run(_runner(tmp_path), hook, iters=10))
    # period 1: 0.01 + 0.045 (1 + cos(pi i / 4)); period 2 restarts at 0.5 * 0.1 + 0.5 * 0.01
    expected = [0.01 + 0.045 * (1 + math.cos(math.pi * i / 4)) for i in range(4)]
    expected += [0.01 + 0.5 * 0.5 * 0.09 * (1 + math.cos(math.pi * i / 6)) for i in range(6)]
    assert lrs == pytest.approx(expected, rel=1e-12)
    assert lrs[4] == pytest.approx(0.055, rel=1e-12)
    with pytest.raises(ValueError, match=r'progress 10 is past the end of the periods'):
        _run(_runner(tmp_path), CosineRestartLrUpdaterHook(by_epoch=False, periods=[4, 6],
                                                           restart_weights=[1, 1], min_lr=0.),
             iters=11)


def test_cyclic(tmp_path):
    hook = CyclicLrUpdaterHook(target_ratio=(10, 1e-4), cyclic_times=2, step_ratio_up=0.4,
                               gamma=0.5)
    lrs = _first(_run(_runner(tmp_path), hook, iters=10))
    # 10 iterations, 2 cycles of 5, int(0.4 * 5) = 2 rising
    assert lrs == pytest.approx([cyclic_reference(0.1, i, 5, 2, 1.0, 1e-4, 0.5)
                                 for i in range(10)], rel=1e-12)
    assert lrs[2] == pytest.approx(1.0) and lrs[7] == pytest.approx(0.55)
    linear = _first(_run(_runner(tmp_path), CyclicLrUpdaterHook(
        target_ratio=2., step_ratio_up=0.5, anneal_strategy='linear'), iters=4))
    assert linear == pytest.approx([0.1, 0.15, 0.2, 0.2 + (2e-6 - 0.2) / 2], rel=1e-12)


def _torch_one_cycle(max_lr, total_steps, **kwargs):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD([dict(params=[p]) for p in model.parameters()], lr=1., momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total_steps,
                                                **kwargs)
    lrs = []
    for _ in range(total_steps):
        lrs.append([g['lr'] for g in opt.param_groups])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize('kwargs', [
    dict(), dict(anneal_strategy='linear', pct_start=0.25), dict(three_phase=True),
    dict(div_factor=10., final_div_factor=100., pct_start=0.5)])
def test_one_cycle_equals_torch(tmp_path, kwargs):
    runner = _runner(tmp_path, lrs=(0.3, 0.3))
    lrs = _run(runner, OneCycleLrUpdaterHook(max_lr=[0.5, 0.2], **kwargs), iters=20)
    reference = _torch_one_cycle([0.5, 0.2], 20, cycle_momentum=False, **kwargs)
    assert lrs == [pytest.approx(r, rel=1e-9) for r in reference]


def test_one_cycle_total_steps(tmp_path):
    lrs = _first(_run(_runner(tmp_path), OneCycleLrUpdaterHook(max_lr=0.5, total_steps=30),
                      iters=20))
    assert lrs == pytest.approx(_first(_torch_one_cycle(0.5, 30, cycle_momentum=False)[:20]),
                                rel=1e-9)
    with pytest.raises(ValueError, match=r'total_steps \(5\) must be at least the run.s 20'):
        _run(_runner(tmp_path), OneCycleLrUpdaterHook(max_lr=0.5, total_steps=5), iters=20)


def test_accumulation_cyclic_schedules_count_updates(tmp_path):
    # k = 3 over 20 iterations = 7 updates: the same lrs as 7 plain iterations, each held for
    # the 3 iterations of its update
    for make in (lambda: OneCycleLrUpdaterHook(max_lr=0.5),
                 lambda: CyclicLrUpdaterHook(cyclic_times=2, gamma=0.5),
                 lambda: CosineRestartLrUpdaterHook(by_epoch=False, periods=[3, 4],
                                                    restart_weights=[1, 1], min_lr=0.)):
        plain = _first(_run(_runner(tmp_path), make(), iters=7))
        accum = _first(_run(_runner(tmp_path, cumulative_iters=3), make(), iters=20))
        assert accum == [plain[i // 3] for i in range(20)]


def test_new_policies_bad_arguments():
    with pytest.raises(ValueError, match='only supports by_epoch=False'):
        CyclicLrUpdaterHook(by_epoch=True)
    with pytest.raises(ValueError, match='only supports by_epoch=False'):
        OneCycleLrUpdaterHook(max_lr=0.1, by_epoch=True)
    with pytest.raises(ValueError, match='target_ratio must be a number or a tuple'):
        CyclicLrUpdaterHook(target_ratio=(1, 2, 3))
    with pytest.raises(ValueError, match='anneal_strategy must be one of cos, linear'):
        CyclicLrUpdaterHook(anneal_strategy='cosine')
    with pytest.raises(ValueError, match='pct_start must be a float in'):
        OneCycleLrUpdaterHook(max_lr=0.1, pct_start=1.5)
    with pytest.raises(ValueError, match='restart_weights must be a list as long as periods'):
        CosineRestartLrUpdaterHook(periods=[2, 2], min_lr=0.)
    with pytest.raises(ValueError, match='exactly one of min_lr and min_lr_ratio'):
        CosineRestartLrUpdaterHook(periods=[2])


@pytest.mark.parametrize('step', [[3, 1], [2, 2], [], [1, True]])
def test_step_list_must_increase(step):
    """mmcv asserts positive ints only: [3, 1] passed and decayed twice at once at 3."""
    with pytest.raises(ValueError, match=r'step must be .*strictly increasing positive ints.*'
                       + re.escape(repr(step))):
        StepLrUpdaterHook(step=step)
    with pytest.raises(ValueError, match='strictly increasing'):
        build_lr_hook(dict(policy='step', step=step))
    assert StepLrUpdaterHook(step=(1, 3)).step == [1, 3]
