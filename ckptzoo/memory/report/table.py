"""What the planner measured and chose, as text tables for a terminal or a log."""
from __future__ import annotations

from ..model.buckets import Bucket
from ..model.budget import format_budget, format_bytes
from ..model.cost_table import MODES, CostTable
from ..model.peak import peak_point, plan_from_modes, predict_time, unit_kept, window_iteration
from ..plan_file import PlanResult

__all__ = ['plan_table', 'bucket_table', 'cost_report']


def _fixed_text(table: CostTable) -> str:
    """The plan-independent bytes by kind, as the reports print them."""
    return ', '.join(f'{k} {format_bytes(v)}' for k, v in table.fixed.items())


def plan_table(result: PlanResult) -> str:
    """The plan as a text table: unit (a segment: first..last), mode, predicted MiB kept,
    predicted recompute ms; then the budget, the peaks and the options. Without the cost
    table (a plan read back from its file), the modes only."""
    table = result.table
    rows = []
    if table is not None:
        plan = plan_from_modes(table, result.plan, result.segments)
        kept = unit_kept(table, plan)
        for g in plan:
            units = table.units[g.start:g.stop]
            name, mode = units[0].name, str(g.mode)
            if len(units) > 1:  # a segment: one row, its units' recompute together
                name, mode = f'{name}..{units[-1].name}', 'segment'
            rows.append((name, mode, f'{sum(kept[g.start:g.stop]) / 2 ** 20:>9.1f} '
                         f'{(predict_time(table, (g, )) - table.step_time) * 1e3:>13.1f}'))
        step = f'{predict_time(table, plan) * 1e3:.0f} ms'
        fixed = _fixed_text(table)
        where = peak_point(table, plan)[0]
    else:
        rows = [(name, str(mode), '') for name, mode in result.plan.items()]
        rows += [(f'{a}..{b}', 'segment', '') for a, b in result.segments or []]
        step, fixed, where = 'n/a', '', None
    width = max([24] + [len(r[0]) for r in rows])
    lines = [f'{"unit":<{width}} {"mode":<10} {"kept MiB":>9} {"recompute ms":>13}']
    lines += [f'{name:<{width}} {mode:<10} {cells}'.rstrip() for name, mode, cells in rows]
    lines.append(f'budget {format_budget(result.budget_bytes)}, predicted peak '
                 f'{format_bytes(result.predicted_peak_bytes)}, measured peak '
                 f'{format_bytes(result.measured_peak_bytes)}, predicted step {step}; '
                 f'fp16={result.fp16}, cumulative_iters={result.cumulative_iters}, '
                 f'samples_per_gpu={result.samples_per_gpu}')
    if fixed:
        lines.append(f'fixed: {fixed}')
    lines.append('the peak: ' + (f'{where}, in ' if where else '') +
                 window_iteration(result.cumulative_iters))
    if result.buckets is not None and len(result.buckets) > 1:
        lines += bucket_table(result.buckets).splitlines()
    if result.shapes_note:
        lines.append(f'batch shapes: {result.shapes_note}')
    return '\n'.join(lines)


def bucket_table(buckets: list[Bucket]) -> str:
    """One row per batch-shape bucket: its bound, predicted peak and step time, how many units
    train in each mode (a segment's units as ``full``) and how many segments."""
    modes = [m for m in MODES if any(m in b.plan.values() for b in buckets)] or [None]
    lines = [f'{"bucket HxW":<12} {"peak MiB":>9} {"step ms":>8} ' +
             ' '.join(f'{str(m):>9}' for m in modes) + f' {"segments":>8}']
    for b in buckets:
        counts = [sum(1 for v in b.plan.values() if v == m) for m in modes]
        ms = 'n/a' if b.predicted_step_time is None else f'{b.predicted_step_time * 1e3:.0f}'
        lines.append(f'{"x".join(map(str, b.shape)):<12} '
                     f'{b.predicted_peak_bytes / 2 ** 20:>9.1f} {ms:>8} ' +
                     ' '.join(f'{c:>9}' for c in counts) + f' {len(b.segments):>8}')
    return '\n'.join(lines)


def cost_report(table: CostTable) -> str:
    """Per unit and mode: MiB kept for backward and the recompute ms the probe measured."""
    modes = [m for m in MODES if any(m in u.kept for u in table.units)]
    head = f'{"unit":<24}' + ''.join(f' {str(m) + " MiB":>14} {str(m) + " ms":>13}'
                                     for m in modes)
    lines = [head]
    for u in table.units:
        cells = ''.join(f' {u.kept[m] / 2 ** 20:>14.2f} {u.extra_time(m) * 1e3:>13.1f}'
                        if m in u.kept else f' {"-":>14} {"-":>13}' for m in modes)
        lines.append(f'{u.name:<24}{cells}')
    lines.append(f'fixed: {_fixed_text(table)}; plain step {table.step_time * 1e3:.0f} ms')
    return '\n'.join(lines)
