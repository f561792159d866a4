"""The optimizer hooks of mmcv 1.x: plain, FP16 loss scaling, gradient accumulation, both.

All four share one step routine (:meth:`OptimizerHook._step`): backward of the (scaled,
divided) loss every iteration; on a stepping iteration unscale, clip, step, update the scale,
zero the gradients. They differ only in three small answers: the loss scaler (none, or a
``torch.amp.GradScaler``), the loss divisor and whether this iteration steps.

Gradient accumulation counts from the *global* ``runner.iter`` / ``runner.max_iters``, so it is
right after a resume at any iteration: with ``k = cumulative_iters``,
``divisible = max_iters // k * k`` and ``remainder = max_iters - divisible``, the loss is divided
by ``k`` before ``divisible`` and by ``remainder`` from there, and the optimizer steps when
``(iter + 1) % k == 0`` or at the last iteration. A checkpoint saved inside a window carries the
gradients accumulated so far, so the resumed run steps with exactly the same gradients; it also
records the window (``cumulative_iters`` and the loss divisor), and a run resumed under another
window drops those gradients with a warning instead of mixing window sizes.

Non-finite numbers stop the run (``check_finite=True``, the default; mmcv 1.x trains on with
NaN): a non-finite loss before its backward, a non-finite gradient norm (when clipping, without
a loss scaler) before the step, non-finite weights before a checkpoint is written, and with
FP16 a dynamic loss scale below ``min_loss_scale`` or ``max_consecutive_skips`` overflowing
steps in a row. A single overflow that the loss scaler skips is normal and goes on.
"""
import logging
import math
import warnings

import torch
import torch.distributed as dist
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils import clip_grad_norm_

from ...registry import HOOKS
from ..finite import check_finite_loss, nonfinite_error, nonfinite_tensors
from ..fp16 import DTYPES, wrap_fp16_model
from ..utils import get_model_device, unwrap_model
from .hook import Hook

__all__ = ['OptimizerHook', 'Fp16OptimizerHook', 'GradientCumulativeOptimizerHook',
           'GradientCumulativeFp16OptimizerHook']

_SCALER_KEYS = ('init_scale', 'growth_factor', 'backoff_factor', 'growth_interval')


