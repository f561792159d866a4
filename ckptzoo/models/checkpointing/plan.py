"""Checkpoint units and the plan the model owns.

A *checkpoint unit* is the smallest region of a forward pass that can run under a mode of its
own (:data:`~ckptzoo.models.checkpointing.functional.MODES`): a ResNet stem or block, a DenseNet
stem, dense layer or transition, a Swin patch embedding, block or patch merging, an FPN level,
a RetinaHead level. Each unit is a :class:`CheckpointUnit` object holding its mode; the code
that runs the region calls it (``unit(fn, *args)``), so no block branches on ``with_cp``.

An *owner* (:class:`CheckpointOwnerMixin`: backbones, necks, heads and the whole model)
describes its units once, by overriding ``_checkpoint_steps``: its chains of
:class:`~.segments.ChainStep` (local name, unit, function, modules, whether the output leaves
the chain), in execution order, the way its forward runs them. Everything else is derived from
that description: ``checkpoint_units()`` joins the steps' names with the owners' attribute
paths (``backbone.layer3.4``, ``neck.level2``, ``bbox_head.level0``), ``checkpoint_chains()``
and ``checkpoint_chain_exits()`` read the chains. A unit that shares no chain with others (a
RetinaHead level, a DenseNet unit past the last output) is a chain of one step. A plan,
``{name_or_glob: mode}``, changes modes at run time: no rebuild, weights untouched.

Segments (:mod:`.segments`): a *segment*, ``[first, last]`` unit names of one chain, runs those
steps under one ``'full'`` checkpoint that keeps only the segment's inputs; the inner units run
plainly for the duration. ``set_checkpoint_segments()`` sets the segments at run time (the
``segments`` part of a memory plan), ``checkpoint_segments()`` reads them.

Observers (:mod:`.observers`) see every unit call and recompute without patching a class.
"""
import difflib
import fnmatch
from collections import OrderedDict
from collections.abc import Mapping
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch.nn as nn

from ...utils.model_wrapper import unwrap_model
from .functional import check_mode, checkpoint
from .observers import _observers, observed
from .segments import ChainStep, inside_segment, run_chain

__all__ = ['CheckpointUnit', 'CheckpointOwnerMixin', 'resolve_plan', 'resolve_segments',
           'reentrant_units']


class CheckpointUnit:
    """The mode of one checkpoint unit, and the call that applies it.

    ``unit(function, *args, module=None)`` runs ``function(*args)`` under ``unit.mode``
    through :func:`~ckptzoo.models.checkpointing.functional.checkpoint` (guard, RNG,
    BN-safe recompute); with mode None it is a plain call.

    Attributes:
        mode (str | None): one of ``MODES``; set it through ``set_checkpoint_plan``.
        use_reentrant (bool): torch's reentrant implementation (``cp_use_reentrant``);
            only ``'full'`` supports it.
    """

    __slots__ = ('mode', 'use_reentrant')

    def __init__(self, mode: Optional[str] = None, use_reentrant: bool = False):
        self.mode = check_mode(mode, use_reentrant)
        self.use_reentrant = bool(use_reentrant)

    def __call__(self, function: Callable, *args: Any, module: Any = None) -> Any:
        if _observers:  # the memory probe (see .observers); nothing to do in training
            run = partial(self._run, function, args, module)
            return observed('unit_call', run, self, function, args, module)
        return self._run(function, args, module)

    def _run(self, function, args, module):
        if self.mode is None or inside_segment():
            return function(*args)
        return checkpoint(function, *args, mode=self.mode, use_reentrant=self.use_reentrant,
                          module=module)

    def __repr__(self) -> str:
        return f'CheckpointUnit(mode={self.mode!r}, use_reentrant={self.use_reentrant})'

    @classmethod
    def from_flag(cls, with_cp: Union[bool, str, None],
                  use_reentrant: bool = False) -> 'CheckpointUnit':
        """mmdet's ``with_cp`` bool (or a mode string) as a unit."""
        if isinstance(with_cp, bool):
            return cls('full' if with_cp else None, use_reentrant)
        return cls(with_cp, use_reentrant)


def _owners(module, prefix=''):
    """``(prefix, owner)`` of every checkpoint owner under ``module``, itself included: the
    modules that describe their units, and the units derived for a part that describes none
    (its ``checkpoint_owner``, :mod:`.derived`)."""
    if isinstance(module, CheckpointOwnerMixin):
        yield prefix, module
    elif vars(module).get('checkpoint_owner') is not None:
        yield prefix, vars(module)['checkpoint_owner']
    for child_name, child in module.named_children():
        yield from _owners(child, f'{prefix}{child_name}.')


def _chains(module):
    """``(prefix, chain of ChainStep)`` of every owner under ``module``, in execution order."""
    for prefix, owner in _owners(module):
        for chain in owner._checkpoint_steps():
            yield prefix, chain


def _join(prefix, name):
    """A unit's full name; a part's coarse unit (local name ``''``) is named as the part."""
    return prefix + name if name else prefix[:-1]


