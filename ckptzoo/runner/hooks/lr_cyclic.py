"""mmcv 1.x's cyclic lr schedules: ``policy='cyclic'`` and ``policy='OneCycle'``.

Both are iteration-based only. Under gradient accumulation they count optimizer updates, as
every iteration-based schedule here does: the cycle spans ``ceil(max_iters / k)`` updates and
the lr changes only between updates. The momentum counterparts
(:mod:`.momentum_updater`) share the phase arithmetic below.
"""
import numbers

from ...registry import HOOKS
from .lr_updater import (LrUpdaterHook, annealing_cos, annealing_linear, format_param,
                         schedule_progress)

__all__ = ['CyclicLrUpdaterHook', 'OneCycleLrUpdaterHook', 'anneal_function',
           'cyclic_target_ratio', 'init_cycle', 'cyclic_phases', 'cyclic_value', 'one_cycle_phases',
           'one_cycle_value', 'check_pct', 'check_by_epoch_false']

_ANNEAL = dict(cos=annealing_cos, linear=annealing_linear)


def anneal_function(anneal_strategy):
    if anneal_strategy not in _ANNEAL:
        raise ValueError(f'anneal_strategy must be one of {", ".join(_ANNEAL)}, got '
                         f'{anneal_strategy!r}')
    return _ANNEAL[anneal_strategy]


def check_by_epoch_false(hook_name, kwargs):
    """These schedules step per iteration: ``by_epoch`` defaults to (and must be) False."""
    if kwargs.setdefault('by_epoch', False):
        raise ValueError(f'{hook_name} only supports by_epoch=False, got by_epoch=True')


def check_pct(value, name):
    if isinstance(value, bool) or not isinstance(value, float) or not 0 <= value <= 1:
        raise ValueError(f'{name} must be a float in [0, 1], got {value!r}')


def cyclic_target_ratio(target_ratio):
    """``(high, low)`` from a number ``r`` (-> ``(r, r / 1e5)``) or a sequence of 1 or 2."""
    if isinstance(target_ratio, numbers.Real) and not isinstance(target_ratio, bool):
        return float(target_ratio), target_ratio / 1e5
    if isinstance(target_ratio, (list, tuple)) and len(target_ratio) in (1, 2):
        if len(target_ratio) == 1:
            return target_ratio[0], target_ratio[0] / 1e5
        return tuple(target_ratio)
    raise ValueError(f'target_ratio must be a number or a tuple of one or two numbers, got '
                     f'{target_ratio!r}')


def init_cycle(hook, target_ratio, cyclic_times, step_ratio_up, anneal_strategy, gamma):
    """Check and set the cycle arguments shared by the cyclic lr and momentum hooks."""
    hook.target_ratio = cyclic_target_ratio(target_ratio)
    if not isinstance(cyclic_times, numbers.Integral) or cyclic_times < 1:
        raise ValueError(f'cyclic_times must be a positive int, got {cyclic_times!r}')
    if not 0 <= step_ratio_up < 1:
        raise ValueError(f'step_ratio_up must be in [0, 1), got {step_ratio_up!r}')
    if not 0 < gamma <= 1:
        raise ValueError(f'gamma must be in (0, 1], got {gamma!r}')
    hook.cyclic_times = cyclic_times
    hook.step_ratio_up = step_ratio_up
    hook.gamma = gamma
    hook.anneal_func = anneal_function(anneal_strategy)
    hook.max_iter_per_phase = None


def cyclic_phases(max_progress, cyclic_times, step_ratio_up, target_ratio):
    """``(iters per cycle, [[start, end, start_ratio, end_ratio], ...])`` of one cycle."""
    per_cycle = max_progress // cyclic_times
    if per_cycle < 1:
        raise ValueError(f'cyclic_times={cyclic_times} cycles do not fit in {max_progress} '
                         f'iterations (optimizer updates)')
    up = int(step_ratio_up * per_cycle)
    return per_cycle, [[0, up, 1, target_ratio[0]],
                       [up, per_cycle, target_ratio[0], target_ratio[1]]]


def cyclic_value(base, progress, per_cycle, phases, gamma, anneal):
    """The value at ``progress``; each cycle's amplitude is ``gamma ** cycle`` times the first's."""
    curr, cycle = progress % per_cycle, progress // per_cycle
    scale = gamma**cycle
    for start, end, start_ratio, end_ratio in phases:
        if start <= curr < end:
            if start == 0:
                end_ratio = 1 - scale + end_ratio * scale
            else:
                start_ratio = 1 - scale + start_ratio * scale
            return anneal(base * start_ratio, base * end_ratio, (curr - start) / (end - start))
    raise RuntimeError(f'progress {progress} is in no phase of {phases}')


def one_cycle_phases(total_steps, pct_start, three_phase, keys):
    """``[(end_step, start_key, end_key), ...]`` as torch's OneCycleLR lays them out;
    ``keys = (low, peak, final)``."""
    low, peak, final = keys
    up = float(pct_start * total_steps) - 1
    if three_phase:
        return [(up, low, peak), (float(2 * pct_start * total_steps) - 2, peak, low),
                (total_steps - 1, low, final)]
    return [(up, low, peak), (total_steps - 1, peak, final)]


