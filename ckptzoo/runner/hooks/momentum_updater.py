"""mmcv 1.x momentum schedules (``momentum_config``) as hooks.

The momentum is SGD's ``momentum`` or, for Adam-like optimizers, ``betas[0]``. As for the lr,
iteration-based progress counts optimizer updates under gradient accumulation
(``runner.iter // k`` of ``ceil(max_iters / k)``). Names and arguments are mmcv's:
``policy='step' | 'CosineAnnealing' | 'LinearAnnealing' | 'cyclic' | 'OneCycle'``.

Warmup follows mmcv: the momentum is *divided* by the warmup factor (``warmup_ratio`` at the
start, 1 at the end), so it starts high while the lr starts low. mmcv's 'constant' and
'linear' momentum warmups read an attribute that was never set and crashed; here all three
work.
"""
import numbers

from ...registry import HOOKS
from .hook import Hook
from .lr_cyclic import (anneal_function, check_by_epoch_false, check_pct, cyclic_phases,
                        cyclic_value, init_cycle, one_cycle_phases, one_cycle_value)
from .lr_updater import (check_min, annealing_cos, annealing_linear, build_schedule_hook,
                         check_step, check_warmup, format_param, get_cumulative_iters, min_target,
                         schedule_progress)

__all__ = ['MomentumUpdaterHook', 'StepMomentumUpdaterHook',
           'CosineAnnealingMomentumUpdaterHook', 'LinearAnnealingMomentumUpdaterHook',
           'CyclicMomentumUpdaterHook', 'OneCycleMomentumUpdaterHook', 'build_momentum_hook']


def _optimizers(runner):
    opt = runner.optimizer
    return opt.items() if isinstance(opt, dict) else [(None, opt)]


def _group_momentum(group, optim):
    if 'momentum' in group:
        return group['momentum']
    if 'betas' in group:
        return group['betas'][0]
    raise ValueError(f'{type(optim).__name__} has no momentum or betas to schedule')


class MomentumUpdaterHook(Hook):
    """Base of the momentum schedules: sets every group's momentum from ``initial_momentum``.

    Args:
        by_epoch (bool): the schedule advances per epoch (else per iteration / update).
        warmup (str | None): None, 'constant', 'linear' or 'exp'.
        warmup_iters (int): warmup length in iterations (updates under accumulation).
        warmup_ratio (float): the momentum at the start of warmup is ``momentum / ratio``.
    """

    def __init__(self, by_epoch=True, warmup=None, warmup_iters=0, warmup_ratio=0.9):
        check_warmup(warmup, warmup_iters, warmup_ratio)
        self.by_epoch = by_epoch
        self.warmup = warmup
        self.warmup_iters = warmup_iters
        self.warmup_ratio = warmup_ratio
        self.base_momentum = []
        self.regular_momentum = []

    def get_progress(self, runner):
        return schedule_progress(runner, self.by_epoch)

    def get_momentum(self, runner, base_momentum):
        raise NotImplementedError(f'{type(self).__name__} must implement get_momentum')

    def _map(self, values, fn):
        if isinstance(values, dict):
            return {name: [fn(v) for v in vals] for name, vals in values.items()}
        return [fn(v) for v in values]

    def get_regular_momentum(self, runner):
        return self._map(self.base_momentum, lambda m: self.get_momentum(runner, m))

    def get_warmup_momentum(self, cur_iters):
        if self.warmup == 'constant':
            k = self.warmup_ratio
        elif self.warmup == 'linear':
            k = 1 - (1 - cur_iters / self.warmup_iters) * (1 - self.warmup_ratio)
        else:  # 'exp'
            k = self.warmup_ratio**(1 - cur_iters / self.warmup_iters)
        return self._map(self.regular_momentum, lambda m: m / k)

    def _set_momentum(self, runner, values):
        for name, optim in _optimizers(runner):
            for group, mom in zip(optim.param_groups, values if name is None else values[name]):
                if 'momentum' in group:
                    group['momentum'] = mom
                elif 'betas' in group:
                    group['betas'] = (mom, group['betas'][1])

    def before_run(self, runner):
        # ``initial_momentum`` survives in a resumed optimizer state; set it only when missing
        base = {}
        for name, optim in _optimizers(runner):
            for group in optim.param_groups:
                group.setdefault('initial_momentum', _group_momentum(group, optim))
            base[name] = [group['initial_momentum'] for group in optim.param_groups]
        self.base_momentum = base[None] if None in base else base

    def before_train_epoch(self, runner):
        if not self.by_epoch:
            return
        self.regular_momentum = self.get_regular_momentum(runner)
        self._set_momentum(runner, self.regular_momentum)

    def before_train_iter(self, runner):
        cur_iter = runner.iter // get_cumulative_iters(runner)
        if not self.by_epoch:
            self.regular_momentum = self.get_regular_momentum(runner)
            if self.warmup is None or cur_iter >= self.warmup_iters:
                self._set_momentum(runner, self.regular_momentum)
            else:
                self._set_momentum(runner, self.get_warmup_momentum(cur_iter))
        elif self.warmup is not None and cur_iter <= self.warmup_iters:
            if cur_iter == self.warmup_iters:
                self._set_momentum(runner, self.regular_momentum)
            else:
                self._set_momentum(runner, self.get_warmup_momentum(cur_iter))