def _close_matches(key, names):
    prefixes = sorted({n.rsplit('.', i)[0] for n in names for i in (1, 2)} | set(names))
    close = difflib.get_close_matches(key, prefixes, n=5, cutoff=0.5)
    return f'close matches: {", ".join(close)}' if close else \
        f'units are e.g. {", ".join(names[:3])} ({len(names)} in all)' if names else \
        'this model has no checkpoint units'


def _matches(key, names):
    if any(c in key for c in '*?['):
        return [n for n in names if fnmatch.fnmatchcase(n, key)]
    return [n for n in names if n == key or n.startswith(key + '.')]


def resolve_plan(plan: Mapping, units: Mapping[str, CheckpointUnit]) -> Dict[str, Optional[str]]:
    """``{unit name: mode}`` for the units ``plan`` names; later keys override earlier ones.

    A key is a unit name (``backbone.layer3.4``), an owner or stage prefix (``neck``,
    ``backbone.layer3``: every unit under it) or a glob (``bbox_head.level*``, ``*``).
    """
    if not isinstance(plan, Mapping):
        raise TypeError(f'a checkpoint plan is a dict {{unit name or glob: mode}}, got '
                        f'{type(plan).__name__}: {plan!r}')
    names = list(units)
    out = OrderedDict()
    for key, mode in plan.items():
        if not isinstance(key, str):
            raise TypeError(f'checkpoint plan keys are unit names or globs (str), got {key!r}')
        check_mode(mode, where=f'mode for {key!r}')
        matched = _matches(key, names)
        if not matched:
            raise KeyError(f'checkpoint plan key {key!r} matches no checkpoint unit; '
                           f'{_close_matches(key, names)}')
        for name in matched:
            check_mode(mode, units[name].use_reentrant, where=f'mode for {name!r}')
            out[name] = mode
    return out


class CheckpointOwnerMixin:
    """Owns checkpoint units: backbones, necks, heads and the models built from them.

    Subclasses describe their own units by overriding :meth:`_checkpoint_steps`; units of
    child owners are found by walking the children, so a model needs no code of its own.
    """

    def _checkpoint_steps(self) -> List[List[ChainStep]]:
        """This owner's units as chains of :class:`~.segments.ChainStep`, in execution order:
        the one description that the forward runs (:meth:`_run_chain`) and that units, chains
        and exits are derived from. A chain of one step is a unit that no segment can include.
        None by default."""
        return []

    def checkpoint_units(self) -> 'OrderedDict[str, CheckpointUnit]':
        """``OrderedDict`` of every unit in this module and its children, dotted name ->
        :class:`CheckpointUnit`, in execution order (e.g. ``backbone.stem``,
        ``backbone.layer1.0`` ... ``neck.level2`` ... ``bbox_head.level0``)."""
        return OrderedDict((_join(prefix, step.name), step.unit) for prefix, chain in _chains(self)
                           for step in chain)

    def checkpoint_plan(self) -> 'OrderedDict[str, Optional[str]]':
        """The plan in force: ``OrderedDict`` unit name -> mode (None for plain), every unit.
        ``set_checkpoint_plan`` accepts it as it is."""
        return OrderedDict((name, unit.mode) for name, unit in self.checkpoint_units().items())

    def set_checkpoint_plan(self, plan: Mapping[str, Optional[str]]
                            ) -> 'OrderedDict[str, Optional[str]]':
        """Set the modes of the units ``plan`` names, at run time (no rebuild, weights kept).

        Args:
            plan (dict): ``{name_or_glob: mode}``; a key is a unit name, an owner / stage
                prefix (``'neck'``, ``'backbone.layer3'``) or a glob (``'*'``,
                ``'bbox_head.level*'``); a mode is one of ``None, 'full', 'selective',
                'offload'``. Keys apply in order, later ones override earlier ones; units not
                named keep their mode.

        Returns:
            The plan in force afterwards (:meth:`checkpoint_plan`).

        Raises:
            KeyError: a key matches no unit (the message names close matches).
            ValueError: an unknown mode, or ``'selective'`` on a unit that uses the reentrant
                implementation. Nothing is changed when it raises.
        """
        units = self.checkpoint_units()
        for name, mode in resolve_plan(plan, units).items():
            units[name].mode = mode
        return self.checkpoint_plan()

    # ---------------------------------------------------------------------------- segments
    def _run_chain(self, steps: List[ChainStep], state: Any) -> Tuple[Any, list]:
        """:func:`~.segments.run_chain` with this owner's segments."""
        return run_chain(steps, state, getattr(self, '_cp_segments', None))

    def checkpoint_chains(self) -> List[List[str]]:
        """The runs of two or more consecutive units that can form segments: a list of lists
        of unit names, in execution order (e.g. ``backbone.stem`` ... ``backbone.layer4.2``)."""
        return [[prefix + step.name for step in chain] for prefix, chain in _chains(self)
                if len(chain) > 1]

    def checkpoint_chain_exits(self) -> List[str]:
        """Units of a chain whose output also leaves it before its end (stage outputs that a
        neck takes): a segment through them returns that output too."""
        return [prefix + step.name for prefix, chain in _chains(self) if len(chain) > 1
                for step in chain[:-1] if step.leaves]

    def checkpoint_segments(self) -> List[List[str]]:
        """The segments in force, ``[[first unit, last unit], ...]`` in execution order;
        ``set_checkpoint_segments`` accepts it as it is."""
        return [[prefix + a, prefix + b] for prefix, owner in _owners(self)
                for a, b in getattr(owner, '_cp_segments', {}).items()]

    def replace_checkpoint_plan(self, plan: Mapping[str, Optional[str]],
                                segments: Sequence[Sequence[str]] = ()) -> None:
        """Put exactly ``plan`` (the units it does not name plain) and exactly ``segments`` in
        force, where :meth:`set_checkpoint_plan` merges into the plan in force: what switching
        between whole plans needs (a plan per batch shape, plans timed in turn)."""
        self.set_checkpoint_segments([])
        if self.checkpoint_units():
            self.set_checkpoint_plan({'*': None, **dict(plan)})
        self.set_checkpoint_segments([list(s) for s in segments])

    def set_checkpoint_segments(self, segments: Sequence[Sequence[str]]) -> List[List[str]]:
        """Run each ``[first, last]`` span of consecutive units of one chain under one
        ``'full'`` checkpoint that keeps only its inputs; replaces the segments in force
        (``[]`` removes them). The units' own modes apply again outside segments.

        Raises:
            KeyError: an unknown unit name (the message names close matches).
            ValueError: a segment outside one chain, of fewer than two units, first after
                last, or overlapping another (the message lists the chains).
            TypeError: not a list of ``[first, last]`` name pairs. Nothing is changed when it
                raises.
        """
        spans = resolve_segments(segments, self.checkpoint_units(), self.checkpoint_chains())
        owner_of = {_join(prefix, step.name): prefix for prefix, chain in _chains(self)
                    for step in chain}
        owners = list(_owners(self))
        local = {prefix: {} for prefix, _ in owners}
        for first, last in spans:
            prefix = owner_of[first]
            local[prefix][first[len(prefix):]] = last[len(prefix):]
        for prefix, owner in owners:
            owner._cp_segments = local[prefix]
        return self.checkpoint_segments()


