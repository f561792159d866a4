"""mmcv 1.x learning-rate schedules as hooks, and ``lr_config`` -> hook the mmcv way.

Gradient accumulation: when an optimizer hook with ``cumulative_iters = k > 1`` is registered,
iteration-based progress counts *optimizer updates*: ``progress = runner.iter // k`` and
``max_progress = ceil(runner.max_iters / k)``. So ``warmup_iters=500`` warms up over 500 updates
whatever ``k`` is, ``step=[8000, 11000]`` with ``by_epoch=False`` decays after 8000 and 11000
updates, and the lr only changes at update boundaries (all iterations that feed one update see
the same lr). Epoch-based progress (``by_epoch=True``) is unchanged. mmcv counted raw iterations,
so a config tuned for ``k=1`` changed its schedule when accumulation was switched on.
"""
import math
import numbers

from ...registry import HOOKS
from .hook import Hook

__all__ = ['LrUpdaterHook', 'StepLrUpdaterHook', 'CosineAnnealingLrUpdaterHook',
           'PolyLrUpdaterHook', 'FixedLrUpdaterHook', 'ExpLrUpdaterHook', 'InvLrUpdaterHook',
           'FlatCosineAnnealingLrUpdaterHook', 'LinearAnnealingLrUpdaterHook',
           'CosineRestartLrUpdaterHook', 'annealing_cos', 'annealing_linear', 'build_lr_hook',
           'build_schedule_hook', 'format_param', 'get_cumulative_iters', 'schedule_progress',
           'check_warmup', 'check_min', 'min_target', 'check_step', 'schedule_hook_cfg']

_WARMUP_TYPES = ('constant', 'linear', 'exp')


def get_cumulative_iters(runner):
    """``k`` of the registered gradient-accumulating optimizer hook, 1 when there is none."""
    for hook in getattr(runner, 'hooks', None) or []:
        k = getattr(hook, 'cumulative_iters', None)
        if isinstance(k, numbers.Integral) and k > 1:
            return int(k)
    return 1


def schedule_progress(runner, by_epoch):
    """``(progress, max_progress)`` in epochs, or in optimizer updates when iteration-based."""
    if by_epoch:
        return runner.epoch, runner.max_epochs
    k = get_cumulative_iters(runner)
    return runner.iter // k, math.ceil(runner.max_iters / k)


def annealing_cos(start, end, factor, weight=1):
    """Cosine from ``weight * start + (1 - weight) * end`` (factor 0) to ``end`` (factor 1)."""
    cos_out = math.cos(math.pi * factor) + 1
    return end + 0.5 * weight * (start - end) * cos_out


def annealing_linear(start, end, factor):
    """Linear from ``start`` (factor 0) to ``end`` (factor 1)."""
    return start + (end - start) * factor


def format_param(name, optim, param):
    """A per-group list from a number, a per-group list, or a dict keyed by optimizer name."""
    if isinstance(param, numbers.Number):
        return [param] * len(optim.param_groups)
    if isinstance(param, (list, tuple)):
        if len(param) != len(optim.param_groups):
            raise ValueError(f'expected {len(optim.param_groups)} values for {name} (one per '
                             f'param group), got {len(param)}: {param!r}')
        return list(param)
    if isinstance(param, dict):
        if name not in param:
            raise KeyError(f'no value for optimizer {name!r} in {param!r}')
        return format_param(name, optim, param[name])
    raise TypeError(f'expected a number, a list or a dict of them for {name}, got {param!r}')


def check_warmup(warmup, warmup_iters, warmup_ratio):
    if warmup is None:
        return
    if warmup not in _WARMUP_TYPES:
        raise ValueError(f'warmup must be None or one of {", ".join(_WARMUP_TYPES)}, '
                         f'got {warmup!r}')
    if not isinstance(warmup_iters, numbers.Integral) or warmup_iters <= 0:
        raise ValueError(f'warmup_iters must be a positive int when warmup is set, '
                         f'got {warmup_iters!r}')
    if not 0 < warmup_ratio <= 1.0:
        raise ValueError(f'warmup_ratio must be in (0, 1], got {warmup_ratio!r}')


