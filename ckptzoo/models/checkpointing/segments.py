"""Segments: several consecutive checkpoint units under one ``'full'`` checkpoint.

Per-unit checkpointing keeps every unit's input; a segment keeps only the inputs of its first
unit (and the tensors it takes from outside), so the boundaries between its units are
recomputed instead of kept.

An owner runs its units as a *chain*: a list of :class:`ChainStep`, each a function
``fn(state, *args) -> (state, out)`` of the state the previous step left (a tensor, a list or
tuple of tensors, or None) and of tensors from outside the chain (``args``, e.g. an FPN level's
backbone feature). ``out`` is what leaves the chain at that step (a ResNet stage output, an FPN
level's output) or None. :func:`run_chain` runs the steps one by one, except that each segment
in force (``{first step name: last step name}``) runs as one
:func:`~ckptzoo.models.checkpointing.functional.checkpoint` (guard, RNG, BN-safe recompute)
in which the steps' own units run plainly. A segment returns only the tensors it made: the
state it leaves and the ``out`` of each of its steps.
"""
import threading
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from .functional import checkpoint

if TYPE_CHECKING:
    from .plan import CheckpointUnit

__all__ = ['ChainStep', 'chain_step', 'unit_step', 'chain_and_rest', 'run_chain',
           'inside_segment']


class ChainStep(NamedTuple):
    """One checkpoint unit of an owner's chain, and how to run it.

    ``fn(state, *args)`` returns ``(state, out)``; ``module``: the module(s) whose parameters
    and BatchNorms ``fn`` uses; ``args``: tensors from outside the chain (an FPN level's
    backbone feature); ``leaves``: the step's output also leaves the chain before its end (a
    stage output, or a dense layer's feature kept in the state to its block's end), so a
    segment that ends after it returns it too.
    """

    name: str
    unit: 'CheckpointUnit'
    fn: Callable[..., tuple]
    module: Any
    args: tuple = ()
    leaves: bool = False


_local = threading.local()


def _call_step(call, emit, state, *args):
    state = call(state, *args)
    return state, (state if emit else None)


def chain_step(name: str, unit: 'CheckpointUnit', call: Callable, module: Any,
               emit: bool = False, args: tuple = ()) -> ChainStep:
    """The common step: ``state = call(state, *args)``, which also leaves the chain when
    ``emit`` (a stage output)."""
    return ChainStep(name, unit, partial(_call_step, call, emit), module, args, emit)


def unit_step(name: str, unit: 'CheckpointUnit', function: Callable, module: Any = None,
              emit: bool = False) -> ChainStep:
    """A step that runs ``function`` through its unit: ``state = unit(function, state)``;
    ``module`` defaults to ``function`` (a module)."""
    module = function if module is None else module
    return chain_step(name, unit, partial(unit, function, module=module), module, emit)


def chain_and_rest(steps: List[ChainStep], stop: int) -> List[List[ChainStep]]:
    """``steps[:stop]`` as the chain the forward runs, then each later step alone: units that
    this configuration never runs (past the last output taken), listed so that plans may name
    them and no segment may include them."""
    return [steps[:stop]] + [[step] for step in steps[stop:]]


def inside_segment() -> bool:
    """True while a segment runs: its units then run plainly (see ``CheckpointUnit``)."""
    return getattr(_local, 'depth', 0) > 0


@contextmanager
def _segment_scope():
    _local.depth = getattr(_local, 'depth', 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def _flatten(obj, leaves):
    """A layout of ``obj`` (tensors, lists, tuples, None) with its tensors put in ``leaves``."""
    if isinstance(obj, torch.Tensor):
        leaves.append(obj)
        return len(leaves) - 1
    if isinstance(obj, (list, tuple)):
        return (type(obj), [_flatten(x, leaves) for x in obj])
    if obj is None:
        return None
    raise TypeError(f'a chain state holds tensors, lists, tuples or None, got {type(obj)}')


def _rebuild(layout, leaves):
    if isinstance(layout, int):
        return leaves[layout]
    if layout is None:
        return None
    kind, items = layout
    return kind(_rebuild(x, leaves) for x in items)


class _Segment:
    """The function a segment's checkpoint runs: ``steps`` from flat input tensors to the
    flat tensors they made (those that are not inputs); ``layout`` tells how to put the
    result back together (an index ``i >= 0`` is the ``i``-th returned tensor, ``-1 - i`` the
    ``i``-th input)."""

    def __init__(self, steps, state_layout, arg_layouts):
        self.steps = steps
        self.state_layout = state_layout
        self.arg_layouts = arg_layouts
        self.layout = None

    def __call__(self, *flat):
        state = _rebuild(self.state_layout, flat)
        outs = []
        with _segment_scope():
            for step, layout in zip(self.steps, self.arg_layouts):
                state, out = step.fn(state, *_rebuild(layout, flat))
                outs.append(out)
        leaves = []
        layout = _flatten((state, outs), leaves)
        inputs = {id(t): i for i, t in enumerate(flat)}
        made, index = [], []
        for t in leaves:  # tensors the segment passes through are not its outputs
            if id(t) in inputs:
                index.append(-1 - inputs[id(t)])
            elif any(t is m for m in made):
                index.append(next(i for i, m in enumerate(made) if t is m))
            else:
                index.append(len(made))
                made.append(t)
        self.layout = (layout, index)
        return tuple(made)

    def result(self, made, flat):
        layout, index = self.layout
        leaves = [made[i] if i >= 0 else flat[-1 - i] for i in index]
        return _rebuild(layout, leaves)


def _modules(steps):
    out = []
    for step in steps:
        module = step.module
        out += [module] if isinstance(module, torch.nn.Module) else list(module or ())
    return out


def _run_segment(steps, state):
    flat = []
    state_layout = _flatten(state, flat)
    arg_layouts = [_flatten(tuple(step.args), flat) for step in steps]
    segment = _Segment(steps, state_layout, arg_layouts)
    made = checkpoint(segment, *flat, mode='full', use_reentrant=steps[0].unit.use_reentrant,
                      module=_modules(steps), name=f'{steps[0].name}..{steps[-1].name}')
    if isinstance(made, torch.Tensor):
        made = (made, )
    return segment.result(made, flat)


def run_chain(steps: List[ChainStep], state: Any,
              segments: Optional[Dict[str, str]] = None) -> Tuple[Any, list]:
    """Run ``steps`` (:class:`ChainStep`) from ``state``; ``(final state, [out per step])``.

    ``segments``: ``{first step name: last step name}``, the segments in force (checked by
    ``set_checkpoint_segments``); a segment whose steps do not all run here is an error.
    """
    segments = segments or {}
    position = {step.name: k for k, step in enumerate(steps)}
    outs = [None] * len(steps)
    k = 0
    while k < len(steps):
        step = steps[k]
        last = segments.get(step.name)
        if last is None:
            state, outs[k] = step.fn(state, *step.args)
            k += 1
            continue
        stop = position.get(last, -1) + 1
        if stop <= k + 1:
            raise RuntimeError(f'checkpoint segment {step.name}..{last} does not run in this '
                               f'forward pass (steps run: {", ".join(position)})')
        state, outs[k:stop] = _run_segment(steps[k:stop], state)
        k = stop
    return state, outs
