"""momentum_config: mmcv 1.x's momentum schedules, against torch's OneCycleLR and by hand."""
import math

import pytest
import torch

from ckptzoo.registry import HOOKS
from ckptzoo.runner import IterBasedRunner
from ckptzoo.runner.hooks import (CosineAnnealingMomentumUpdaterHook, CyclicMomentumUpdaterHook,
                                  Hook, LinearAnnealingMomentumUpdaterHook,
                                  OneCycleLrUpdaterHook, OneCycleMomentumUpdaterHook,
                                  StepMomentumUpdaterHook, build_momentum_hook)
from tests.helpers.hook_fakes import CumulativeStub, FakeRunner
from tests.helpers.schedules import cyclic_reference
from tests.helpers.toy import ToyDataset, loader, make_model, quiet_logger


class MomentumRecorder(Hook):
    """Runs after the schedule hooks; records (lr, momentum) of group 0 each iteration."""

    def __init__(self):
        self.values = []

    def before_train_iter(self, runner):
        group = runner.optimizer.param_groups[0]
        mom = group['momentum'] if 'momentum' in group else group['betas'][0]
        self.values.append((group['lr'], mom))


def _run(tmp_path, hooks, iters=None, epochs=None, epoch_len=None, optimizer='sgd',
         cumulative_iters=None):
    model = torch.nn.Linear(2, 2)
    groups = [dict(params=[p]) for p in model.parameters()]
    opt = (torch.optim.SGD(groups, lr=0.1, momentum=0.9) if optimizer == 'sgd' else
           torch.optim.AdamW(groups, lr=0.1, betas=(0.9, 0.99)))
    runner = FakeRunner(tmp_path, model=model, optimizer=opt)
    if cumulative_iters:
        runner.register_hook(CumulativeStub(cumulative_iters), 'ABOVE_NORMAL')
    for hook, priority in hooks:
        runner.register_hook(hook, priority)
    recorder = MomentumRecorder()
    runner.register_hook(recorder, 'LOWEST')
    if iters is not None:
        runner.run_iters(list(range(iters)), iters)
    else:
        runner.run_epochs(list(range(epoch_len)), epochs)
    return recorder.values, opt


def _moms(values):
    return [m for _, m in values]


def test_step_by_epoch(tmp_path):
    values, _ = _run(tmp_path, [(StepMomentumUpdaterHook(step=[1, 2], gamma=0.5,
                                                         min_momentum=0.3), 'HIGH')],
                     epochs=3, epoch_len=2)
    assert _moms(values) == pytest.approx([0.9, 0.9, 0.45, 0.45, 0.3, 0.3], rel=1e-12)


def test_cosine_annealing_on_adam_betas(tmp_path):
    values, opt = _run(tmp_path, [(CosineAnnealingMomentumUpdaterHook(
        by_epoch=False, min_momentum_ratio=0.5), 'HIGH')], iters=4, optimizer='adamw')
    assert _moms(values) == pytest.approx(
        [0.45 + 0.225 * (1 + math.cos(math.pi * i / 4)) for i in range(4)], rel=1e-12)
    assert opt.param_groups[1]['betas'][1] == 0.99  # beta2 untouched
    values, _ = _run(tmp_path, [(LinearAnnealingMomentumUpdaterHook(
        by_epoch=False, min_momentum=0.5), 'HIGH')], iters=4)
    assert _moms(values) == pytest.approx([0.9, 0.8, 0.7, 0.6], rel=1e-12)


@pytest.mark.parametrize('warmup,factor', [
    ('constant', lambda i: 0.8), ('linear', lambda i: 1 - (1 - i / 4) * 0.2),
    ('exp', lambda i: 0.8**(1 - i / 4))])
def test_warmup_divides(tmp_path, warmup, factor):
    hook = StepMomentumUpdaterHook(by_epoch=False, step=[100], warmup=warmup, warmup_iters=4,
                                   warmup_ratio=0.8)
    values, _ = _run(tmp_path, [(hook, 'HIGH')], iters=6)
    assert _moms(values) == pytest.approx([0.9 / factor(i) for i in range(4)] + [0.9, 0.9],
                                          rel=1e-12)


def test_cyclic(tmp_path):
    hook = CyclicMomentumUpdaterHook(target_ratio=(0.85 / 0.95, 1), cyclic_times=2,
                                     step_ratio_up=0.4, gamma=0.5)
    values, _ = _run(tmp_path, [(hook, 'HIGH')], iters=10)
    assert _moms(values) == pytest.approx(
        [cyclic_reference(0.9, i, 5, 2, 0.9 * 0.85 / 0.95, 1.0, 0.5) for i in range(10)],
        rel=1e-12)