def one_cycle_value(progress, phases, values, anneal):
    """Anneal between ``values[start_key]`` and ``values[end_key]`` of the current phase."""
    start = 0
    for i, (end, start_key, end_key) in enumerate(phases):
        if progress <= end or i == len(phases) - 1:
            pct = (progress - start) / (end - start) if end != start else 1.0
            return anneal(values[start_key], values[end_key], pct)
        start = end


@HOOKS.register_module()
class CyclicLrUpdaterHook(LrUpdaterHook):
    """Cycles of a cosine (or linear) rise to ``base_lr * target_ratio[0]`` over
    ``step_ratio_up`` of each cycle, then a fall to ``base_lr * target_ratio[1]``.

    Args:
        target_ratio (float | tuple): ``(high, low)`` relative to the base lr; a number ``r``
            means ``(r, r / 1e5)``.
        cyclic_times (int): cycles over the run.
        step_ratio_up (float): the rising part of a cycle, in [0, 1).
        anneal_strategy (str): 'cos' or 'linear'.
        gamma (float): in (0, 1]; cycle ``c``'s peak is ``base + gamma**c * (high - base)``.
    """

    def __init__(self, by_epoch=False, target_ratio=(10, 1e-4), cyclic_times=1,
                 step_ratio_up=0.4, anneal_strategy='cos', gamma=1, **kwargs):
        kwargs['by_epoch'] = by_epoch
        check_by_epoch_false(type(self).__name__, kwargs)
        init_cycle(self, target_ratio, cyclic_times, step_ratio_up, anneal_strategy, gamma)
        self.lr_phases = []
        super().__init__(**kwargs)

    def before_run(self, runner):
        super().before_run(runner)
        _, max_progress = schedule_progress(runner, False)
        self.max_iter_per_phase, self.lr_phases = cyclic_phases(
            max_progress, self.cyclic_times, self.step_ratio_up, self.target_ratio)

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        return cyclic_value(base_lr, progress, self.max_iter_per_phase, self.lr_phases,
                            self.gamma, self.anneal_func)


@HOOKS.register_module()
class OneCycleLrUpdaterHook(LrUpdaterHook):
    """The 1cycle policy (torch's ``OneCycleLR``): from ``max_lr / div_factor`` up to ``max_lr``
    over ``pct_start`` of ``total_steps``, then down to ``max_lr / div_factor /
    final_div_factor`` (``three_phase``: back to the start first, then down).

    Args:
        max_lr (float | list | dict): per group, or per optimizer name for a dict of them.
        total_steps (int | None): the cycle length; the run's (updates) by default.
    """

    def __init__(self, max_lr, total_steps=None, pct_start=0.3, anneal_strategy='cos',
                 div_factor=25, final_div_factor=1e4, three_phase=False, **kwargs):
        check_by_epoch_false(type(self).__name__, kwargs)
        if isinstance(max_lr, bool) or not isinstance(max_lr, (numbers.Number, list, tuple,
                                                               dict)):
            raise ValueError(f'max_lr must be a number, a list or a dict, got {max_lr!r}')
        if total_steps is not None and (not isinstance(total_steps, numbers.Integral)
                                        or total_steps < 1):
            raise ValueError(f'total_steps must be a positive int or None, got {total_steps!r}')
        check_pct(pct_start, 'pct_start')
        self._max_lr = max_lr
        self.total_steps = total_steps
        self.pct_start = pct_start
        self.anneal_func = anneal_function(anneal_strategy)
        self.div_factor = div_factor
        self.final_div_factor = final_div_factor
        self.three_phase = three_phase
        self.lr_phases = []
        super().__init__(**kwargs)

    def before_run(self, runner):
        _, max_progress = schedule_progress(runner, False)
        total_steps = self.total_steps or max_progress
        if total_steps < max_progress:
            raise ValueError(f'total_steps ({total_steps}) must be at least the run\'s '
                             f'{max_progress} iterations (optimizer updates)')
        optims = runner.optimizer if isinstance(runner.optimizer, dict) else {
            None: runner.optimizer}
        self.base_lr = {}
        for key, optim in optims.items():
            name = type(optim).__name__ if key is None else key
            base = [lr / self.div_factor for lr in format_param(name, optim, self._max_lr)]
            for group, lr in zip(optim.param_groups, base):
                group.setdefault('initial_lr', lr)
            self.base_lr[key] = base
        if None in self.base_lr:
            self.base_lr = self.base_lr[None]
        self.lr_phases = one_cycle_phases(total_steps, self.pct_start, self.three_phase,
                                          (1, self.div_factor, 1 / self.final_div_factor))

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        values = {k: base_lr * k for k in (1, self.div_factor, 1 / self.final_div_factor)}
        return one_cycle_value(progress, self.lr_phases, values, self.anneal_func)