def check_step(step):
    """``step`` of a step schedule: a positive int (decay every ``step``) or a non-empty list
    of strictly increasing positive ints (decay at each). mmcv asserts positive ints only, so
    ``step=[3, 1]`` passed and decayed twice at once at 3 (the schedule counts the listed
    steps before the first one not yet reached); here it fails. Returns ``step`` (a list
    for a list or tuple)."""
    allowed = 'a positive int or a non-empty list of strictly increasing positive ints'
    if isinstance(step, (list, tuple)):
        steps = list(step)
        if not steps or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool)
                                and s > 0 for s in steps):
            raise ValueError(f'step must be {allowed}, got {step!r}')
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(f'step must be {allowed} (each step after the one before it), '
                             f'got {step!r}')
        return steps
    if not isinstance(step, numbers.Integral) or isinstance(step, bool):
        raise TypeError(f'step must be {allowed}, got {step!r}')
    if step <= 0:
        raise ValueError(f'step must be {allowed}, got {step!r}')
    return step


def min_target(base, minimum, ratio):
    """The end of an annealing: ``base * ratio`` when a ratio is given, else ``minimum``."""
    return base * ratio if ratio is not None else minimum


def check_min(min_value, min_ratio, what):
    if (min_value is None) == (min_ratio is None):
        raise ValueError(f'exactly one of min_{what} and min_{what}_ratio must be given, got '
                         f'min_{what}={min_value!r}, min_{what}_ratio={min_ratio!r}')