@HOOKS.register_module()
class OptimizerHook(Hook):
    """Backward and step every iteration.

    Args:
        grad_clip (dict, optional): ``clip_grad_norm_`` arguments, e.g.
            ``dict(max_norm=35, norm_type=2)``; the norm is logged as ``grad_norm``.
        detect_anomalous_params (bool): log the parameters that the loss does not reach
            (slow: for debugging DDP's "unused parameters" errors).
        check_finite (bool): raise ``FloatingPointError`` (naming the iteration, the non-finite
            loss terms and the newest checkpoint with finite weights) instead of training on
            with inf/nan; False keeps mmcv 1.x's behaviour.
    """

    loss_scaler = None
    cumulative_iters = 1

    def __init__(self, grad_clip=None, detect_anomalous_params=False, check_finite=True):
        if grad_clip is not None:
            if not isinstance(grad_clip, dict) or 'max_norm' not in grad_clip:
                raise ValueError('grad_clip must be None or a dict of clip_grad_norm_ arguments '
                                 f'with max_norm, got {grad_clip!r}')
        if not isinstance(check_finite, bool):
            raise TypeError(f'check_finite must be True or False, got {check_finite!r}')
        self.grad_clip = grad_clip
        self.detect_anomalous_params = detect_anomalous_params
        self.check_finite = check_finite
        self._pending_grads = None

    # -- the three answers subclasses change ------------------------------------------------
    def loss_factor(self, runner):
        return 1

    def is_step_iter(self, runner):
        return True

    def scale_loss(self, loss):
        return loss

    # -- the shared routine -----------------------------------------------------------------
    def before_run(self, runner):
        if isinstance(runner.optimizer, dict):
            raise TypeError(f'{type(self).__name__} takes one optimizer, got a dict of '
                            f'{list(runner.optimizer)}')
        runner.optimizer.zero_grad(set_to_none=True)
        if self._pending_grads:
            _set_grads(runner.model, self._pending_grads)
            self._pending_grads = None

    def after_train_iter(self, runner):
        self.backward_and_step(runner)

    def backward_and_step(self, runner, loss_factor=None, step=None):
        """Backward of ``runner.outputs['loss']`` divided by ``loss_factor`` and, when ``step``,
        the step routine; None takes them from the runner's position (:meth:`loss_factor`,
        :meth:`is_step_iter`). The way to step on demand outside the training loop: the memory
        planner's probe steps pass ``cumulative_iters`` and True, so that every probe step
        steps as a window's last iteration does, wherever the runner stands."""
        if self.check_finite:
            check_finite_loss(runner)
        loss = runner.outputs['loss']
        factor = self.loss_factor(runner) if loss_factor is None else loss_factor
        if factor != 1:
            loss = loss / factor
        if self.detect_anomalous_params:
            self._detect_anomalous_params(loss, runner)
        self.scale_loss(loss).backward()
        self._after_backward(runner)
        if self.is_step_iter(runner) if step is None else step:
            self._step(runner)

    def _after_backward(self, runner):
        pass

    def _step(self, runner):
        optimizer = runner.optimizer
        scaler = self.loss_scaler
        if self.grad_clip is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            grad_norm = self.clip_grads(runner.model.parameters())
            if grad_norm is not None:
                grad_norm = float(grad_norm)
                if self.check_finite and scaler is None and not math.isfinite(grad_norm):
                    optimizer.zero_grad(set_to_none=True)
                    raise nonfinite_error(runner, f'the gradient norm is {grad_norm} (the loss '
                                          'was finite; no optimizer step was taken)',
                                          'Lower the learning rate or look for an op without '
                                          'a finite gradient (sqrt or log at 0); ')
                runner.log_buffer.update({'grad_norm': grad_norm},
                                         runner.outputs.get('num_samples', 1))
        if scaler is not None:
            scaler.step(optimizer)  # skipped when a gradient is inf/nan
            skipped = bool(sum(v.item() for v in scaler._found_inf_per_device(optimizer)
                               .values()))
            self._update_scale()
            runner.log_buffer.update({'loss_scale': scaler.get_scale()})
            if runner.meta is None:
                runner.meta = {}
            state = runner.meta.setdefault('fp16', {})
            state['loss_scaler'] = scaler.state_dict()
            state['skipped_in_a_row'] = state.get('skipped_in_a_row', 0) + 1 if skipped else 0
            if self.check_finite:
                self._check_scale(runner, state['skipped_in_a_row'])
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def _update_scale(self):
        self.loss_scaler.update()

    def _check_scale(self, runner, skipped_in_a_row):
        pass

    def before_save_checkpoint(self, runner, checkpoint):
        if self.check_finite and not checkpoint['meta'].get('finite_weights', True):
            names = nonfinite_tensors(checkpoint['state_dict'])
            shown = ', '.join(names[:5]) + (f' and {len(names) - 5} more' if len(names) > 5
                                            else '')
            raise nonfinite_error(runner, f'the weights are not finite ({shown})',
                                  'Lower the learning rate or clip the gradients; ')

    def clip_grads(self, params):
        params = [p for p in params if p.requires_grad and p.grad is not None]
        if params:
            return clip_grad_norm_(params, **self.grad_clip)
        return None

    def _detect_anomalous_params(self, loss, runner):
        reached, todo, seen = set(), [loss.grad_fn], set()
        while todo:
            fn = todo.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            if hasattr(fn, 'variable'):
                reached.add(id(fn.variable))
            todo.extend(next_fn for next_fn, _ in fn.next_functions)
        for name, param in unwrap_model(runner.model).named_parameters():
            if param.requires_grad and id(param) not in reached:
                runner.logger.log(logging.ERROR, f'{name} with shape {tuple(param.size())} '
                                  'is not in the computational graph')


def _named_grads(model):
    return {name: p.grad.detach().clone()
            for name, p in unwrap_model(model).named_parameters() if p.grad is not None}


def _set_grads(model, grads):
    params = dict(unwrap_model(model).named_parameters())
    unknown = sorted(set(grads) - set(params))
    if unknown:
        raise KeyError(f'accumulated gradients for unknown parameters {unknown[:5]}')
    for name, grad in grads.items():
        params[name].grad = grad.to(params[name].device, params[name].dtype)


