"""What one probe step measured, as plain data: the input of the peak model and the solver.

Memory is attributed to the *unit that made it*: a unit's ``kept[mode]`` is every storage it
created during its forward that is still alive when the forward pass ends (its saved
activations and, when a consumer keeps it, its output), counted once per storage, parameters
left out. The input of a unit is the previous unit's output, so it is counted there, once.
Everything that is not a unit (the batch, parameters, gradients, optimizer state, code between
units such as losses) is in the per-point bases, which do not depend on the plan.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from ...models.checkpointing import MODES
from ...utils.model_wrapper import unwrap_model

__all__ = ['MODES', 'UnitCost', 'CostTable', 'mode_key', 'mode_from_key', 'model_chains']


def mode_key(mode: str | None) -> str:
    """JSON object keys cannot be null: ``None`` is written ``'none'``."""
    return 'none' if mode is None else mode


def mode_from_key(key: str) -> str | None:
    """The mode a JSON key names (:func:`mode_key` reversed)."""
    return None if key == 'none' else key


@dataclass
class UnitCost:
    """One checkpoint unit, per mode (``None`` always present)."""

    name: str
    kept: dict[str | None, int]      # mode -> bytes still alive from this unit when forward ends
    fwd_peak: dict[str | None, int]  # mode -> bytes above the live bytes at its start, in forward
    bwd_peak: dict[str | None, int]  # mode -> bytes above the live bytes when its backward starts
    fwd_time: float = 0.0            # seconds, plain forward
    recompute_time: dict[str | None, float] = field(default_factory=dict)  # mode -> s per step

    @property
    def modes(self) -> tuple[str | None, ...]:
        """The modes this unit was measured in, in :data:`MODES` order."""
        return tuple(m for m in MODES if m in self.kept)

    def extra_time(self, mode: str | None) -> float:
        """Seconds ``mode`` adds to a step (``'full'`` without a measured recompute: one plain
        forward)."""
        if mode is None:
            return 0.0
        if mode == 'full' and mode not in self.recompute_time:
            return self.fwd_time
        return self.recompute_time.get(mode, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (modes as :func:`mode_key`)."""
        def keyed(d):
            return {mode_key(m): v for m, v in d.items()}
        return dict(name=self.name, kept=keyed(self.kept), fwd_peak=keyed(self.fwd_peak),
                    bwd_peak=keyed(self.bwd_peak), fwd_time=self.fwd_time,
                    recompute_time=keyed(self.recompute_time))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> UnitCost:
        """From :meth:`to_dict`'s data."""
        def unkeyed(x):
            return {mode_from_key(k): v for k, v in x.items()}
        return cls(d['name'], unkeyed(d['kept']), unkeyed(d['fwd_peak']),
                   unkeyed(d['bwd_peak']), d.get('fwd_time', 0.0),
                   unkeyed(d.get('recompute_time', {})))


