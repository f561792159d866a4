"""The memory report: one HTML page that shows where a planned step's memory goes.

It opens from disk with no network: styles, charts (matplotlib figures inlined as SVG by
:mod:`~ckptzoo.memory.report.charts`, text kept as text) and a few lines of script (sorting the unit
table; noting whether any chart's texts overlap as the browser laid them out) are all in the
file. Sections: the
plan's numbers (budget, predicted and measured peak, the options the outer search took); the
step's memory over time (plain, the plan, each batch-shape bucket; from
:mod:`~ckptzoo.memory.measure.timeline`); per unit the bytes kept and the recompute per mode and the
mode chosen, as a chart and a sortable table; the fixed memory beside the activations; with a
sweep, the memory / time trade-off of the planner against the plans set by hand.
"""
from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from ..model.baselines import Sweep, memory_time_sweep
from ..model.budget import format_budget, format_bytes
from .charts import (fixed_bars, fixed_figure, mode_name, svg, sweep_figure, sweep_points,
                     timeline_figure, timeline_series, unit_bars, units_figure)
from ..model.peak import window_iteration
from ..plan_file import PlanResult
from ..measure.timeline import Timeline

__all__ = ['memory_report_html', 'write_memory_report']

MiB = 2 ** 20

_STYLE = """
body{font:13px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;margin:0;
 background:#fafafa}
main{max-width:1240px;margin:0 auto;padding:10px 18px 40px}
h1{font-size:20px;margin:6px 0 8px}h2{font-size:16px;margin:22px 0 6px;
 border-bottom:1px solid #ddd;padding-bottom:3px}
.cards{display:flex;flex-wrap:wrap;gap:8px}.card{background:#fff;border:1px solid #ddd;
 border-radius:4px;padding:5px 10px}.card b{display:block;font-size:15px}
.card small{color:#555;font-size:12px}
.scroll{overflow-x:auto;background:#fff;border:1px solid #ddd}
.scroll>svg{display:block}
table{border-collapse:collapse;background:#fff;font-size:12px}
th,td{border:1px solid #ddd;padding:2px 7px;text-align:right}th{background:#eef1f5;
 cursor:pointer;position:sticky;top:0}td:nth-child(2),th:nth-child(2){text-align:left;
 font-family:ui-monospace,monospace}th[data-dir=asc]::after{content:' \\25B2'}
th[data-dir=desc]::after{content:' \\25BC'}.tablebox{max-height:420px;overflow:auto;
 display:inline-block;border:1px solid #ddd}.note{color:#555}
.row{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
"""

