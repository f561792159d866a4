"""The one wrapper over ``torch.utils.checkpoint`` that every checkpoint unit runs through.

Modes (:data:`MODES`):

* ``'full'``: the region keeps only its inputs; everything is recomputed in backward.
* ``'selective'``: the outputs of convolutions (deformable ones too) and matrix products are
  kept, the cheap ops between them (norms, activations, concatenations, pointwise ops) are
  recomputed
  (``torch.utils.checkpoint.create_selective_checkpoint_contexts`` with :func:`selective_policy`;
  non-reentrant only). The kept outputs are cached outside saved-tensor hooks: measure this mode
  with live tensor storage (:class:`ckptzoo.memory.measure.trackers.LiveTensorTracker`), not with hooks.
  A unit that is a chain norm-activation-conv may implement it as one ``'full'`` checkpoint per
  norm-activation-conv instead (each keeps its input, a conv output; the non-reentrant recompute
  stops before the conv): the same tensors kept and recomputed, without the policy's per-op
  Python dispatch (DenseNet's dense layers do).
* ``'offload'``: nothing is recomputed; the tensors the region saves for backward are moved to
  CPU memory (pinned on CUDA) and brought back in backward
  (``torch.autograd.graph.save_on_cpu``). On CPU tensors it moves nothing and warns once.

Why a wrapper and not ``torch.utils.checkpoint.checkpoint`` directly:

* **The guard.** Checkpointing pays off only when a gradient will flow. Under ``no_grad``, in
  ``eval()``, or with nothing to differentiate, the region runs plainly (no recompute, no
  warning). With the reentrant implementation a gradient flows only through inputs that require
  grad (mmdet's ``x.requires_grad`` check); the non-reentrant one also reaches the region's own
  parameters, so a frozen stem feeding a trainable stage is checkpointed too.
* **No warnings.** ``use_reentrant`` is always passed explicitly (non-reentrant by default).
* **RNG.** ``preserve_rng_state=True`` by default, so dropout / drop path recompute identically.
* **BatchNorm.** torch recomputes BN in training mode, so ``running_mean``, ``running_var`` and
  ``num_batches_tracked`` are updated a second time in backward (torch 2.14.1, both
  implementations). The recompute here leaves the buffers as the forward pass left them, and runs
  every submodule in the train/eval mode it had in the forward pass.
"""
import functools
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils import checkpoint as torch_cp
from torch.utils._pytree import tree_flatten, tree_unflatten
import torchvision  # noqa: F401  (loads torch.ops.torchvision: its deform_conv2d below)

from ...utils.nested import iter_tensors
from .observers import _observers, observed

__all__ = ['MODES', 'checkpoint', 'checkpoint_sequential', 'should_checkpoint',
           'per_stage_flags', 'selective_policy', 'selective_context', 'check_mode']

#: one module, a list of modules, or None: the modules whose parameters and BatchNorms a
#: checkpointed region uses
Modules = Union[nn.Module, Sequence[nn.Module], None]

#: the modes of a checkpoint unit; ``None`` runs it plainly
MODES = (None, 'full', 'selective', 'offload')

_aten = torch.ops.aten
#: ops whose outputs ``'selective'`` keeps: the expensive ones (convolutions, matrix products)
SAVED_OPS = frozenset([
    _aten.convolution.default, _aten.mm.default, _aten.addmm.default, _aten.bmm.default,
    _aten.baddbmm.default, _aten._scaled_dot_product_flash_attention.default,
    _aten._scaled_dot_product_efficient_attention.default,
    _aten._scaled_dot_product_flash_attention_for_cpu.default,
])
# deformable convolutions (ckptzoo.ops' DCN / DCNv2 run torchvision's op): kept as convolutions
SAVED_OPS |= {torch.ops.torchvision.deform_conv2d.default}


def check_mode(mode: Optional[str], use_reentrant: bool = False,
               where: str = 'mode') -> Optional[str]:
    """``mode`` if it is one of :data:`MODES`, else a ValueError listing them."""
    if mode not in MODES:
        raise ValueError(f'unknown checkpoint {where} {mode!r}: allowed are '
                         f'{", ".join(map(repr, MODES))}')
    if mode == 'selective' and use_reentrant:
        raise ValueError(f"checkpoint {where} 'selective' needs the non-reentrant implementation"
                         ': set cp_use_reentrant=False (the default)')
    return mode


def selective_policy(ctx: Any, func: Any, *args: Any,
                     **kwargs: Any) -> 'torch_cp.CheckpointPolicy':
    """Keep convolution / matmul outputs, recompute every other op."""
    if func in SAVED_OPS:
        return torch_cp.CheckpointPolicy.MUST_SAVE
    return torch_cp.CheckpointPolicy.PREFER_RECOMPUTE


#: the ``context_fn`` of a selective checkpoint with :func:`selective_policy`
selective_context = functools.partial(torch_cp.create_selective_checkpoint_contexts,
                                      selective_policy)


def _owner(function):
    if isinstance(function, nn.Module):
        return function
    owner = getattr(function, '__self__', None)
    if owner is None and isinstance(function, functools.partial):
        return _owner(function.func)
    return owner if isinstance(owner, nn.Module) else None


def _modules(module):
    """``module`` as a list: one module, a list of modules, or None."""
    if module is None:
        return []
    return [module] if isinstance(module, nn.Module) else list(module)