@pytest.mark.parametrize('optimizer', ['sgd', 'adamw'])
@pytest.mark.parametrize('three_phase', [False, True])
def test_one_cycle_lr_and_momentum_equal_torch(tmp_path, optimizer, three_phase):
    total = 20
    hooks = [(OneCycleLrUpdaterHook(max_lr=0.4, three_phase=three_phase), 'VERY_HIGH'),
             (OneCycleMomentumUpdaterHook(base_momentum=0.8, max_momentum=0.95,
                                          three_phase=three_phase), 'HIGH')]
    values, _ = _run(tmp_path, hooks, iters=total, optimizer=optimizer)
    model = torch.nn.Linear(2, 2)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == 'sgd'
           else torch.optim.AdamW(model.parameters(), lr=0.1, betas=(0.9, 0.99)))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.4, total_steps=total,
                                                base_momentum=0.8, max_momentum=0.95,
                                                three_phase=three_phase)
    reference = []
    for _ in range(total):
        group = opt.param_groups[0]
        reference.append((group['lr'], group['momentum'] if optimizer == 'sgd'
                          else group['betas'][0]))
        opt.step()
        sched.step()
    assert values == [pytest.approx(r, rel=1e-9) for r in reference]


def test_accumulation_counts_updates(tmp_path):
    make = lambda: CyclicMomentumUpdaterHook(cyclic_times=2)  # noqa: E731
    plain, _ = _run(tmp_path, [(make(), 'HIGH')], iters=4)
    accum, _ = _run(tmp_path, [(make(), 'HIGH')], iters=11, cumulative_iters=3)
    assert _moms(accum) == [_moms(plain)[i // 3] for i in range(11)]


@pytest.mark.parametrize('policy,name', [
    ('step', 'StepMomentumUpdaterHook'), ('CosineAnnealing', 'CosineAnnealingMomentumUpdaterHook'),
    ('cyclic', 'CyclicMomentumUpdaterHook'), ('OneCycle', 'OneCycleMomentumUpdaterHook'),
    ('onecycle', 'OneCycleMomentumUpdaterHook'),
    ('LinearAnnealing', 'LinearAnnealingMomentumUpdaterHook')])
def test_build_momentum_hook(policy, name):
    extra = dict(StepMomentumUpdaterHook=dict(step=[2]), CosineAnnealingMomentumUpdaterHook=dict(
        min_momentum_ratio=0.9), LinearAnnealingMomentumUpdaterHook=dict(min_momentum=0.8)).get(
            name, {})
    hook = build_momentum_hook(dict(policy=policy, **extra))
    assert type(hook) is HOOKS.get(name)
    with pytest.raises(ValueError, match="unknown momentum_config policy 'cosine'.*Cyclic"):
        build_momentum_hook(dict(policy='cosine'))


def test_registered_by_the_runner(tmp_path):
    """mmdet 3D-style cyclic lr + momentum through register_training_hooks on a real runner."""
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.95, 0.99), weight_decay=0.01)
    runner = IterBasedRunner(model, optimizer=opt, work_dir=str(tmp_path),
                             logger=quiet_logger(), max_iters=10)
    runner.register_training_hooks(
        lr_config=dict(policy='cyclic', target_ratio=(10, 1e-4), cyclic_times=1,
                       step_ratio_up=0.4),
        momentum_config=dict(policy='cyclic', target_ratio=(0.85 / 0.95, 1), cyclic_times=1,
                             step_ratio_up=0.4),
        optimizer_config=dict(grad_clip=None))
    names = [type(h).__name__ for h in runner.hooks]
    assert names.index('CyclicLrUpdaterHook') < names.index('CyclicMomentumUpdaterHook') < \
        names.index('OptimizerHook')
    recorder = MomentumRecorder()
    runner.register_hook(recorder, 'LOWEST')
    runner.run([loader(ToyDataset())], [('train', 1)])
    lrs, moms = zip(*recorder.values)
    assert lrs == pytest.approx([cyclic_reference(1e-3, i, 10, 4, 1e-2, 1e-4, 1)
                                 for i in range(10)], rel=1e-9)
    assert moms == pytest.approx([cyclic_reference(0.95, i, 10, 4, 0.85, 1.0, 1)
                                  for i in range(10)], rel=1e-9)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match='only supports by_epoch=False'):
        CyclicMomentumUpdaterHook(by_epoch=True)
    with pytest.raises(ValueError, match='exactly one of min_momentum and min_momentum_ratio'):
        CosineAnnealingMomentumUpdaterHook()
    with pytest.raises(ValueError, match='step must be a positive int'):
        StepMomentumUpdaterHook(step=[0])
    with pytest.raises(ValueError, match='base_momentum must be a float'):
        OneCycleMomentumUpdaterHook(base_momentum='0.85')
    model = torch.nn.Linear(2, 2)
    runner = FakeRunner(tmp_path, model=model,
                        optimizer=torch.optim.Adagrad(model.parameters(), lr=0.1))
    runner.register_hook(StepMomentumUpdaterHook(step=2), 'HIGH')
    with pytest.raises(ValueError, match='Adagrad has no momentum or betas'):
        runner.run_epochs([0], 1)


def test_step_list_must_increase():
    with pytest.raises(ValueError, match=r'strictly increasing positive ints.*\[3, 1\]'):
        StepMomentumUpdaterHook(step=[3, 1])
