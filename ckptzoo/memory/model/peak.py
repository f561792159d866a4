"""The peak model: the predicted peak bytes and step time of a plan over a :class:`CostTable`.

A plan is a tuple of :class:`Group` covering the units in order. A group of one unit runs in
any mode the unit has; a group of several consecutive units of one chain is a *segment*: one
``'full'`` checkpoint that keeps only the segment's input (and returns its last unit's output and
those of its exits, e.g. stage outputs, as that unit keeps them in ``'full'``), and recomputes
the whole segment when its backward starts.

The peak is the largest of
* each unit's forward: the base, what the units before it keep, its own forward transient;
* the tail (loss and head code between forward and backward): all that is kept, plus its excess;
* each point of backward: the base, what the units not yet differentiated keep, the unit's own
  kept bytes and its backward transient (its recompute and gradients). A segment is recomputed
  when the first of its units is differentiated, while its last output is still held; the
  recomputed units keep their plain bytes until their own backward has run;
* the optimizer step.

The step is that of the run's largest iteration (:func:`window_iteration`): with gradient
accumulation, a window's last, whose forward already holds the gradients of the iterations
before it; the table was probed at it (``CostTable.window``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import torch.nn as nn

from ...utils.model_wrapper import unwrap_model
from .cost_table import CostTable

__all__ = ['Group', 'Plan', 'check_plan', 'kept_bytes', 'peak_points', 'peak_point',
           'window_iteration', 'predict_peak',
           'predict_time', 'uniform_plan', 'plan_from_modes', 'plan_modes', 'plan_segments',
           'segment_outputs', 'unit_kept', 'apply_plan']


class Group(NamedTuple):
    """Units ``start`` to ``stop - 1`` (indices into the table) in ``mode``; two or more units
    are a segment, which is always ``'full'``."""

    start: int
    stop: int
    mode: str | None


#: a plan: groups covering the units of a table in order
Plan = tuple[Group, ...]


def uniform_plan(table: CostTable, mode: str | None) -> Plan:
    """Every unit in ``mode`` (units without that mode stay plain)."""
    return tuple(Group(i, i + 1, mode if mode in u.kept else None)
                 for i, u in enumerate(table.units))


def plan_from_modes(table: CostTable, modes: Mapping[str, str | None],
                    segments: Iterable[tuple[str, str]] = ()) -> Plan:
    """A plan from ``{unit name: mode}`` (missing names: plain) and ``[(first, last)]`` names."""
    names = table.names
    unknown = sorted(set(modes) - set(names))
    if unknown:
        raise KeyError(f'unknown checkpoint units {unknown}; known: {names}')
    seg_at = {}
    for first, last in segments:
        a, b = names.index(first), names.index(last) + 1
        if b - a < 2:
            raise ValueError(f'a segment needs two or more units, got {first!r}..{last!r}')
        seg_at[a] = b
    groups, i = [], 0
    while i < len(names):
        if i in seg_at:
            groups.append(Group(i, seg_at[i], 'full'))
            i = seg_at[i]
        else:
            groups.append(Group(i, i + 1, modes.get(names[i])))
            i += 1
    plan = tuple(groups)
    check_plan(table, plan)
    return plan


def plan_modes(table: CostTable, plan: Plan) -> dict[str, str | None]:
    """``{unit name: mode}``: the units of a segment are ``'full'``."""
    return {table.units[i].name: g.mode for g in plan for i in range(g.start, g.stop)}


def plan_segments(table: CostTable, plan: Plan) -> list[list[str]]:
    """``[[first unit name, last unit name]]`` of the segments of two or more units."""
    return [[table.units[g.start].name, table.units[g.stop - 1].name]
            for g in plan if g.stop - g.start > 1]


def check_plan(table: CostTable, plan: Plan) -> None:
    """A ValueError unless ``plan`` covers the table's units in order, every unit in a mode it
    was measured in, every segment ``'full'`` and inside one chain."""
    i = 0
    for g in plan:
        if g.start != i or g.stop <= g.start:
            raise ValueError(f'plan groups must cover the units in order, got {plan}')
        if g.stop - g.start > 1:
            chain = table.chain_of(g.start)
            if g.mode != 'full' or chain is None or g.stop > chain[1]:
                raise ValueError(f'a segment must be full and inside one chain '
                                 f'{table.chains}, got {g}')
        elif g.mode not in table.units[g.start].kept:
            raise ValueError(f'unit {table.units[g.start].name!r} has no cost for mode '
                             f'{g.mode!r}; measured: {table.units[g.start].modes}')
        i = g.stop
    if i != len(table.units):
        raise ValueError(f'plan covers {i} of {len(table.units)} units')


def unit_kept(table: CostTable, plan: Plan) -> list[int]:
    """Per unit, the bytes it keeps after the forward under ``plan``."""
    kept = [0] * len(table.units)
    for g in plan:
        if g.stop - g.start == 1:
            kept[g.start] = table.units[g.start].kept[g.mode]
        else:  # a segment keeps its input (counted by its producer) and its outputs
            for i in segment_outputs(table, g):
                kept[i] = table.units[i].kept['full']
    return kept


def segment_outputs(table: CostTable, g: Group) -> list[int]:
    """The units of segment ``g`` whose outputs it returns: its exits and its last unit."""
    return [i for i in range(g.start, g.stop - 1) if i in table.exits] + [g.stop - 1]


def kept_bytes(table: CostTable, plan: Plan) -> int:
    """Bytes the units keep for backward under ``plan`` (the sum of the units' ``kept``)."""
    return sum(unit_kept(table, plan))


def peak_points(table: CostTable, plan: Plan) -> list[tuple[str, int]]:
    """``[(label, bytes)]`` of every point of the step the peak is the maximum of."""
    check_plan(table, plan)
    units = table.units
    kept = unit_kept(table, plan)
    group_of = {}
    for g in plan:
        for i in range(g.start, g.stop):
            group_of[i] = g
    points, prefix = [], 0
    for i, u in enumerate(units):
        g = group_of[i]
        mode = g.mode if g.stop - g.start == 1 else 'full'
        points.append((f'forward {u.name}', table.fwd_base[i] + prefix + u.fwd_peak[mode]))
        prefix += kept[i]
    points.append(('loss', prefix + table.tail_peak))
    position = {i: p for p, i in enumerate(table.bwd_order)}
    for p, i in enumerate(table.bwd_order):
        g = group_of[i]
        u = units[i]
        still = sum(kept[k] for k in table.bwd_order[p + 1:])
        if g.stop - g.start == 1:
            points.append((f'backward {u.name}',
                           table.bwd_base[i] + still + kept[i] + u.bwd_peak[g.mode]))
            continue
        # a segment: recomputed at once when the first of its units is differentiated (its
        # last in reverse order), while its last output is still held by the consumer just
        # differentiated (its exits' consumers, a neck, were differentiated long before); its
        # units keep their plain bytes until differentiated
        seg = range(g.start, g.stop)
        outside = sum(kept[k] for k in table.bwd_order[p + 1:] if k not in seg)
        last = kept[g.stop - 1]
        if p == min(position[k] for k in seg):  # the recompute forward
            for k in seg:
                points.append((f'recompute {units[k].name} (segment)',
                               table.bwd_base[i] + outside + last + units[k].fwd_peak[None] +
                               sum(units[j].kept[None] for j in range(g.start, k))))
        held = last if position[g.stop - 1] > p else 0
        inside = sum(units[k].kept[None] for k in seg if position[k] >= p)
        points.append((f'backward {u.name} (segment)',
                       table.bwd_base[i] + outside + held + inside + u.bwd_peak[None]))
    points.append(('optimizer step', table.step_peak))
    return points


def peak_point(table: CostTable, plan: Plan) -> tuple[str, int]:
    """``(label, bytes)`` of the point of the step that sets the peak under ``plan``."""
    return max(peak_points(table, plan), key=lambda point: point[1])


def window_iteration(cumulative_iters: int) -> str:
    """Which iteration of a run sets its peak, and so was probed, in words."""
    if cumulative_iters <= 1:
        return 'every iteration (each makes the optimizer step)'
    return (f'iteration {cumulative_iters} of each accumulation window of {cumulative_iters} '
            f'(it holds the gradients of the {cumulative_iters - 1} before it from its start, '
            'then makes the optimizer step)')


def predict_peak(table: CostTable, plan: Plan) -> int:
    """The predicted peak bytes of a step under ``plan``: the largest of its points."""
    return max(b for _, b in peak_points(table, plan))


def predict_time(table: CostTable, plan: Plan) -> float:
    """Seconds per step: the plain step plus each group's recompute."""
    extra = 0.0
    for g in plan:
        if g.stop - g.start == 1:
            extra += table.units[g.start].extra_time(g.mode)
        else:
            extra += sum(table.units[i].fwd_time for i in range(g.start, g.stop))
    return table.step_time + extra


def apply_plan(model: nn.Module, table: CostTable, plan: Plan) -> None:
    """Set ``plan`` (groups over ``table``) on ``model`` (or the module a DDP wrapper holds):
    the units' modes and the segments."""
    model = unwrap_model(model)
    model.set_checkpoint_plan(plan_modes(table, plan))
    model.set_checkpoint_segments(plan_segments(table, plan))