@HOOKS.register_module()
class GradientCumulativeOptimizerHook(OptimizerHook):
    """Step every ``cumulative_iters`` iterations, the loss divided as described above.

    Under ``DistributedDataParallel`` the iterations that do not step run forward and backward
    inside ``no_sync()``, entered before ``train_step``, so their gradients are not all-reduced.
    Learning-rate warmup and steps given in iterations count optimizer updates (see
    :mod:`ckptzoo.runner.hooks.lr_updater`).
    """

    def __init__(self, cumulative_iters=1, **kwargs):
        if isinstance(cumulative_iters, bool) or not isinstance(cumulative_iters, int) \
                or cumulative_iters < 1:
            raise ValueError('cumulative_iters must be a positive int, '
                             f'got {cumulative_iters!r}')
        super().__init__(**kwargs)
        self.cumulative_iters = cumulative_iters
        self._no_sync = None

    def loss_factor(self, runner):
        k = self.cumulative_iters
        divisible = runner.max_iters // k * k
        return k if runner.iter < divisible else runner.max_iters - divisible

    def is_step_iter(self, runner):
        return (runner.iter + 1) % self.cumulative_iters == 0 \
            or runner.iter + 1 == runner.max_iters

    def _divisor(self, runner, iteration):
        """The loss divisor of (0-based) ``iteration``."""
        k = self.cumulative_iters
        divisible = runner.max_iters // k * k
        return k if iteration < divisible else runner.max_iters - divisible

    def _check_window(self, runner):
        """Gradients accumulated under another window (another ``cumulative_iters``, or
        another loss divisor: another ``max_iters``) would mix window sizes: drop them."""
        stored, self._stored_window = self._stored_window, None
        if not self._pending_grads or not isinstance(stored, dict):
            return  # a checkpoint written before the window was stored: loads as it did
        now = dict(cumulative_iters=self.cumulative_iters,
                   loss_divisor=self._divisor(runner, runner.iter))
        if all(stored.get(key) == value for key, value in now.items()):
            return
        self._pending_grads = None
        self._window_dropped = True
        where = getattr(runner, 'resumed_from', None) or 'the checkpoint'
        warnings.warn(f'{where} holds gradients accumulated with cumulative_iters='
                      f'{stored.get("cumulative_iters")} (loss divided by '
                      f'{stored.get("loss_divisor")}); this run has cumulative_iters='
                      f'{now["cumulative_iters"]} (loss divided by {now["loss_divisor"]}) at '
                      f'iteration {runner.iter}: they are dropped rather than mixed into a window '
                      'of another size, and the accumulation window restarts (its first step '
                      'uses fewer iterations)', UserWarning)

    _stored_window = None
    _window_dropped = False

    def before_run(self, runner):
        self._check_window(runner)  # before the base class restores the pending gradients
        super().before_run(runner)
        self._norms_checked = False
        if runner.iter % self.cumulative_iters and not self._had_pending \
                and not self._window_dropped:
            warnings.warn(f'resumed at iteration {runner.iter}, inside an accumulation window '
                          f'of {self.cumulative_iters}, from a checkpoint without the '
                          'gradients accumulated before it: the first step uses fewer '
                          'iterations', UserWarning)

    _had_pending = False

    def _check_norms(self, runner):
        """Once, at the first training iteration (the runner has put the model in training
        mode, so ``norm_eval`` / frozen stages have set their BatchNorms to eval): warn of the
        BatchNorms that do train."""
        self._norms_checked = True
        norms = [name for name, m in unwrap_model(runner.model).named_modules()
                 if isinstance(m, _BatchNorm) and m.training]
        if norms and self.cumulative_iters > 1:
            shown = ', '.join(norms[:5]) + (f' and {len(norms) - 5} more' if len(norms) > 5
                                            else '')
            warnings.warn(f'{type(self).__name__}: the model has BatchNorm layers in training '
                          f'mode ({shown}); they see batches of samples_per_gpu, not '
                          f'samples_per_gpu x {self.cumulative_iters}, so accumulation is not '
                          'equivalent to the large batch for them', UserWarning)

    _norms_checked = True

    def before_train_iter(self, runner):
        if not self._norms_checked:
            self._check_norms(runner)
        model = runner.model
        if hasattr(model, 'no_sync') and not self.is_step_iter(runner):
            self._no_sync = model.no_sync()
            self._no_sync.__enter__()

    def _after_backward(self, runner):
        if self._no_sync is not None:
            self._no_sync.__exit__(None, None, None)
            self._no_sync = None

    def _inside_window(self, runner, iters):
        # also in a validation phase: the gradients of the open window are still there
        return iters % self.cumulative_iters and iters < runner.max_iters

    def gather_for_save(self, runner, iters):
        """Collective, on every rank before a checkpoint that rank 0 writes: gather each rank's
        accumulated gradients to rank 0 (they differ between ranks until the step, where DDP
        averages them), so that every rank resumes with its own."""
        self._gathered = None
        if runner.world_size == 1 or not self._inside_window(runner, iters):
            return
        grads = {k: v.cpu() for k, v in _named_grads(runner.model).items()}
        gathered = [None] * runner.world_size if runner.rank == 0 else None
        dist.gather_object(grads, gathered, dst=0)
        self._gathered = (iters, gathered)

    _gathered = None

    def before_save_checkpoint(self, runner, checkpoint):
        super().before_save_checkpoint(runner, checkpoint)
        # inside a window (not right after a step): keep what was accumulated
        iters = checkpoint['meta']['iter']
        gathered, self._gathered = self._gathered, None
        if not self._inside_window(runner, iters):
            return
        if runner.world_size == 1:
            checkpoint['accumulated_grads'] = _named_grads(runner.model)
        elif gathered is not None and gathered[0] == iters:
            checkpoint['accumulated_grads_per_rank'] = gathered[1]
        else:
            return
        # the window they belong to: a resume under another one drops them (_check_window)
        checkpoint['accumulation'] = dict(cumulative_iters=self.cumulative_iters,
                                          loss_divisor=self._divisor(runner, iters - 1))
        # else (a save on rank 0 alone, e.g. the best checkpoint): the other ranks' gradients
        # are unknown, and a resume from it warns that the window restarts

    def after_load_checkpoint(self, runner, checkpoint):
        grads = checkpoint.get('accumulated_grads')
        per_rank = checkpoint.get('accumulated_grads_per_rank')
        if per_rank is not None:
            if len(per_rank) == runner.world_size:
                grads = per_rank[runner.rank]
            else:
                warnings.warn(f'the checkpoint holds the accumulated gradients of '
                              f'{len(per_rank)} ranks, this run has {runner.world_size}: '
                              'they are not restored', UserWarning)
        self._pending_grads = grads
        self._stored_window = checkpoint.get('accumulation')
        self._had_pending = bool(grads) or checkpoint['meta']['iter'] % self.cumulative_iters == 0


