"""The plans a user could set by hand, which the tools compare the planner with."""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .cost_table import CostTable
from .peak import Group, Plan, predict_peak, predict_time, uniform_plan
from .solver import chen_sqrt_plan, choose_plan, minimum_peak

__all__ = ['baseline_plans', 'reference_candidates', 'Sweep', 'memory_time_sweep']


def baseline_plans(table: CostTable) -> dict[str, Plan]:
    """The plans a user could set by hand, by name: all off, every unit ``'full'``, Chen's
    sqrt(n) segments (over the model's chains), and every combination of per-stage ``with_cp``
    flags of the backbone (``backbone.layer1`` ... or ``backbone.stages.N``)."""
    plans = {'all off': uniform_plan(table, None), 'every unit full': uniform_plan(table, 'full')}
    if table.chains:
        plans['Chen sqrt(n)'] = chen_sqrt_plan(table)
    stages = []
    for i, name in enumerate(table.names):
        match = re.match(r'backbone\.(layer\d+|stages\.\d+|features\.\w+?\d+)\.', name)
        if match and 'full' in table.units[i].kept:
            if not stages or stages[-1][0] != match.group(1):
                stages.append((match.group(1), []))
            stages[-1][1].append(i)
    for flags in itertools.product((False, True), repeat=len(stages)):
        on = {i for (_, idx), flag in zip(stages, flags) if flag for i in idx}
        plans['stages ' + ''.join('1' if f else '0' for f in flags)] = tuple(
            Group(i, i + 1, 'full' if i in on else None) for i in range(len(table.units)))
    return plans


def reference_candidates(table: CostTable, plans: Mapping[str, Plan], budgets: Iterable[int],
                         per_budget: int = 2) -> list[str]:
    """The keys of ``plans`` (``{key: plan}``) worth timing against the planner: at each
    budget, the ``per_budget`` fastest by predicted time among those whose predicted peak fits.
    Measuring these, not all of ``plans`` at every budget, finds the fastest that fits as
    long as the predicted times rank the plans within ``per_budget``."""
    predicted = {key: (predict_time(table, plan), predict_peak(table, plan))
                 for key, plan in plans.items()}
    chosen = []
    for budget in budgets:
        fits = sorted((t, key) for key, (t, peak) in predicted.items() if peak <= budget)
        for _, key in fits[:per_budget]:
            if key not in chosen:
                chosen.append(key)
    return chosen


class Sweep(NamedTuple):
    """The predicted memory / time trade-off of a table: ``planner`` ``[(peak bytes, step
    seconds)]`` of the planner's plan at budgets from the smallest peak to plain's, by peak;
    ``baselines`` ``{name: (peak bytes, step seconds)}`` of :func:`baseline_plans`."""

    planner: list[tuple[int, float]]
    baselines: dict[str, tuple[int, float]]


def memory_time_sweep(table: CostTable, points: int = 20) -> Sweep:
    """The planner at ``points`` budgets against the plans a user could set by hand, all
    predicted from ``table`` (what ``tools/plan_memory.py --sweep`` draws)."""
    low = minimum_peak(table).peak
    high = predict_peak(table, uniform_plan(table, None))
    found = set()
    for k in range(points):
        sol = choose_plan(table, low + (high - low) * k // max(points - 1, 1))
        found.add((sol.peak, sol.time))
    baselines = {name: (predict_peak(table, plan), predict_time(table, plan))
                 for name, plan in baseline_plans(table).items()}
    return Sweep(sorted(found), baselines)