@HOOKS.register_module()
class LrUpdaterHook(Hook):
    """Base of the lr schedules: sets every param group's lr from its ``initial_lr``.

    Args:
        by_epoch (bool): the schedule advances per epoch (else per iteration / update).
        warmup (str | None): None, 'constant', 'linear' or 'exp'.
        warmup_iters (int): warmup length in iterations (optimizer updates under gradient
            accumulation), or in epochs when ``warmup_by_epoch``.
        warmup_ratio (float): the lr at the start of warmup is ``warmup_ratio * lr``.
        warmup_by_epoch (bool): ``warmup_iters`` counts epochs.

    With gradient accumulation (an optimizer hook with ``cumulative_iters = k > 1`` in
    ``runner.hooks``) iteration-based progress counts optimizer updates: ``runner.iter // k``
    out of ``ceil(runner.max_iters / k)``; warmup epochs become the ``ceil(epoch_len * n / k)``
    updates that start in them. The lr then only changes between updates.
    """

    def __init__(self, by_epoch=True, warmup=None, warmup_iters=0, warmup_ratio=0.1,
                 warmup_by_epoch=False):
        check_warmup(warmup, warmup_iters, warmup_ratio)
        self.by_epoch = by_epoch
        self.warmup = warmup
        self.warmup_ratio = warmup_ratio
        self.warmup_by_epoch = warmup_by_epoch
        if warmup_by_epoch:
            self.warmup_epochs = warmup_iters
            self.warmup_iters = None  # known once the epoch length is
        else:
            self.warmup_epochs = None
            self.warmup_iters = warmup_iters
        self.base_lr = []
        self.regular_lr = []

    # -- progress ---------------------------------------------------------------------------
    def get_progress(self, runner):
        """``(progress, max_progress)`` in epochs, or in optimizer updates when iteration-based."""
        return schedule_progress(runner, self.by_epoch)

    def _resolve_warmup_iters(self, runner):
        if self.warmup_iters is None:
            iters = self.warmup_epochs * len(runner.data_loader)
            # the updates that start within the warmup epochs
            self.warmup_iters = math.ceil(iters / get_cumulative_iters(runner))

    # -- lr computation ---------------------------------------------------------------------
    def get_lr(self, runner, base_lr):
        raise NotImplementedError(f'{type(self).__name__} must implement get_lr')

    def _set_lr(self, runner, lr_groups):
        if isinstance(runner.optimizer, dict):
            for name, optim in runner.optimizer.items():
                for group, lr in zip(optim.param_groups, lr_groups[name]):
                    group['lr'] = lr
        else:
            for group, lr in zip(runner.optimizer.param_groups, lr_groups):
                group['lr'] = lr

    def get_regular_lr(self, runner):
        if isinstance(runner.optimizer, dict):
            return {name: [self.get_lr(runner, lr) for lr in base]
                    for name, base in self.base_lr.items()}
        return [self.get_lr(runner, lr) for lr in self.base_lr]

    def get_warmup_lr(self, cur_iters):
        def _warmup(regular_lr):
            if self.warmup == 'constant':
                return [lr * self.warmup_ratio for lr in regular_lr]
            if self.warmup == 'linear':
                k = (1 - cur_iters / self.warmup_iters) * (1 - self.warmup_ratio)
                return [lr * (1 - k) for lr in regular_lr]
            k = self.warmup_ratio ** (1 - cur_iters / self.warmup_iters)  # 'exp'
            return [lr * k for lr in regular_lr]

        if isinstance(self.regular_lr, dict):
            return {name: _warmup(lrs) for name, lrs in self.regular_lr.items()}
        return _warmup(self.regular_lr)

    # -- hook stages ------------------------------------------------------------------------
    def before_run(self, runner):
        # ``initial_lr`` survives in a resumed optimizer state; set it only when missing
        if isinstance(runner.optimizer, dict):
            self.base_lr = {}
            for name, optim in runner.optimizer.items():
                for group in optim.param_groups:
                    group.setdefault('initial_lr', group['lr'])
                self.base_lr[name] = [group['initial_lr'] for group in optim.param_groups]
        else:
            for group in runner.optimizer.param_groups:
                group.setdefault('initial_lr', group['lr'])
            self.base_lr = [group['initial_lr'] for group in runner.optimizer.param_groups]

    def before_train_epoch(self, runner):
        self._resolve_warmup_iters(runner)
        if not self.by_epoch:
            return
        self.regular_lr = self.get_regular_lr(runner)
        self._set_lr(runner, self.regular_lr)

    def before_train_iter(self, runner):
        self._resolve_warmup_iters(runner)
        cur_iter = runner.iter // get_cumulative_iters(runner)
        if not self.by_epoch:
            self.regular_lr = self.get_regular_lr(runner)
            if self.warmup is None or cur_iter >= self.warmup_iters:
                self._set_lr(runner, self.regular_lr)
            else:
                self._set_lr(runner, self.get_warmup_lr(cur_iter))
        else:
            if self.warmup is None or cur_iter > self.warmup_iters:
                return
            if cur_iter == self.warmup_iters:
                self._set_lr(runner, self.regular_lr)
            else:
                self._set_lr(runner, self.get_warmup_lr(cur_iter))


@HOOKS.register_module()
class FixedLrUpdaterHook(LrUpdaterHook):
    """A constant lr (after an optional warmup)."""

    def get_lr(self, runner, base_lr):
        return base_lr


@HOOKS.register_module()
class StepLrUpdaterHook(LrUpdaterHook):
    """lr = base_lr * gamma ** (number of steps passed), clipped below at ``min_lr``.

    Args:
        step (int | list[int]): decay every ``step`` epochs/updates, or at each listed one
            (strictly increasing: see :func:`check_step`).
        gamma (float): the decay factor.
        min_lr (float | None): lower bound of the lr.
    """

    def __init__(self, step, gamma=0.1, min_lr=None, **kwargs):
        self.step = check_step(step)
        self.gamma = gamma
        self.min_lr = min_lr
        super().__init__(**kwargs)

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        if isinstance(self.step, int):
            exp = progress // self.step
        else:
            exp = len(self.step)
            for i, s in enumerate(self.step):
                if progress < s:
                    exp = i
                    break
        lr = base_lr * self.gamma ** exp
        if self.min_lr is not None:
            lr = max(lr, self.min_lr)
        return lr