def _describe_chains(chains):
    if not chains:
        return 'this model has no chains'
    return 'chains: ' + ', '.join(f'{c[0]}..{c[-1]} ({len(c)} units)' for c in chains)


def resolve_segments(segments: Sequence[Sequence[str]], units: Mapping[str, CheckpointUnit],
                     chains: List[List[str]]) -> List[Tuple[str, str]]:
    """``[(first, last)]`` in execution order, checked against ``units`` and ``chains``."""
    if isinstance(segments, (str, Mapping)) or not isinstance(segments, (list, tuple)):
        raise TypeError(f'checkpoint segments are a list of [first unit, last unit] pairs, got '
                        f'{segments!r}')
    where = {name: (c, k) for c, chain in enumerate(chains) for k, name in enumerate(chain)}
    spans = []
    for seg in segments:
        if isinstance(seg, str) or not isinstance(seg, (list, tuple)) or len(seg) != 2 \
                or not all(isinstance(n, str) for n in seg):
            raise TypeError(f'a checkpoint segment is a [first unit, last unit] pair of names, '
                            f'got {seg!r}')
        for name in seg:
            if name not in units:
                raise KeyError(f'checkpoint segment {list(seg)}: {name!r} is no checkpoint '
                               f'unit; {_close_matches(name, list(units))}')
            if name not in where:
                raise ValueError(f'checkpoint segment {list(seg)}: {name!r} is in no chain of '
                                 f'units run one after the other; {_describe_chains(chains)}')
        (c0, a), (c1, b) = where[seg[0]], where[seg[1]]
        if c0 != c1 or b <= a:
            why = 'crosses a chain boundary' if c0 != c1 else \
                'has its first unit after its last' if b < a else 'has one unit (use a mode)'
            raise ValueError(f'checkpoint segment {list(seg)} {why}: a segment is two or more '
                             f'consecutive units of one chain, first to last; '
                             f'{_describe_chains(chains)}')
        spans.append((c0, a, b, tuple(seg)))
    spans.sort()
    for (c0, _, b0, s0), (c1, a1, _, s1) in zip(spans, spans[1:]):
        if c0 == c1 and a1 <= b0:
            raise ValueError(f'checkpoint segments {list(s0)} and {list(s1)} overlap')
    return [s for *_, s in spans]


def reentrant_units(model: nn.Module) -> List[str]:
    """Names of the units of ``model`` that checkpoint with the reentrant implementation
    (a segment uses its first unit's)."""
    owner = unwrap_model(model)
    if not isinstance(owner, CheckpointOwnerMixin):
        return []
    firsts = {first for first, _ in owner.checkpoint_segments()}
    return [name for name, unit in owner.checkpoint_units().items()
            if unit.use_reentrant and (unit.mode is not None or name in firsts)]

