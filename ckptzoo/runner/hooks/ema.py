"""Exponential moving average of the weights: mmcv 1.x's ``EMAHook`` and mmdet 2.x's
``ExpMomentumEMAHook`` / ``LinearMomentumEMAHook``, with their names and arguments.

As upstream, the average lives in model buffers ``ema_<name with . replaced by _>`` (so it is
in every checkpoint's ``state_dict`` under mmdet's keys) and ``ema = (1 - m) * ema + m * w``;
at the end of a training epoch the model and the average swap places, so evaluation and the
epoch's checkpoint use the EMA weights, and they swap back before the next epoch.

Fixes over upstream:

* one update per *optimizer step*, not per iteration: with ``cumulative_iters`` or a skipped
  fp16 step (inf/nan gradients) the weights did not change, so the average does not move. The
  signal is ``torch.optim.Optimizer.register_step_post_hook``: it fires exactly when
  ``optimizer.step()`` ran (GradScaler skips that call on overflow). ``interval`` and the
  momentum schedule count optimizer steps;
* resuming (``resume_from`` in the config or ``--resume-from``) restores the average: upstream
  created the buffers after the checkpoint was loaded, dropping them. The number of steps and
  whether the checkpoint holds the swapped weights go to ``meta['ema']``, so a run resumed at
  any iteration continues bit-identically;
* with iteration-based evaluation (``IterBasedRunner``, or ``evaluation.by_epoch=False``) the
  EMA weights are swapped in for the iterations where an ``EvalHook`` evaluates (upstream
  evaluated the raw weights there);
* ``momentum=1`` is allowed (the average is the model).

On resume the ``ema_*`` buffers do not exist yet when the weights load: the runner leaves
those keys to the hook (``restores_state_key``), which restores them from the same checkpoint.

Register with a priority above ``NORMAL`` (mmdet's YOLOX configs use ``priority=49``) so that
the epoch checkpoint, written by the ``CheckpointHook`` at ``NORMAL``, holds the EMA weights.
"""
import math
import warnings

from ...registry import HOOKS
from ..utils import unwrap_model
from .hook import Hook

__all__ = ['BaseEMAHook', 'EMAHook', 'ExpMomentumEMAHook', 'LinearMomentumEMAHook']


def _check_momentum(momentum):
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) \
            or not 0 < momentum <= 1:
        raise ValueError(f'momentum must be a float in (0, 1], got {momentum!r}')


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be a positive int, got {value!r}')