@dataclass
class CostTable:
    """Units in forward order and the plan-independent memory around them.

    ``fwd_base[i]``: live bytes when unit ``i``'s forward starts, less the ``kept`` of the units
    before it. ``bwd_base[i]``: live bytes when its backward starts, less the ``kept`` of the
    units not yet differentiated (itself included). ``tail_peak``: the largest live bytes
    between the last unit's forward and the first unit's backward (loss, head code), less all
    ``kept``. ``step_peak``: the peak of the optimizer step (and of anything after backward).
    ``step_time``: seconds of a plain step. ``chains``: ``(start, stop)`` index ranges whose
    units run one after the other, the only place a segment may be formed. ``exits``: units of
    a chain whose output leaves it before its end (a stage output), which a segment through
    them keeps as it keeps its last output. ``fixed``: named plan-independent bytes
    (parameters, gradients, optimizer state, batch ...), for reports. ``window``: the
    ``cumulative_iters`` of the run probed: every number is of the step of the window's last
    iteration, which holds the gradients of those before it from its start
    (:func:`~ckptzoo.memory.measure.step.hold_window_gradients`; 1: every iteration steps).
    """

    units: list[UnitCost]
    fwd_base: list[int]
    bwd_base: list[int]
    tail_peak: int = 0
    step_peak: int = 0
    step_time: float = 0.0
    bwd_order: list[int] | None = None
    chains: list[tuple[int, int]] | None = None
    fixed: dict[str, int] = field(default_factory=dict)
    exits: list[int] = field(default_factory=list)
    window: int = 1

    def __post_init__(self):
        n = len(self.units)
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f'window must be a positive int (cumulative_iters), got '
                             f'{self.window!r}')
        if len(self.fwd_base) != n or len(self.bwd_base) != n:
            raise ValueError(f'fwd_base and bwd_base need one entry per unit ({n}), got '
                             f'{len(self.fwd_base)} and {len(self.bwd_base)}')
        for unit in self.units:
            if None not in unit.kept:
                raise ValueError(f'unit {unit.name!r} has no plain (None) cost')
            for mode in unit.kept:
                if mode not in MODES:
                    raise ValueError(f'unit {unit.name!r}: unknown mode {mode!r}; allowed: '
                                     f'{MODES}')
        if self.bwd_order is None:
            self.bwd_order = list(range(n - 1, -1, -1))
        if sorted(self.bwd_order) != list(range(n)):
            raise ValueError(f'bwd_order must be a permutation of range({n}), got '
                             f'{self.bwd_order}')
        if self.chains is None:
            self.chains = [(0, n)] if n else []
        self.chains = [tuple(c) for c in self.chains]

    @property
    def names(self) -> list[str]:
        """The unit names in forward order."""
        return [u.name for u in self.units]

    def index(self, name: str) -> int:
        """The position of unit ``name``."""
        return self.names.index(name)

    def chain_of(self, i: int) -> tuple[int, int] | None:
        """The ``(start, stop)`` chain holding unit ``i``, or None."""
        for start, stop in self.chains:
            if start <= i < stop:
                return start, stop
        return None

    def add_resident(self, name: str, nbytes: int) -> CostTable:
        """Count ``nbytes`` that stay allocated through the whole step but that the recorded
        steps did not see (DDP's gradient buckets, when the probe steps the module alone and
        the exact tracker counts only tensors an op touches): every point of the peak moves
        up by them. Returns the table."""
        self.fwd_base = [b + nbytes for b in self.fwd_base]
        self.bwd_base = [b + nbytes for b in self.bwd_base]
        self.tail_peak += nbytes
        self.step_peak += nbytes
        self.fixed[name] = self.fixed.get(name, 0) + nbytes
        return self

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (what a DDP broadcast or a file carries)."""
        return dict(units=[u.to_dict() for u in self.units], fwd_base=list(self.fwd_base),
                    bwd_base=list(self.bwd_base), tail_peak=self.tail_peak,
                    step_peak=self.step_peak, step_time=self.step_time,
                    bwd_order=list(self.bwd_order), chains=[list(c) for c in self.chains],
                    fixed=dict(self.fixed), exits=list(self.exits), window=self.window)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostTable:
        """From :meth:`to_dict`'s data."""
        return cls([UnitCost.from_dict(u) for u in d['units']], d['fwd_base'], d['bwd_base'],
                   d.get('tail_peak', 0), d.get('step_peak', 0), d.get('step_time', 0.0),
                   d.get('bwd_order'), d.get('chains'), d.get('fixed', {}), d.get('exits', []),
                   d.get('window', 1))


def model_chains(model: nn.Module,
                 names: Sequence[str]) -> tuple[list[tuple[int, int]], list[int]]:
    """``(chains, exits)`` of ``model`` as a :class:`CostTable` takes them: ``(start, stop)``
    index ranges into ``names`` (the units in forward order) of the model's chains of two or
    more units (``checkpoint_chains()``: runs of consecutive units, derived from the same
    description as the units), and the indices of their exits."""
    model = unwrap_model(model)
    if not hasattr(model, 'checkpoint_chains'):
        return [], []
    index = {n: i for i, n in enumerate(names)}
    chains = [(index[c[0]], index[c[0]] + len(c)) for c in model.checkpoint_chains()]
    exits = sorted(index[n] for n in model.checkpoint_chain_exits())
    return chains, exits