_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, col) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], dir = th.dataset.dir === 'asc' ? -1 : 1;
    th.closest('tr').querySelectorAll('th').forEach(function (h) { delete h.dataset.dir; });
    th.dataset.dir = dir > 0 ? 'asc' : 'desc';
    function key(row) { var c = row.cells[col], v = c.dataset.v !== undefined ? c.dataset.v
      : c.textContent, n = parseFloat(v); return isNaN(n) ? v : n; }
    Array.from(body.rows).sort(function (a, b) { var x = key(a), y = key(b);
      return (typeof x === 'number' && typeof y === 'number' ? x - y
        : String(x).localeCompare(String(y))) * dir; })
      .forEach(function (r) { body.appendChild(r); });
  });
});
(function () {  /* do a chart's texts overlap as laid out here? (read by tests) */
  var n = 0, pairs = [];
  document.querySelectorAll('svg[id]').forEach(function (chart) {
    var t = Array.from(chart.querySelectorAll('text')).filter(function (e) {
      return e.getBoundingClientRect().width > 0; });
    var r = t.map(function (e) { return e.getBoundingClientRect(); });
    for (var i = 0; i < r.length; i++) for (var j = i + 1; j < r.length; j++)
      if (r[i].left < r[j].right - 0.5 && r[j].left < r[i].right - 0.5 &&
          r[i].top < r[j].bottom - 0.5 && r[j].top < r[i].bottom - 0.5) {
        n++;
        pairs.push(chart.id + ': ' + t[i].textContent + ' / ' + t[j].textContent);
      }
  });
  document.body.dataset.textOverlaps = n;
  document.body.dataset.textOverlapPairs = pairs.join('; ');
})();
"""


def _e(text: Any) -> str:
    return escape(str(text), quote=True)


def _card(value: str, what: str) -> str:
    return f'<div class="card"><b>{value}</b><small>{_e(what)}</small></div>'


def _summary(result: PlanResult) -> str:
    budget, measured, predicted = (result.budget_bytes, result.measured_peak_bytes,
                                   result.predicted_peak_bytes)
    error = (measured - predicted) / predicted if predicted else 0.0
    cards = [_card(format_budget(budget), 'budget'),
             _card(f'<span id="measured-peak" data-bytes="{measured}">{format_bytes(measured)}'
                   f'</span>', f'measured peak ({measured / budget:.1%} of the budget)'
                   if budget else 'measured peak'),
             _card(f'<span id="predicted-peak" data-bytes="{predicted}">'
                   f'{format_bytes(predicted)}</span>',
                   f'predicted peak (measured {error:+.1%}), at '
                   f'{window_iteration(result.cumulative_iters)}')]
    table = result.table
    if result.predicted_step_time is not None:
        plain = f', plain {table.step_time * 1e3:.0f} ms' if table is not None else ''
        measured_t = (f', measured {result.measured_step_time * 1e3:.0f} ms'
                      if result.measured_step_time is not None else '')
        cards.append(_card(f'{result.predicted_step_time * 1e3:.0f} ms',
                           f'predicted step{plain}{measured_t}'))
    options = result.options
    configured = result.configured or {}
    changed = {k: v for k, v in configured.items() if options.get(k) != v}
    cards.append(_card(', '.join(f'{k}={v}' for k, v in options.items()),
                       'options (configured: ' + ', '.join(f'{k}={v}' for k, v in
                                                           changed.items()) + ')'
                       if changed else 'options (as configured)'))
    modes = {}
    for m in result.plan.values():
        modes[mode_name(m)] = modes.get(mode_name(m), 0) + 1
    plan_text = ', '.join(f'{v} {k}' for k, v in modes.items())
    if result.segments:
        plan_text += f'; {len(result.segments)} segment(s)'
    cards.append(_card(_e(plan_text), f'{len(result.plan)} checkpoint units'))
    if result.margin or result.replans:
        cards.append(_card(f'{result.margin:.1%}', f'margin after {result.replans} re-plan(s)'))
    return '<div class="cards" id="summary">' + ''.join(cards) + '</div>' + _buckets(result)


def _buckets(result: PlanResult) -> str:
    buckets = getattr(result, 'buckets', None)
    if not buckets:
        return ''
    rows = []
    for b in buckets:
        measured = '' if b.measured_peak_bytes is None else format_bytes(b.measured_peak_bytes)
        t = '' if getattr(b, 'predicted_step_time', None) is None else \
            f'{b.predicted_step_time * 1e3:.0f}'
        checkpointed = sum(m is not None for m in b.plan.values())
        rows.append(f'<tr><td>{b.shape[0]}x{b.shape[1]}</td><td>'
                    f'{format_bytes(b.predicted_peak_bytes)}</td><td>{measured}</td>'
                    f'<td>{t}</td><td>{checkpointed}</td><td>{len(b.segments)}</td></tr>')
    return ('<h2>Batch-shape buckets</h2><table id="buckets"><thead><tr><th>shape (HxW)</th>'
            '<th>predicted peak</th><th>measured peak</th><th>predicted step (ms)</th>'
            '<th>units checkpointed</th><th>segments</th></tr></thead><tbody>' +
            ''.join(rows) + '</tbody></table>')


def _curves(timelines: Any, result: PlanResult) -> dict[str, Timeline]:
    if timelines is None:
        return {}
    if hasattr(timelines, 'curves'):
        return timelines.curves(result)
    return dict(timelines)


def _timeline_section(curves: Mapping[str, Timeline], result: PlanResult) -> str:
    head = '<h2>The step\'s memory over time</h2>'
    if not curves:
        return head + ('<p class="note">No timeline was recorded: give the planning a '
                       '<code>ckptzoo.memory.measure.timeline.TimelineSet()</code> '
                       '(<code>plan_memory(..., timelines=...)</code>).</p>')
    data = timeline_series(curves)
    main = data.curves.get('plan') or next(iter(data.curves.values()))
    fig = timeline_figure(data, result.budget_bytes, timelines=curves,
                          cuda=any(t.cuda for t in curves.values()))
    groups = {f'curve-{n}': {'class': 'curve', 'data-label': label,
                             'data-max-bytes': c.peak_bytes, 'data-points': len(c.x)}
              for n, (label, c) in enumerate(data.curves.items())}
    chart = svg(fig, 'timeline', {'data-max-bytes': main.peak_bytes,
                                  'data-budget': result.budget_bytes}, groups)
    notes = ''.join(f'<p class="note"><b>{_e(label)}</b>: {_e(tl.note)}</p>'
                    for label, tl in curves.items() if tl.note)
    return head + f'<div class="scroll">{chart}</div>' + notes


def _units_section(result: PlanResult) -> str:
    table = result.table
    head = '<h2>Checkpoint units (execution order)</h2>'
    if table is None:
        return head + ('<p class="note">No cost table: a plan read back from its file has '
                       'none. Plan with <code>tools/plan_memory.py CONFIG --report</code>.</p>')
    bars = unit_bars(table, result.plan, result.segments or [])
    groups = {f'unit-{i}': {'class': 'unit', 'data-unit': u.name,
                            'data-mode': mode_name(u.chosen)} for i, u in enumerate(bars.units)}
    chart = svg(units_figure(bars), 'units', {'data-units': len(bars.units)}, groups)
    return head + f'<div class="scroll">{chart}</div>' + _units_table(result, bars.modes)


def _units_table(result: PlanResult, modes: list) -> str:
    table = result.table
    buckets = getattr(result, 'buckets', None) or []
    heads = ['#', 'unit'] + [f'{mode_name(m)} MiB' for m in modes] + \
        [f'{mode_name(m)} ms' for m in modes if m is not None] + ['forward ms', 'chosen'] + \
        [f'mode @{b.shape[0]}x{b.shape[1]}' for b in buckets]
    in_segment = {}
    names = table.names
    for first, last in result.segments or []:
        for n in names[names.index(first):names.index(last) + 1]:
            in_segment[n] = f'{first}..{last}'
    rows = []
    for i, u in enumerate(table.units):
        cells = [f'<td>{i}</td>', f'<td>{_e(u.name)}</td>']
        for m in modes:
            cells.append(f'<td data-v="{u.kept[m]}">{u.kept[m] / MiB:.2f}</td>' if m in u.kept
                         else '<td data-v="-1">-</td>')
        for m in modes:
            if m is not None:
                ms = u.extra_time(m) * 1e3
                cells.append(f'<td data-v="{ms:.4f}">{ms:.1f}</td>' if m in u.kept
                             else '<td data-v="-1">-</td>')
        cells.append(f'<td>{u.fwd_time * 1e3:.1f}</td>')
        chosen = mode_name(result.plan.get(u.name))
        if u.name in in_segment:
            chosen += f' (segment {in_segment[u.name]})'
        cells.append(f'<td data-v="{_e(chosen)}">{_e(chosen)}</td>')
        cells += [f'<td>{_e(mode_name(b.plan.get(u.name)))}</td>' for b in buckets]
        rows.append('<tr>' + ''.join(cells) + '</tr>')
    return ('<p class="note">Click a column to sort.</p><div class="tablebox"><table '
            'id="unit-table" class="sortable"><thead><tr>' +
            ''.join(f'<th>{_e(h)}</th>' for h in heads) + '</tr></thead><tbody>' +
            ''.join(rows) + '</tbody></table></div>')


def _fixed_section(result: PlanResult) -> str:
    table = result.table
    if table is None or not table.fixed:
        return ''
    bars = fixed_bars(table, result.plan, result.segments or [])
    chart = svg(fixed_figure(bars, result.budget_bytes), 'fixed',
                {'data-fixed-bytes': sum(bars.parts.values()),
                 'data-budget': result.budget_bytes})
    return ('<h2>Fixed memory beside the activations</h2><p class="note">Parameters, '
            'gradients, optimizer state, the batch (and DDP buckets, fp16 copies) do not '
            'depend on the plan; the activations the units keep after the forward do.</p>' +
            f'<div class="scroll">{chart}</div>')


def _sweep_section(result: PlanResult, sweep: Any) -> str:
    if not sweep or result.table is None:
        return ''
    if sweep is True:
        sweep = memory_time_sweep(result.table)
    points = sweep_points(Sweep(*sweep))
    chosen = (result.predicted_peak_bytes, result.predicted_step_time) \
        if result.predicted_step_time is not None else None
    chart = svg(sweep_figure(points, result.budget_bytes, chosen), 'sweep',
                {'data-budget': result.budget_bytes, 'data-planner-points': len(points.planner)})
    return ('<h2>Memory / time: the planner against flags set by hand</h2><p class="note">'
            'Predicted from the probe: the planner at budgets from the smallest peak to plain\'s'
            ', per-stage <code>with_cp</code> flags (1 = the stage checkpointed), every unit '
            '<code>full</code> and Chen\'s sqrt(n) segments.</p>' +
            f'<div class="scroll">{chart}</div>')


def memory_report_html(result: PlanResult, timelines: Any = None, sweep: Any = None,
                       title: str | None = None) -> str:
    """The report page of ``result`` as a string (see :func:`write_memory_report`)."""
    curves = _curves(timelines, result)
    title = title or 'Memory plan'
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<title>{_e(title)}</title><meta name="viewport" content="width=device-width">'
            f'<style>{_STYLE}</style></head><body><main>'
            f'<h1>{_e(title)}</h1>' + _summary(result) + _timeline_section(curves, result) +
            _units_section(result) + _fixed_section(result) + _sweep_section(result, sweep) +
            f'</main><script>{_SCRIPT}</script></body></html>\n')


def write_memory_report(result: PlanResult, path: str, timelines: Any = None,
                        sweep: Any = None, title: str | None = None) -> str:
    """Write the report of ``result`` (with its cost ``table``) to ``path``; returns ``path``.

    ``timelines``: the :class:`~ckptzoo.memory.measure.timeline.TimelineSet` given to the planning
    (``plan_memory(..., timelines=timelines)``), or ``{label: Timeline}``; the
    curve labelled ``'plan'`` is the chosen plan's, its maximum the measured peak. ``sweep``:
    True to draw the memory / time trade-off from the table, or a
    :class:`~ckptzoo.memory.model.baselines.Sweep`."""
    html = memory_report_html(result, timelines, sweep, title)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(html)
    return path