class _AnnealingLrUpdaterHook(LrUpdaterHook):
    """Base of the schedules that end at ``min_lr`` or ``base_lr * min_lr_ratio``."""

    def __init__(self, min_lr=None, min_lr_ratio=None, **kwargs):
        check_min(min_lr, min_lr_ratio, 'lr')
        self.min_lr = min_lr
        self.min_lr_ratio = min_lr_ratio
        super().__init__(**kwargs)

    def target_lr(self, base_lr):
        return min_target(base_lr, self.min_lr, self.min_lr_ratio)


@HOOKS.register_module()
class CosineAnnealingLrUpdaterHook(_AnnealingLrUpdaterHook):
    """Cosine from base_lr to ``min_lr`` (or ``base_lr * min_lr_ratio``) over the run."""

    def get_lr(self, runner, base_lr):
        progress, max_progress = self.get_progress(runner)
        return annealing_cos(base_lr, self.target_lr(base_lr), progress / max_progress)


@HOOKS.register_module()
class LinearAnnealingLrUpdaterHook(_AnnealingLrUpdaterHook):
    """Linear from base_lr to ``min_lr`` (or ``base_lr * min_lr_ratio``) over the run."""

    def get_lr(self, runner, base_lr):
        progress, max_progress = self.get_progress(runner)
        return annealing_linear(base_lr, self.target_lr(base_lr), progress / max_progress)


@HOOKS.register_module()
class FlatCosineAnnealingLrUpdaterHook(_AnnealingLrUpdaterHook):
    """base_lr until ``start_percent`` of the run (rounded), then cosine to the minimum."""

    def __init__(self, start_percent=0.75, min_lr=None, min_lr_ratio=None, **kwargs):
        if isinstance(start_percent, bool) or not isinstance(start_percent, float) \
                or not 0 <= start_percent <= 1:
            raise ValueError(f'start_percent must be a float in [0, 1], got {start_percent!r}')
        self.start_percent = start_percent
        super().__init__(min_lr=min_lr, min_lr_ratio=min_lr_ratio, **kwargs)

    def get_lr(self, runner, base_lr):
        progress, max_progress = self.get_progress(runner)
        start = round(max_progress * self.start_percent)
        if progress < start:
            return base_lr
        return annealing_cos(base_lr, self.target_lr(base_lr),
                             (progress - start) / (max_progress - start))


@HOOKS.register_module()
class CosineRestartLrUpdaterHook(_AnnealingLrUpdaterHook):
    """Cosine annealing restarted after each of ``periods`` (epochs or updates).

    Period ``i`` starts at ``restart_weights[i] * base_lr + (1 - restart_weights[i]) * target``
    and anneals to the target (``min_lr`` or ``base_lr * min_lr_ratio``). The run must not
    outlast ``sum(periods)``.
    """

    def __init__(self, periods, restart_weights=(1, ), min_lr=None, min_lr_ratio=None,
                 **kwargs):
        if not isinstance(periods, (list, tuple)) or not periods or not all(
                isinstance(p, numbers.Integral) and p > 0 for p in periods):
            raise ValueError(f'periods must be a non-empty list of positive ints, got '
                             f'{periods!r}')
        if not isinstance(restart_weights, (list, tuple)) or \
                len(restart_weights) != len(periods):
            raise ValueError(f'restart_weights must be a list as long as periods '
                             f'({len(periods)}), got {restart_weights!r}')
        self.periods = list(periods)
        self.restart_weights = list(restart_weights)
        super().__init__(min_lr=min_lr, min_lr_ratio=min_lr_ratio, **kwargs)
        self.cumulative_periods = [sum(self.periods[:i + 1]) for i in range(len(self.periods))]

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        idx = get_position_from_periods(progress, self.cumulative_periods)
        start = 0 if idx == 0 else self.cumulative_periods[idx - 1]
        alpha = min((progress - start) / self.periods[idx], 1)
        return annealing_cos(base_lr, self.target_lr(base_lr), alpha, self.restart_weights[idx])