@HOOKS.register_module()
class StepMomentumUpdaterHook(MomentumUpdaterHook):
    """momentum = base * gamma ** (steps passed), clipped below at ``min_momentum``."""

    def __init__(self, step, gamma=0.5, min_momentum=None, **kwargs):
        self.step = check_step(step)
        self.gamma = gamma
        self.min_momentum = min_momentum
        super().__init__(**kwargs)

    def get_momentum(self, runner, base_momentum):
        progress, _ = self.get_progress(runner)
        if isinstance(self.step, list):
            exp = next((i for i, s in enumerate(self.step) if progress < s), len(self.step))
        else:
            exp = progress // self.step
        momentum = base_momentum * self.gamma**exp
        if self.min_momentum is not None:
            momentum = max(momentum, self.min_momentum)
        return momentum


@HOOKS.register_module()
class CosineAnnealingMomentumUpdaterHook(MomentumUpdaterHook):
    """Cosine from the base momentum to ``min_momentum`` (or ``base * min_momentum_ratio``)."""

    _anneal = staticmethod(annealing_cos)

    def __init__(self, min_momentum=None, min_momentum_ratio=None, **kwargs):
        check_min(min_momentum, min_momentum_ratio, 'momentum')
        self.min_momentum = min_momentum
        self.min_momentum_ratio = min_momentum_ratio
        super().__init__(**kwargs)

    def get_momentum(self, runner, base_momentum):
        progress, max_progress = self.get_progress(runner)
        target = min_target(base_momentum, self.min_momentum, self.min_momentum_ratio)
        return self._anneal(base_momentum, target, progress / max_progress)


@HOOKS.register_module()
class LinearAnnealingMomentumUpdaterHook(CosineAnnealingMomentumUpdaterHook):
    """Linear from the base momentum to ``min_momentum`` (or ``base * min_momentum_ratio``)."""

    _anneal = staticmethod(annealing_linear)


@HOOKS.register_module()
class CyclicMomentumUpdaterHook(MomentumUpdaterHook):
    """The momentum mirror of ``CyclicLrUpdaterHook`` (same phases; default
    ``target_ratio=(0.85 / 0.95, 1)``: down while the lr goes up)."""

    def __init__(self, by_epoch=False, target_ratio=(0.85 / 0.95, 1), cyclic_times=1,
                 step_ratio_up=0.4, anneal_strategy='cos', gamma=1, **kwargs):
        kwargs['by_epoch'] = by_epoch
        check_by_epoch_false(type(self).__name__, kwargs)
        init_cycle(self, target_ratio, cyclic_times, step_ratio_up, anneal_strategy, gamma)
        self.momentum_phases = []
        super().__init__(**kwargs)

    def before_run(self, runner):
        super().before_run(runner)
        _, max_progress = schedule_progress(runner, False)
        self.max_iter_per_phase, self.momentum_phases = cyclic_phases(
            max_progress, self.cyclic_times, self.step_ratio_up, self.target_ratio)

    def get_momentum(self, runner, base_momentum):
        progress, _ = self.get_progress(runner)
        return cyclic_value(base_momentum, progress, self.max_iter_per_phase,
                            self.momentum_phases, self.gamma, self.anneal_func)


@HOOKS.register_module()
class OneCycleMomentumUpdaterHook(MomentumUpdaterHook):
    """The momentum of the 1cycle policy (torch's ``OneCycleLR(cycle_momentum=True)``): from
    ``max_momentum`` down to ``base_momentum`` while the lr rises, then back up.

    Args:
        base_momentum, max_momentum (float | list | dict): per group or per optimizer name.
        pct_start (float), anneal_strategy (str), three_phase (bool): as the lr hook's.
    """

    def __init__(self, base_momentum=0.85, max_momentum=0.95, pct_start=0.3,
                 anneal_strategy='cos', three_phase=False, **kwargs):
        check_by_epoch_false(type(self).__name__, kwargs)
        for name, value in (('base_momentum', base_momentum), ('max_momentum', max_momentum)):
            if isinstance(value, bool) or not isinstance(value, (numbers.Real, list, tuple,
                                                                 dict)):
                raise ValueError(f'{name} must be a float, a list or a dict, got {value!r}')
        check_pct(pct_start, 'pct_start')
        self._base_momentum = base_momentum
        self._max_momentum = max_momentum
        self.pct_start = pct_start
        self.anneal_func = anneal_function(anneal_strategy)
        self.three_phase = three_phase
        self.momentum_phases = []
        super().__init__(**kwargs)

    def before_run(self, runner):
        for name, optim in _optimizers(runner):
            if 'momentum' not in optim.defaults and 'betas' not in optim.defaults:
                raise ValueError(f'{type(optim).__name__} has no momentum or betas to schedule')
            key = type(optim).__name__ if name is None else name
            lows = format_param(key, optim, self._base_momentum)
            highs = format_param(key, optim, self._max_momentum)
            for group, low, high in zip(optim.param_groups, lows, highs):
                if 'betas' in optim.defaults:
                    group['betas'] = (high, group['betas'][1])
                else:
                    group['momentum'] = high
                group['base_momentum'] = low
                group['max_momentum'] = high
        _, max_progress = schedule_progress(runner, False)
        self.momentum_phases = one_cycle_phases(
            max_progress, self.pct_start, self.three_phase,
            ('max_momentum', 'base_momentum', 'max_momentum'))

    def get_regular_momentum(self, runner):
        progress, _ = self.get_progress(runner)
        values = {name: [one_cycle_value(progress, self.momentum_phases, group, self.anneal_func)
                         for group in optim.param_groups]
                  for name, optim in _optimizers(runner)}
        return values[None] if None in values else values


def build_momentum_hook(momentum_config):
    """The hook for an mmcv ``momentum_config``: ``policy='cyclic'`` ->
    ``CyclicMomentumUpdaterHook``, ``policy='OneCycle'`` -> ``OneCycleMomentumUpdaterHook``."""
    return build_schedule_hook(momentum_config, 'MomentumUpdaterHook', 'momentum_config')
