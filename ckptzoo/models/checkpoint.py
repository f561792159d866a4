"""The one wrapper over ``torch.utils.checkpoint`` that every ``with_cp`` block uses.

Why a wrapper and not ``torch.utils.checkpoint.checkpoint`` directly:

* **The guard.** Checkpointing pays off only when a gradient will flow. Under ``no_grad``, in
  ``eval()``, or with nothing to differentiate, the block runs plainly (no recompute, no
  warning). With the reentrant implementation a gradient flows only through inputs that require
  grad (the seeds' ``x.requires_grad`` check); the non-reentrant one also reaches the block's own
  parameters, so a frozen stem feeding a trainable stage is checkpointed too.
* **No warnings.** ``use_reentrant`` is always passed explicitly (non-reentrant by default).
* **RNG.** ``preserve_rng_state=True`` by default, so dropout / drop path recompute identically.
* **BatchNorm.** torch recomputes BN in training mode, so ``running_mean``, ``running_var`` and
  ``num_batches_tracked`` are updated a second time in backward (torch 2.14.1, both
  implementations). The recompute here leaves the buffers as the forward pass left them, and runs
  every submodule in the train/eval mode it had in the forward pass.
"""
from contextlib import contextmanager

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils import checkpoint as torch_cp

__all__ = ['checkpoint', 'checkpoint_sequential', 'should_checkpoint', 'per_stage_flags']


def _owner(function):
    if isinstance(function, nn.Module):
        return function
    owner = getattr(function, '__self__', None)
    return owner if isinstance(owner, nn.Module) else None


def _modules(module):
    """``module`` as a list: one module, a list of modules, or None."""
    if module is None:
        return []
    return [module] if isinstance(module, nn.Module) else list(module)


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensors(a)


def should_checkpoint(args, module=None, use_reentrant=False):
    """True when checkpointing can save memory without losing a gradient."""
    modules = _modules(module)
    if not torch.is_grad_enabled():
        return False
    if modules and not any(m.training for m in modules):
        return False
    if any(t.requires_grad for t in _tensors(args)):
        return True
    if use_reentrant:
        # reentrant checkpoint gives parameters no gradient when no input requires grad
        return False
    return any(p.requires_grad for m in modules for p in m.parameters())


@contextmanager
def _as_in_forward(modes, norms):
    """Restore the forward pass's train/eval modes; keep BN's running statistics unchanged.

    BN still runs with its buffers (so the recompute saves the same tensors as the forward),
    but with momentum 0, which leaves ``running_mean`` / ``running_var`` bit-identical, and
    ``num_batches_tracked`` is put back afterwards.
    """
    now = [(m, m.training) for m, _ in modes]
    saved = [(m, m.momentum, None if m.num_batches_tracked is None
              else m.num_batches_tracked.clone()) for m in norms]
    try:
        for m, training in modes:
            m.training = training
        for m in norms:
            m.momentum = 0.0
        yield
    finally:
        for m, training in now:
            m.training = training
        for m, momentum, tracked in saved:
            m.momentum = momentum
            if tracked is not None:
                m.num_batches_tracked.copy_(tracked)


class _Recompute:
    """Runs ``function`` plainly the first time, BN-safely every later (recompute) time."""

    def __init__(self, function, module):
        self.function = function
        self.calls = 0
        subs = [sub for m in _modules(module) for sub in m.modules()]
        self.modes = [(m, m.training) for m in subs]
        self.norms = [m for m in subs if isinstance(m, _BatchNorm)
                      and m.training and m.track_running_stats]

    def __call__(self, *args):
        self.calls += 1
        if self.calls == 1:
            return self.function(*args)
        with _as_in_forward(self.modes, self.norms):
            return self.function(*args)


def checkpoint(function, *args, use_reentrant=False, preserve_rng_state=True, module=None):
    """Checkpoint ``function(*args)`` when a gradient can flow, else call it plainly.

    Args:
        function: the block's inner forward; a module or a bound method of one, or any callable
            together with ``module``.
        use_reentrant (bool): torch's reentrant implementation instead of the default
            non-reentrant one. Backbones expose it as ``cp_use_reentrant``.
        preserve_rng_state (bool): replay the RNG in the recompute (dropout, drop path).
        module (nn.Module or list of them, optional): the modules whose parameters and
            BatchNorms ``function`` uses; found from ``function`` when it is a module or a
            bound method. Without it, only inputs decide and BN is not protected.
    """
    module = module if module is not None else _owner(function)
    if not should_checkpoint(args, module, use_reentrant):
        return function(*args)
    return torch_cp.checkpoint(_Recompute(function, module), *args,
                               use_reentrant=use_reentrant,
                               preserve_rng_state=preserve_rng_state)


def checkpoint_sequential(functions, segments, input, use_reentrant=False,
                          preserve_rng_state=True):
    """Run ``functions`` (an ``nn.Sequential`` or a list of modules) in ``segments`` chunks.

    As ``torch.utils.checkpoint.checkpoint_sequential``: every segment but the last is
    checkpointed (the last one's activations are needed at once by backward anyway), each
    through :func:`checkpoint` and so with its guard and BN handling.
    """
    functions = list(functions.children()) if isinstance(functions, nn.Sequential) \
        else list(functions)
    if not isinstance(segments, int) or not 1 <= segments <= max(len(functions), 1):
        raise ValueError(f'segments must be an int in [1, {len(functions)}], got {segments!r}')
    size = len(functions) // segments
    bounds = [i * size for i in range(segments)] + [len(functions)]
    chunks = [nn.Sequential(*functions[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    for chunk in chunks[:-1]:
        input = checkpoint(chunk, input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve_rng_state)
    return chunks[-1](input) if chunks else input


def per_stage_flags(value, num, name='with_cp', unit='stage'):
    """``with_cp`` as one bool per stage: a bool for all, or a tuple of ``num`` bools."""
    if isinstance(value, bool):
        return (value, ) * num
    if isinstance(value, (list, tuple)) and len(value) == num \
            and all(isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f'{name} must be a bool or a tuple of {num} bools (one per {unit}), '
                     f'got {value!r}')