def should_checkpoint(args: Sequence, module: Modules = None, use_reentrant: bool = False) -> bool:
    """True when checkpointing can save memory without losing a gradient."""
    modules = _modules(module)
    if not torch.is_grad_enabled():
        return False
    if modules and not any(m.training for m in modules):
        return False
    if any(t.requires_grad for t in iter_tensors(args)):
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
    without ``num_batches_tracked`` (None: BN skips counting), which leaves it unchanged. No
    tensor op runs here: a selective checkpoint replays the forward's ops one for one and
    allows no extra ones.
    """
    now = [(m, m.training) for m, _ in modes]
    saved = [(m, m.momentum, m._buffers.get('num_batches_tracked')) for m in norms]
    try:
        for m, training in modes:
            m.training = training
        for m, _, tracked in saved:
            m.momentum = 0.0
            if tracked is not None:
                m._buffers['num_batches_tracked'] = None
        yield
    finally:
        for m, training in now:
            m.training = training
        for m, momentum, tracked in saved:
            m.momentum = momentum
            if tracked is not None:
                m._buffers['num_batches_tracked'] = tracked


@contextmanager
def _out_of_place(modules):
    """In-place activations (``nn.ReLU(inplace=True)``, ...) run out of place: a selective
    checkpoint refuses a kept conv output that an activation then overwrites. Same values."""
    for m in modules:
        m.inplace = False
    try:
        yield
    finally:
        for m in modules:
            m.inplace = True


def _submodules(modules):
    """Every module in ``modules`` and below, once each (``Module.modules()`` without its
    per-module name strings: this runs at every checkpointed call)."""
    out, seen, stack = [], set(), list(reversed(modules))
    while stack:
        m = stack.pop()
        if id(m) not in seen:
            seen.add(id(m))
            out.append(m)
            stack.extend(reversed([c for c in m._modules.values() if c is not None]))
    return out


class _Recompute:
    """Runs ``function`` plainly the first time, BN-safely every later (recompute) time;
    with ``selective``, in-place activations run out of place both times."""

    def __init__(self, function, module, selective=False):
        self.function = function
        self.calls = 0
        subs = _submodules(_modules(module))
        self.inplace = [m for m in subs if getattr(m, 'inplace', None) is True] \
            if selective else []
        self.modes = [(m, m.training) for m in subs]
        # the BNs that update running statistics in the forward pass
        self.norms = [m for m in subs if isinstance(m, _BatchNorm)
                      and m.training and m.track_running_stats]

    def __call__(self, *args):
        self.calls += 1
        if _observers:
            run = functools.partial(self._run, *args)
            return observed('region_call', run, self, self.calls > 1)
        return self._run(*args)

    def _run(self, *args):
        with _out_of_place(self.inplace):
            if self.calls == 1:
                return self.function(*args)
            with _as_in_forward(self.modes, self.norms):
                return self.function(*args)


_warned = set()


def _warn_once(key, message):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _offload(function, args, name):
    if not any(t.device.type == 'cuda' for t in iter_tensors(args)):
        _warn_once('offload-cpu', f"checkpoint mode 'offload' ({name or 'a unit'}) has nothing "
                   'to offload: its tensors are already in CPU memory (warned once)')
    with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
        return function(*args)


def checkpoint(function: Callable, *args: Any, mode: Optional[str] = 'full',
               use_reentrant: bool = False, preserve_rng_state: bool = True,
               module: Modules = None, name: Optional[str] = None) -> Any:
    """Run ``function(*args)`` under ``mode`` when a gradient can flow, else plainly.

    Args:
        function: the region's forward; a module or a bound method of one (or a
            ``functools.partial`` of one), or any callable together with ``module``.
        mode (str | None): one of :data:`MODES`; None runs ``function`` plainly.
        use_reentrant (bool): torch's reentrant implementation instead of the default
            non-reentrant one (``'full'`` only). Backbones expose it as ``cp_use_reentrant``.
        preserve_rng_state (bool): replay the RNG in the recompute (dropout, drop path).
        module (nn.Module or list of them, optional): the modules whose parameters and
            BatchNorms ``function`` uses; found from ``function`` when it is a module or a
            bound method. Without it, only inputs decide and BN is not protected.
        name (str, optional): the unit's name, for messages.
    """
    check_mode(mode, use_reentrant)
    if mode is None:
        return function(*args)
    module = module if module is not None else _owner(function)
    if not should_checkpoint(args, module, use_reentrant):
        return function(*args)
    if mode == 'offload':
        return _offload(function, args, name)
    kwargs = dict(use_reentrant=use_reentrant, preserve_rng_state=preserve_rng_state)
    if mode == 'selective':
        kwargs['context_fn'] = selective_context
    recompute = _Recompute(function, module, mode == 'selective')
    if not use_reentrant:
        return torch_cp.checkpoint(recompute, *args, **kwargs)
    # the reentrant implementation is an autograd Function: only the tensors at the top of its
    # output get a gradient, so nested outputs (SABL's (cls_score, (bucket_cls, offsets)))
    # travel flattened and are rebuilt
    spec = []

    def flat(*inputs):
        leaves, tree = tree_flatten(recompute(*inputs))
        spec[:] = [tree]
        return tuple(leaves)

    leaves = torch_cp.checkpoint(flat, *args, **kwargs)
    return tree_unflatten(list(leaves), spec[0])


def checkpoint_sequential(functions: Union[nn.Sequential, Sequence[nn.Module]], segments: int,
                          input: torch.Tensor, use_reentrant: bool = False,
                          preserve_rng_state: bool = True) -> torch.Tensor:
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


def per_stage_flags(value: Union[bool, Sequence[bool]], num: int, name: str = 'with_cp',
                    unit: str = 'stage') -> Tuple[bool, ...]:
    """``with_cp`` as one bool per stage: a bool for all, or a tuple of ``num`` bools."""
    if isinstance(value, bool):
        return (value, ) * num
    if isinstance(value, (list, tuple)) and len(value) == num \
            and all(isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f'{name} must be a bool or a tuple of {num} bools (one per {unit}), '
                     f'got {value!r}')