class BaseEMAHook(Hook):
    """mmdet 2.x's ``BaseEMAHook``.

    Args:
        momentum (float): weight of the new weights in each update, in (0, 1].
        interval (int): update every ``interval`` optimizer steps.
        skip_buffers (bool): average only the parameters; by default the float buffers too
            (BatchNorm running statistics), as mmdet.
        resume_from (str | None): resume the whole run from this checkpoint when training
            starts (mmdet's argument; ``resume_from`` in the config does the same earlier).
        momentum_fun (callable | None): ``momentum_fun(step)`` for the 0-based optimizer step.
    """

    def __init__(self, momentum=0.0002, interval=1, skip_buffers=False, resume_from=None,
                 momentum_fun=None):
        _check_momentum(momentum)
        _check_positive_int('interval', interval)
        if momentum_fun is not None and not callable(momentum_fun):
            raise TypeError(f'momentum_fun must be callable or None, got {momentum_fun!r}')
        self.momentum = momentum
        self.interval = interval
        self.skip_buffers = skip_buffers
        self.checkpoint = resume_from
        self.momentum_fun = momentum_fun
        self.steps = 0  # optimizer steps taken so far (the checkpoint's meta['ema']['steps'])
        self.swapped = False  # the model holds the EMA weights, the buffers the raw ones
        self.model_parameters = None
        self._stepped = False
        self._handles = []

    # -- the average ------------------------------------------------------------------------
    def _attach(self, model):
        """Create the ``ema_*`` buffers (once), initialised from the current weights."""
        if self.model_parameters is not None:
            return
        if self.skip_buffers:
            named = dict(model.named_parameters())
        else:
            named = model.state_dict(keep_vars=True)
        self.model_parameters = {}
        self.param_ema_buffer = {}
        for name, value in named.items():
            if not value.dtype.is_floating_point or name.startswith('ema_'):
                continue  # num_batches_tracked; the averages themselves
            buffer_name = f"ema_{name.replace('.', '_')}"
            if buffer_name not in dict(model.named_buffers()):
                model.register_buffer(buffer_name, value.detach().clone())
            self.model_parameters[name] = value
            self.param_ema_buffer[name] = buffer_name
        self.model_buffers = dict(model.named_buffers())

    def get_momentum(self, step):
        return self.momentum_fun(step) if self.momentum_fun else self.momentum

    def is_update_step(self, step):
        return (step + 1) % self.interval == 0

    def _update(self, momentum):
        for name, value in self.model_parameters.items():
            ema = self.model_buffers[self.param_ema_buffer[name]]
            ema.mul_(1 - momentum).add_(value.detach(), alpha=momentum)

    def _swap_ema_parameters(self):
        for name, value in self.model_parameters.items():
            ema = self.model_buffers[self.param_ema_buffer[name]]
            tmp = value.detach().clone()
            value.data.copy_(ema)
            ema.copy_(tmp)
        self.swapped = not self.swapped

    def _use(self, ema):
        if self.swapped != ema:
            self._swap_ema_parameters()

    # -- runner stages ----------------------------------------------------------------------
    def before_run(self, runner):
        self._attach(unwrap_model(runner.model))
        optimizers = runner.optimizer.values() if isinstance(runner.optimizer, dict) \
            else [runner.optimizer]
        self._handles = [optim.register_step_post_hook(self._on_step)
                         for optim in optimizers if optim is not None]
        if self.checkpoint is not None:
            runner.resume(self.checkpoint)

    def _on_step(self, optimizer, args, kwargs):
        self._stepped = True

    def before_train_iter(self, runner):
        self._use(ema=False)

    def after_train_iter(self, runner):
        if self._stepped:
            self._stepped = False
            step = self.steps
            self.steps += 1
            if self.is_update_step(step):
                self._update(self.get_momentum(step))
        if self._evaluates_now(runner):
            self._use(ema=True)

    @staticmethod
    def _evaluates_now(runner):
        from .evaluation import EvalHook
        return any(isinstance(hook, EvalHook) and not hook.by_epoch
                   and hook._should_evaluate(runner) for hook in runner.hooks)

    def before_train_epoch(self, runner):
        self._use(ema=False)

    def after_train_epoch(self, runner):
        self._use(ema=True)

    def after_run(self, runner):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def before_save_checkpoint(self, runner, checkpoint):
        checkpoint.setdefault('meta', {})['ema'] = dict(steps=self.steps, swapped=self.swapped)

    @staticmethod
    def restores_state_key(key):
        """The checkpoint keys this hook restores in ``after_load_checkpoint``, not the
        runner's weight loading (which would find no such buffer in the model yet)."""
        return key.startswith('ema_')

    def after_load_checkpoint(self, runner, checkpoint):
        model = unwrap_model(runner.model)
        self._attach(model)
        state = checkpoint.get('state_dict', {})
        state = {k[len('module.'):] if k.startswith('module.') else k: v
                 for k, v in state.items()}
        missing = [b for b in self.param_ema_buffer.values() if b not in state]
        for name, buffer_name in self.param_ema_buffer.items():
            if buffer_name in state:
                self.model_buffers[buffer_name].copy_(state[buffer_name])
            else:  # a checkpoint of a run without EMA: start the average at its weights
                self.model_buffers[buffer_name].copy_(self.model_parameters[name].detach())
        if missing:
            warnings.warn(f'the checkpoint has no EMA weights ({missing[0]}, ...): the '
                          'average starts from its weights', UserWarning)
        info = checkpoint.get('meta', {}).get('ema')
        if info is None:  # an mmdet checkpoint: swapped at the end of each epoch
            info = dict(steps=checkpoint.get('meta', {}).get('iter', 0),
                        swapped=not missing and getattr(runner, 'by_epoch', False)
                        and checkpoint.get('meta', {}).get('inner_iter', 0) == 0)
        self.steps = info['steps']
        self.swapped = bool(info['swapped'])
        self._stepped = False


@HOOKS.register_module()
class ExpMomentumEMAHook(BaseEMAHook):
    """mmdet 2.x: ``momentum(step) = (1 - momentum) * exp(-(1 + step) / total_iter) +
    momentum``, so the average follows the weights closely early in training."""

    def __init__(self, total_iter=2000, **kwargs):
        super().__init__(**kwargs)
        _check_positive_int('total_iter', total_iter)
        self.total_iter = total_iter
        self.momentum_fun = lambda x: (1 - self.momentum) * math.exp(
            -(1 + x) / self.total_iter) + self.momentum


@HOOKS.register_module()
class LinearMomentumEMAHook(BaseEMAHook):
    """mmdet 2.x: ``momentum(step) = min(momentum ** interval, (1 + step) / (warm_up + step))``."""

    def __init__(self, warm_up=100, **kwargs):
        super().__init__(**kwargs)
        _check_positive_int('warm_up', warm_up)
        self.warm_up = warm_up
        self.momentum_fun = lambda x: min(self.momentum ** self.interval,
                                          (1 + x) / (self.warm_up + x))


@HOOKS.register_module()
class EMAHook(BaseEMAHook):
    """mmcv 1.x's ``EMAHook(momentum=0.0002, interval=1, warm_up=100, resume_from=None)``:
    parameters only, ``momentum(step) = min(momentum ** interval, (1 + step) / (warm_up +
    step))``, updated at steps 0, interval, 2 * interval, ..."""

    def __init__(self, momentum=0.0002, interval=1, warm_up=100, resume_from=None):
        super().__init__(momentum=momentum, interval=interval, skip_buffers=True,
                         resume_from=resume_from)
        _check_positive_int('warm_up', warm_up)
        self.warm_up = warm_up
        self.momentum_fun = lambda x: min(self.momentum ** self.interval,
                                          (1 + x) / (self.warm_up + x))

    def is_update_step(self, step):
        return step % self.interval == 0