def get_position_from_periods(progress, cumulative_periods):
    """The index of the first cumulative period end beyond ``progress``."""
    for i, end in enumerate(cumulative_periods):
        if progress < end:
            return i
    raise ValueError(f'progress {progress} is past the end of the periods (cumulative '
                     f'{cumulative_periods}): make sum(periods) cover the whole run')


@HOOKS.register_module()
class PolyLrUpdaterHook(LrUpdaterHook):
    """lr = (base_lr - min_lr) * (1 - progress / max_progress) ** power + min_lr."""

    def __init__(self, power=1., min_lr=0., **kwargs):
        self.power = power
        self.min_lr = min_lr
        super().__init__(**kwargs)

    def get_lr(self, runner, base_lr):
        progress, max_progress = self.get_progress(runner)
        coeff = (1 - progress / max_progress) ** self.power
        return (base_lr - self.min_lr) * coeff + self.min_lr


@HOOKS.register_module()
class ExpLrUpdaterHook(LrUpdaterHook):
    """lr = base_lr * gamma ** progress (epochs or updates)."""

    def __init__(self, gamma, **kwargs):
        self.gamma = gamma
        super().__init__(**kwargs)

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        return base_lr * self.gamma**progress


@HOOKS.register_module()
class InvLrUpdaterHook(LrUpdaterHook):
    """lr = base_lr * (1 + gamma * progress) ** -power (Caffe's 'inv')."""

    def __init__(self, gamma, power=1., **kwargs):
        self.gamma = gamma
        self.power = power
        super().__init__(**kwargs)

    def get_lr(self, runner, base_lr):
        progress, _ = self.get_progress(runner)
        return base_lr * (1 + self.gamma * progress)**(-self.power)


def schedule_hook_cfg(config, suffix, what):
    """``config`` with a ``policy`` -> the ``<Policy><suffix>`` hook's config, mmcv's way.

    As mmcv's ``register_lr_hook`` / ``register_momentum_hook``: an all-lower-case policy is
    title-cased ('step' -> 'Step', 'onecycle' -> 'Onecycle'), a policy with capitals is kept
    ('CosineAnnealing', 'OneCycle'). A policy whose name is not registered is then matched
    case-insensitively ('onecycle' -> 'OneCycle'), which mmcv did not do. A dict with a
    ``type`` and no ``policy`` is returned as it is.
    """
    if not isinstance(config, dict):
        raise TypeError(f'{what} must be a dict, a Hook or None, got {config!r}')
    cfg = dict(config)
    if 'policy' not in cfg:
        if 'type' in cfg:
            return cfg
        raise KeyError(f'{what} needs a "policy" key, got keys {sorted(cfg)}')
    policy = cfg.pop('policy')
    if not isinstance(policy, str) or not policy:
        raise TypeError(f'{what} policy must be a non-empty str, got {policy!r}')
    name = (policy.title() if policy == policy.lower() else policy) + suffix
    allowed = sorted(n for n in HOOKS.module_dict if n.endswith(suffix) and n != suffix)
    if name not in HOOKS.module_dict:
        matches = [n for n in allowed if n.lower() == name.lower()]
        if not matches:
            policies = ', '.join(n[:-len(suffix)] for n in allowed)
            raise ValueError(f'unknown {what} policy {policy!r}: allowed are {policies} '
                             f'(any case), giving {", ".join(allowed)}')
        name = matches[0]
    cfg['type'] = name
    return cfg


def build_schedule_hook(config, suffix, what):
    """The hook of :func:`schedule_hook_cfg`; None gives None, a hook is returned as is."""
    if config is None or isinstance(config, Hook):
        return config
    return HOOKS.build(schedule_hook_cfg(config, suffix, what))


def build_lr_hook(lr_config):
    """The lr hook for an mmcv ``lr_config``: ``policy='step'`` -> ``StepLrUpdaterHook``
    (see :func:`build_schedule_hook`)."""
    return build_schedule_hook(lr_config, 'LrUpdaterHook', 'lr_config')