@HOOKS.register_module()
class Fp16OptimizerHook(OptimizerHook):
    """Mixed precision: the model runs under ``torch.autocast`` (``wrap_fp16_model``), the loss
    is scaled by a ``torch.amp.GradScaler``, gradients are unscaled before clipping.

    Args:
        loss_scale (float | 'dynamic' | dict): a float is a static scale, which never changes
            (a step with inf/nan gradients is skipped); ``'dynamic'`` uses GradScaler's defaults;
            a dict gives GradScaler's ``init_scale``, ``growth_factor``, ``backoff_factor``,
            ``growth_interval`` (``mode='dynamic'`` accepted, as mmcv). Default 512.
        dtype (str): ``'float16'`` (default) or ``'bfloat16'``; bf16 needs no loss scaling.
        min_loss_scale (float | None): stop (``FloatingPointError``) when the dynamic scale falls
            below this: the gradients overflow even barely scaled. Default 1.0; None never.
        max_consecutive_skips (int | None): stop when this many optimizer steps in a row are
            skipped for inf/nan gradients (a static scale never falls). Default 50; None never.
        check_finite (bool): False turns these two checks off with the others (mmcv 1.x).
        coalesce, bucket_size_mb, distributed: accepted for mmcv configs; DDP does the gradient
            all-reduce here, so they change nothing.

    On a CPU, float16 autocast is much slower than float32 (17x for RetinaNet R50 in
    docs/benchmarks.md): ``before_run`` warns and suggests ``fp16 = dict(dtype='bfloat16')``.

    The scaler state lives in ``runner.meta['fp16']['loss_scaler']``, is saved with every
    checkpoint and restored on resume (both runners).
    """

    def __init__(self, grad_clip=None, coalesce=True, bucket_size_mb=-1, loss_scale=None,
                 distributed=True, dtype='float16', min_loss_scale=1.0, max_consecutive_skips=50,
                 **kwargs):
        super().__init__(grad_clip=grad_clip, **kwargs)
        if min_loss_scale is not None and (isinstance(min_loss_scale, bool) or not isinstance(
                min_loss_scale, (int, float)) or not min_loss_scale > 0):
            raise ValueError(f'min_loss_scale must be a positive number or None, '
                             f'got {min_loss_scale!r}')
        if max_consecutive_skips is not None and (
                isinstance(max_consecutive_skips, bool)
                or not isinstance(max_consecutive_skips, int) or max_consecutive_skips < 1):
            raise ValueError(f'max_consecutive_skips must be a positive int or None, '
                             f'got {max_consecutive_skips!r}')
        self.min_loss_scale = min_loss_scale
        self.max_consecutive_skips = max_consecutive_skips
        if dtype not in DTYPES and dtype not in DTYPES.values():
            raise ValueError(f'fp16 dtype must be one of {", ".join(DTYPES)}, got {dtype!r}')
        self.dtype = DTYPES.get(dtype, dtype)
        self._static_scale = None
        if self.dtype == torch.bfloat16:
            if loss_scale is not None:
                raise ValueError(f'bfloat16 needs no loss scaling: remove loss_scale '
                                 f'(got {loss_scale!r})')
            self._scaler_args = None
        else:
            self._scaler_args = self._parse_loss_scale(512. if loss_scale is None
                                                       else loss_scale)
        self.loss_scale = loss_scale

    def _parse_loss_scale(self, loss_scale):
        if isinstance(loss_scale, float):
            if not loss_scale > 0 or loss_scale == float('inf'):
                raise ValueError(f'a static loss_scale must be a positive finite float, '
                                 f'got {loss_scale!r}')
            self._static_scale = loss_scale
            return dict(init_scale=loss_scale)
        if loss_scale == 'dynamic':
            return {}
        if isinstance(loss_scale, dict):
            args = dict(loss_scale)
            mode = args.pop('mode', 'dynamic')
            if mode != 'dynamic':
                raise ValueError(f"loss_scale dict mode must be 'dynamic', got {mode!r}")
            unknown = sorted(set(args) - set(_SCALER_KEYS))
            if unknown:
                raise ValueError(f'unknown loss_scale keys {unknown}: allowed are '
                                 f'{", ".join(_SCALER_KEYS)} and mode')
            return args
        raise ValueError(f"loss_scale must be a float, 'dynamic' or a dict, got {loss_scale!r}")

    def before_run(self, runner):
        super().before_run(runner)
        wrap_fp16_model(runner.model, self.dtype)
        if self._scaler_args is None:
            return
        device = get_model_device(runner.model).type
        if device == 'cpu':
            msg = ('fp16 with float16 on a CPU runs many times slower than float32 (17x for '
                   'RetinaNet R50-FPN in docs/benchmarks.md): CPUs lack fast float16 kernels. '
                   "Use fp16 = dict(dtype='bfloat16') (no loss scale) or no fp16 on a CPU")
            warnings.warn(msg, UserWarning)
            runner.logger.warning(msg)
        self.loss_scaler = torch.amp.GradScaler(device, **self._scaler_args)
        state = (runner.meta or {}).get('fp16', {}).get('loss_scaler')
        if state:
            self.loss_scaler.load_state_dict(state)

    def scale_loss(self, loss):
        return loss if self.loss_scaler is None else self.loss_scaler.scale(loss)

    def _update_scale(self):
        if self._static_scale is None:
            self.loss_scaler.update()
        else:
            self.loss_scaler.update(self._static_scale)

    def _check_scale(self, runner, skipped_in_a_row):
        scale = self.loss_scaler.get_scale()
        if self._static_scale is None and self.min_loss_scale is not None \
                and scale < self.min_loss_scale:
            what = (f'fp16: the dynamic loss scale fell to {scale:g}, below min_loss_scale='
                    f'{self.min_loss_scale:g}, after {skipped_in_a_row} optimizer steps in a '
                    'row were skipped for inf/nan gradients')
        elif self.max_consecutive_skips is not None \
                and skipped_in_a_row >= self.max_consecutive_skips:
            what = (f'fp16: {skipped_in_a_row} optimizer steps in a row were skipped for '
                    f'inf/nan gradients (max_consecutive_skips={self.max_consecutive_skips}, '
                    f'loss scale {scale:g})')
        else:
            return
        raise nonfinite_error(
            runner, what, "The gradients overflow float16: train in bfloat16 (fp16 = "
            "dict(dtype='bfloat16')), or with a static loss scale (fp16 = dict(loss_scale="
            "512.), lower if it overflows), or with a lower learning rate; ")


@HOOKS.register_module()
class GradientCumulativeFp16OptimizerHook(GradientCumulativeOptimizerHook, Fp16OptimizerHook):
    """FP16 loss scaling and gradient accumulation together (mmdet 2.x cannot combine them).
    The accumulated gradients are scaled ones; the scale changes only at a step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
