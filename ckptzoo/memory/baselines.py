"""The plans a user could set by hand, which the tools compare the planner with."""
from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

from .cost_table import CostTable
from .peak import Group, Plan, predict_peak, predict_time, uniform_plan
from .solver import chen_sqrt_plan

__all__ = ['baseline_plans', 'reference_candidates']


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
