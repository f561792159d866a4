"""The solver: the fastest plan whose predicted peak fits a budget.

Exhaustive search when the plans are few; otherwise a dynamic program over the chain of units
in forward order (the shape of checkmate / rotor's chain solvers). Every constraint of the peak
model is "a base, plus what the units before this point keep, plus something local", so a
partial plan matters to the rest only through the bytes it keeps: the program keeps, per
position, the partial plans not dominated in (bytes kept, time, peak so far), and is exact when
the backward runs in reverse forward order (checked; otherwise the not-yet-differentiated later
units are counted at their largest ``kept``, which can only over-estimate). Partial plans are
compared on (bytes kept, time): the fastest plan is exact; among plans of equal time the lower
peak is preferred. Every mode but plain costs at least 1 us, so the peak chosen never rises as
the budget falls.
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from .cost_table import MODES, CostTable
from .peak import (Group, Plan, check_plan, kept_bytes, predict_peak, predict_time,
                   segment_outputs)

__all__ = ['Solution', 'InfeasibleBudget', 'solve', 'choose_plan', 'minimum_peak',
           'most_frugal', 'pareto_front', 'exhaustive_search', 'chen_sqrt_plan', 'count_plans']

#: the modes a solve may use (None: every mode each unit was measured in)
Modes = Collection[str | None] | None


class Solution(NamedTuple):
    """A plan the solver chose, its predicted peak (bytes) and step time (seconds), and the
    method that found it (``'exhaustive'`` or ``'dynamic program'``)."""

    plan: Plan
    peak: int
    time: float
    method: str

_INF = float('inf')


class InfeasibleBudget(ValueError):
    """No plan fits: ``minimum`` is the :class:`Solution` with the smallest predicted peak;
    ``options`` the settings beyond the checkpoint plan that reach it (``fp16``,
    ``cumulative_iters``, ``samples_per_gpu``), when the outer search tried them; ``shape``
    the batch shape ``(H, W)`` (a bucket's bound) nothing fits at, when planning per shape."""

    def __init__(self, budget: int, minimum: Solution, message: str | None = None,
                 options: Mapping[str, Any] | None = None, notes: Iterable[str] = (),
                 shape: tuple[int, int] | None = None):
        from .budget import format_budget, format_bytes
        self.budget = budget
        self.minimum = minimum
        self.options = options
        self.shape = None if shape is None else tuple(shape)
        reached = _describe(minimum.plan)
        if options:
            reached += ' with ' + ', '.join(f'{k}={v}' for k, v in options.items())
        at = '' if shape is None else f' for batches of shape {shape[0]}x{shape[1]}'
        super().__init__(message or (
            f'no checkpoint plan fits memory_budget={budget} B ({format_budget(budget)}){at}: the '
            f'smallest predicted peak is {minimum.peak} B ({format_bytes(minimum.peak)}), '
            f'reached by {reached}; set memory_budget to at least that'
            + ''.join(f'; {n}' for n in notes)))


def _describe(plan):
    modes = {}
    for g in plan:
        key = 'segments' if g.stop - g.start > 1 else str(g.mode)
        modes[key] = modes.get(key, 0) + 1
    return 'a plan of ' + ', '.join(f'{v} {k}' for k, v in sorted(modes.items()))


def _groups_at(table, i, modes, segments):
    """The groups a plan can start at unit ``i``."""
    unit = table.units[i]
    for mode in unit.modes:
        if modes is None or mode in modes:
            yield Group(i, i + 1, mode)
    chain = table.chain_of(i) if segments else None
    if chain is not None and (modes is None or 'full' in modes):
        for stop in range(i + 2, chain[1] + 1):
            if 'full' in table.units[stop - 1].kept:
                yield Group(i, stop, 'full')


def count_plans(table: CostTable, modes: Modes = None, segments: bool = True) -> int:
    """How many plans there are over ``table`` (with ``modes``, with or without segments)."""
    n = len(table.units)
    counts = [0] * n + [1]
    for i in range(n - 1, -1, -1):
        counts[i] = sum(counts[g.stop] for g in _groups_at(table, i, modes, segments))
    return counts[0]


def exhaustive_search(table: CostTable, budget: float = _INF, modes: Modes = None,
                      segments: bool = True, objective: str = 'time') -> Solution | None:
    """The best of every plan, evaluated with the peak model (small tables and tests), by
    ``objective``: ``'time'`` (ties: the peak), ``'peak'`` (ties: the time) or ``'frugal'``
    (the bytes kept, then the time); None when none fits ``budget``."""
    best, best_key = None, None
    n = len(table.units)

    def visit(i, groups):
        nonlocal best, best_key
        if i == n:
            plan = tuple(groups)
            peak = predict_peak(table, plan)
            if peak > budget:
                return
            t = _plan_us(table, plan)
            key = (t, peak) if objective == 'time' else (peak, t) if objective == 'peak' else \
                (kept_bytes(table, plan), t)
            if best_key is None or key < best_key:
                best, best_key = Solution(plan, peak, predict_time(table, plan), 'exhaustive'), key
            return
        for g in _groups_at(table, i, modes, segments):
            groups.append(g)
            visit(g.stop, groups)
            groups.pop()

    visit(0, [])
    return best


def _us(seconds):
    """Times compared as integer microseconds: sums in any order tie exactly."""
    return int(round(seconds * 1e6))


def _group_us(table, g):
    units = table.units
    if g.stop - g.start > 1:
        return sum(_us(units[k].fwd_time) for k in range(g.start, g.stop))
    if g.mode is None:
        return 0
    return max(1, _us(units[g.start].extra_time(g.mode)))


def _plan_us(table, plan):
    return sum(_group_us(table, g) for g in plan)


def _transitions(table, modes, segments):
    """Per start unit, ``[(group, bytes it keeps, c, extra time in us)]``: every point of the
    group is ``prefix + c`` where ``prefix`` is what the units before it keep."""
    n, units = len(table.units), table.units
    position = {i: p for p, i in enumerate(table.bwd_order)}
    # later units still holding memory when unit i is differentiated (none in a chain)
    max_kept = [max(u.kept.values()) for u in units]
    later = [sum(max_kept[k] for k in range(i + 1, n) if position[k] > position[i])
             for i in range(n)]
    out = []
    for i in range(n):
        moves = []
        for g in _groups_at(table, i, modes, segments):
            if g.stop - g.start == 1:
                u = units[i]
                kept = u.kept[g.mode]
                c = max(table.fwd_base[i] + u.fwd_peak[g.mode],
                        table.bwd_base[i] + later[i] + kept + u.bwd_peak[g.mode])
                moves.append((g, kept, c, _group_us(table, g)))
                continue
            seg = range(i, g.stop)
            outputs = {k: units[k].kept['full'] for k in segment_outputs(table, g)}
            c, made = 0, 0  # made: the outputs kept so far in its forward
            for k in seg:
                c = max(c, table.fwd_base[k] + made + units[k].fwd_peak['full'])
                made += outputs.get(k, 0)

            def after(k):  # units after the segment, not yet differentiated
                return sum(max_kept[j] for j in range(g.stop, n) if position[j] > position[k])
            # the recompute, when the first of its units is differentiated (see peak_points)
            first, inside, last = min(seg, key=position.get), 0, outputs[g.stop - 1]
            for k in seg:
                c = max(c, table.bwd_base[first] + after(first) + last + inside +
                        units[k].fwd_peak[None])
                inside += units[k].kept[None]
            for k in seg:
                held = last if position[g.stop - 1] > position[k] else 0
                inside = sum(units[j].kept[None] for j in seg if position[j] >= position[k])
                c = max(c, table.bwd_base[k] + after(k) + held + inside + units[k].bwd_peak[None])
            moves.append((g, made, c, _group_us(table, g)))
        out.append(moves)
    return out


def _prune(states, grid):
    """States not dominated in (bytes kept, objective); ``grid`` > 1 merges nearby bytes."""
    states.sort(key=lambda s: (s[0] // grid, s[1], s[2]))
    kept, best = [], None
    for s in states:
        if best is None or s[1] < best:
            kept.append(s)
            best = s[1]
    return kept


def _program(table, budget, modes, segments, max_states, objective):
    """The dynamic program. A state is ``(bytes kept, objective, tie-break, peak, time,
    groups)``; the objective is the time in us (tie-break: the peak) or the peak (tie-break:
    the time; ``'frugal'``: the bytes kept at the end, then the time). Returns the best final
    state or None."""
    moves = _transitions(table, modes, segments)
    n = len(table.units)
    fronts = [[] for _ in range(n + 1)]
    fronts[0] = [(0, 0, 0, 0, 0, None)]
    for i in range(n + 1):
        front = _prune(fronts[i], 1)
        if len(front) > max_states:  # rotor-style discretisation of the bytes kept
            front = _prune(front, max(1, front[-1][0] // max_states))
        fronts[i] = None
        if i == n:
            break
        for g, add, c, extra in moves[i]:
            target = fronts[g.stop]
            for kept, _, _, peak, time, groups in front:
                peak = max(peak, kept + c)
                if peak > budget:
                    continue
                time += extra
                key = (peak, time) if objective == 'peak' else (time, peak)
                target.append((kept + add, key[0], key[1], peak, time, (g, groups)))
    best = None
    for kept, _, _, peak, time, groups in front:
        peak = max(peak, kept + table.tail_peak, table.step_peak)
        if peak > budget:
            continue
        key = (time, peak) if objective == 'time' else (peak, time) if objective == 'peak' \
            else (kept, time)
        if best is None or key < best[0]:
            best = (key, groups)
    if best is None:
        return None
    plan, groups = [], best[1]
    while groups is not None:
        plan.append(groups[0])
        groups = groups[1]
    plan = tuple(reversed(plan))
    check_plan(table, plan)
    return Solution(plan, predict_peak(table, plan), predict_time(table, plan),
                    'dynamic program')


def solve(table: CostTable, budget: int, modes: Modes = None, segments: bool = True,
          exhaustive_limit: int = 20000, max_states: int = 20000) -> Solution:
    """The fastest plan with predicted peak <= ``budget`` bytes (ties: the lower peak).

    ``modes``: the modes allowed (default: every mode each unit was measured in);
    ``segments``: allow multi-unit segments. Raises :class:`InfeasibleBudget` with the
    minimum-peak plan when nothing fits.
    """
    if count_plans(table, modes, segments) <= exhaustive_limit:
        best = exhaustive_search(table, budget, modes, segments)
    else:
        best = _program(table, budget, modes, segments, max_states, 'time')
    if best is None:
        raise InfeasibleBudget(budget, minimum_peak(table, modes, segments, exhaustive_limit,
                                                    max_states))
    return best


def choose_plan(table: CostTable, budget: int, segments: bool = True) -> Solution:
    """The solver's fastest predicted plan under ``budget``, in the planner's order of
    preference: plain autograd, ``'full'`` and ``'selective'`` units first; segments only where
    no per-unit plan fits; ``'offload'`` (CUDA) only where nothing else does. A segment
    recomputes all its units before their backward, which then runs on tensors no longer in
    cache: measured 2-5 % of a ResNet-50 step slower than the same units checkpointed one by
    one (docs/benchmarks.md), a cost the time model does not see; ``'offload'`` moves every
    saved tensor over the host link. The peak chosen never rises as the budget falls: a later
    stage is tried only below every earlier stage's smallest peak. Raises
    :class:`InfeasibleBudget` (the last stage's) when nothing fits."""
    cheap = tuple(m for m in MODES if m != 'offload')
    stages = [cheap] + ([None] if any('offload' in u.kept for u in table.units) else [])
    error = None
    for modes in stages:
        for with_segments in ((False, True) if segments else (False, )):
            try:
                return solve(table, budget, modes=modes, segments=with_segments)
            except InfeasibleBudget as exc:
                error = exc
    raise error


def minimum_peak(table: CostTable, modes: Modes = None, segments: bool = True,
                 exhaustive_limit: int = 20000, max_states: int = 20000) -> Solution:
    """The plan with the smallest predicted peak (ties: the faster)."""
    if count_plans(table, modes, segments) <= exhaustive_limit:
        return exhaustive_search(table, modes=modes, segments=segments, objective='peak')
    return _program(table, _INF, modes, segments, max_states, 'peak')


def most_frugal(table: CostTable, modes: Modes = None, segments: bool = True,
                slack: float = 0.01, exhaustive_limit: int = 20000,
                max_states: int = 20000) -> Solution:
    """The plan that keeps the fewest bytes for backward (ties: the faster) among those whose
    predicted peak is within ``slack`` of the smallest: where fixed memory (weights, gradients,
    optimizer state) sets the peak, many plans share it."""
    budget = int(minimum_peak(table, modes, segments, exhaustive_limit, max_states).peak *
                 (1 + slack))
    if count_plans(table, modes, segments) <= exhaustive_limit:
        return exhaustive_search(table, budget, modes, segments, objective='frugal')
    return _program(table, budget, modes, segments, max_states, 'frugal')


def pareto_front(table: CostTable, budgets: Iterable[int], modes: Modes = None,
                 segments: bool = True) -> list[Solution | None]:
    """``[Solution or None]``: the solver's plan at each budget (None where nothing fits)."""
    out = []
    for budget in budgets:
        try:
            out.append(solve(table, budget, modes, segments))
        except InfeasibleBudget:
            out.append(None)
    return out


def chen_sqrt_plan(table: CostTable) -> Plan:
    """Chen et al.'s sqrt(n) baseline: each chain cut into about sqrt(length) full segments;
    units outside chains fully checkpointed one by one."""
    groups, i, n = [], 0, len(table.units)
    while i < n:
        chain = table.chain_of(i)
        if chain is None or chain[0] != i:
            mode = 'full' if 'full' in table.units[i].kept else None
            groups.append(Group(i, i + 1, mode))
            i += 1
            continue
        start, stop = chain
        length = stop - start
        size = max(1, math.ceil(math.sqrt(length)))
        for a in range(start, stop, size):
            groups.append(Group(a, min(a + size, stop), 'full'))
        i = stop
    plan = tuple(groups)
    check_plan(table, plan)
    return plan
