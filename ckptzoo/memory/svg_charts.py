"""The memory report's charts as inline SVG, drawn here so that the page needs no network and
no plotting library: a step's memory over time, the units' bytes and recompute per mode, the
fixed memory, the memory / time sweep.

Modes are told apart by pattern (solid, hatched, dotted, cross-hatched) and by name in the
legend, never by colour alone. Coordinates are rounded to 0.1 px; every chart carries the
numbers it was drawn from in ``data-*`` attributes (bytes, seconds), which tests read.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

from .budget import format_bytes
from .cost_table import MODES, CostTable
from .timeline import PHASES, Timeline

__all__ = ['MODE_STYLE', 'mode_name', 'pattern_defs', 'nice_ticks', 'curve_style',
           'timeline_legend', 'timeline_chart', 'units_chart', 'mode_legend', 'fixed_chart',
           'sweep_chart', 'MAX_POINTS']

MiB = 2 ** 20
#: points per timeline curve, at most (each the largest of its stretch)
MAX_POINTS = 2000
#: mode -> (legend name, fill, pattern or None)
MODE_STYLE = {None: ('plain', '#8c8c8c', None), 'full': ('full', '#1f5fa8', 'hatch'),
              'selective': ('selective', '#c8680a', 'dots'),
              'offload': ('offload', '#2b8a3e', 'cross')}
_CURVES = [('#555555', '6 4', 1.6), ('#1f5fa8', None, 2.2), ('#c8680a', '2 3', 1.6),
           ('#2b8a3e', '8 3 2 3', 1.6), ('#7b3fa0', '1 2', 1.6), ('#a8321f', '10 4', 1.6)]


def mode_name(mode: str | None) -> str:
    """How the report names a mode (None: ``'plain'``)."""
    return MODE_STYLE[mode][0]


def _f(x: float) -> str:
    return f'{x:.1f}'.rstrip('0').rstrip('.')


def _e(text) -> str:
    return escape(str(text), quote=True)


def pattern_defs() -> str:
    """The ``<defs>`` of the mode fills (``url(#fill-full)`` ...), one per page."""
    out = ['<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>']
    for mode, (name, color, kind) in MODE_STYLE.items():
        if kind is None:
            continue
        shapes = {'hatch': f'<path d="M0,6 L6,0 M-1,1 L1,-1 M5,7 L7,5" stroke="{color}" '
                           'stroke-width="1.6"/>',
                  'dots': f'<circle cx="3" cy="3" r="1.5" fill="{color}"/>',
                  'cross': f'<path d="M0,0 L6,6 M6,0 L0,6" stroke="{color}" '
                           'stroke-width="1.1"/>'}[kind]
        out.append(f'<pattern id="fill-{name}" width="6" height="6" '
                   f'patternUnits="userSpaceOnUse"><rect width="6" height="6" fill="#fff"/>'
                   f'{shapes}</pattern>')
    out.append('</defs></svg>')
    return ''.join(out)


def _fill(mode):
    name, color, kind = MODE_STYLE[mode]
    return (color if kind is None else f'url(#fill-{name})'), color


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(top / step - 1e-9)) + 1)]


def _tick_text(v: float) -> str:
    return f'{v:g}' if v >= 1 or v == 0 else f'{v:.2g}'


def _y_axis(x: float, y0: float, scale: float, ticks: Sequence[float], title: str,
            width: float = 0.0, title_x: float = 14) -> list[str]:
    """A vertical axis at ``x`` (value v at ``y0 - v * scale``), grid lines ``width`` long."""
    out = [f'<line x1="{_f(x)}" y1="{_f(y0)}" x2="{_f(x)}" y2="{_f(y0 - ticks[-1] * scale)}" '
           'stroke="#333"/>']
    for v in ticks:
        y = y0 - v * scale
        out.append(f'<line x1="{_f(x - 4)}" y1="{_f(y)}" x2="{_f(x + width)}" y2="{_f(y)}" '
                   f'stroke="{"#333" if not width else "#e3e3e3"}"/>')
        out.append(f'<text x="{_f(x - 6)}" y="{_f(y + 4)}" text-anchor="end" '
                   f'class="tick">{_tick_text(v)}</text>')
    mid = y0 - ticks[-1] * scale / 2
    out.append(f'<text class="axis-title" transform="translate({_f(title_x)},{_f(mid)}) '
               f'rotate(-90)" text-anchor="middle">{_e(title)}</text>')
    return out


# ------------------------------------------------------------------------------------------
# the step's memory over time
# ------------------------------------------------------------------------------------------
def _phase_spans(curves):
    """Per phase, the largest number of points any curve has in it."""
    spans = {}
    for tl in curves.values():
        starts = [tl.phases.get(p) for p in PHASES]
        for k, p in enumerate(PHASES):
            if starts[k] is None:
                continue
            end = next((s for s in starts[k + 1:] if s is not None), len(tl))
            spans[p] = max(spans.get(p, 0), end - starts[k])
    return spans


#: the largest share of the axis a phase takes (the optimizer step runs many small ops)
_PHASE_CAP = {'loss': 0.12, 'optimizer step': 0.15}


def curve_style(n: int, label: str, curves: Mapping[str, Timeline]) -> tuple:
    """``(colour, dash pattern, width)`` of curve ``n``: plain grey and dashed, the plan solid
    blue, buckets in other colours and dash patterns."""
    k = n + (1 if 'plain' not in curves else 0)
    return _CURVES[min(k, len(_CURVES) - 1)]


def timeline_legend(curves: Mapping[str, Timeline]) -> str:
    """The curves' line samples, names and peaks (what ran there), as HTML."""
    items = []
    for n, (label, tl) in enumerate(curves.items()):
        color, dash, stroke = curve_style(n, label, curves)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ''
        where = tl.activity_at(tl.peak_index) if len(tl) else ''
        shape = f', batch {tl.shape[0]}x{tl.shape[1]}' if tl.shape else ''
        note = f' <em>({_e(tl.note)})</em>' if tl.note else ''
        items.append(f'<li><svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" '
                     f'stroke="{color}" stroke-width="{stroke}"{dash_attr}/></svg> '
                     f'<b>{_e(label)}</b>: peak {format_bytes(tl.max_bytes)} at '
                     f'<i>{_e(where)}</i>{shape}{note}</li>')
    items.append('<li><svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" '
                 'stroke="#c00000" stroke-width="1.6" stroke-dasharray="9 4"/></svg> '
                 'budget</li>')
    return '<ul class="legend">' + ''.join(items) + '</ul>'


def timeline_chart(curves: Mapping[str, Timeline], budget: int, chosen: str = 'plan',
                   width: int = 1180, height: int = 350) -> str:
    """``<svg id="timeline">``: every curve's live bytes through the phases of the step (each
    phase as wide as its longest curve's share of the ops, within 8 % and :data:`_PHASE_CAP`
    of the axis), the budget, each curve's peak marked; the chosen curve's peak labelled with
    what ran there."""
    left, right, top, bottom = 78, width - 20, 14, height - 50
    spans = _phase_spans(curves)
    phases = [p for p in PHASES if p in spans]
    total = sum(spans.values()) or 1
    raw = [min(max(spans[p] / total, 0.08), _PHASE_CAP.get(p, 1.0)) for p in phases]
    widths = [(right - left) * r / sum(raw) for r in raw]
    x0 = {p: left + sum(widths[:k]) for k, p in enumerate(phases)}
    top_bytes = max([budget] + [tl.max_bytes for tl in curves.values()]) * 1.1 or 1
    ticks = nice_ticks(top_bytes / MiB)
    scale = (bottom - top) / (ticks[-1] * MiB)  # px per byte
    main = chosen if chosen in curves else next(iter(curves), None)
    head = (f'<svg id="timeline" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'data-max-bytes="{curves[main].max_bytes if main else 0}" '
            f'data-y0="{_f(bottom)}" data-px-per-mib="{scale * MiB:.6f}" '
            f'aria-label="live memory during one training step">')
    out = [head]
    for k, p in enumerate(phases):
        shade = '#f4f6f9' if k % 2 == 0 else '#ffffff'
        out.append(f'<rect x="{_f(x0[p])}" y="{top}" width="{_f(widths[k])}" '
                   f'height="{bottom - top}" fill="{shade}"/>')
        out.append(f'<text x="{_f(x0[p] + widths[k] / 2)}" y="{bottom + 16}" '
                   f'text-anchor="middle" class="phase">{_e(p)}</text>')
    out += _y_axis(left, bottom, scale * MiB, ticks, 'live memory (MiB)', right - left)
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>')
    unit = 'allocator reads at unit events' if any(t.cuda for t in curves.values()) else \
        'tensor ops'
    out.append(f'<text x="{_f((left + right) / 2)}" y="{bottom + 36}" text-anchor="middle" '
               f'class="axis-title">step progress ({unit}, in execution order; each phase '
               'scaled to its longest curve)</text>')
    y_b = bottom - budget * scale
    out.append(f'<line id="budget" data-bytes="{budget}" x1="{left}" y1="{_f(y_b)}" '
               f'x2="{right}" y2="{_f(y_b)}" stroke="#c00000" stroke-width="1.6" '
               'stroke-dasharray="9 4"/>')
    out.append(f'<text x="{right - 4}" y="{_f(y_b - 5)}" text-anchor="end" class="budget">'
               f'budget {format_bytes(budget)}</text>')

    def x_of(tl, i):
        p = tl.phase_at(i)
        start = tl.phases.get(p, 0)
        return x0[p] + widths[phases.index(p)] * (i - start) / max(spans[p], 1)

    for n, (label, tl) in enumerate(curves.items()):
        color, dash, stroke = curve_style(n, label, curves)
        points = tl.downsample(MAX_POINTS)
        d = ' '.join(f'{"M" if k == 0 else "L"}{_f(x_of(tl, i))},{_f(bottom - b * scale)}'
                     for k, (i, b) in enumerate(points))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ''
        out.append(f'<path class="curve" data-label="{_e(label)}" '
                   f'data-max-bytes="{tl.max_bytes}" data-points="{len(points)}" d="{d}" '
                   f'fill="none" stroke="{color}" stroke-width="{stroke}"{dash_attr}/>')
        i = tl.peak_index
        px, py = x_of(tl, i), bottom - tl.max_bytes * scale
        where = tl.activity_at(i) if len(tl) else ''
        out.append(f'<circle class="peak" data-label="{_e(label)}" data-bytes="{tl.max_bytes}" '
                   f'data-where="{_e(where)}" cx="{_f(px)}" cy="{_f(py)}" r="4.5" '
                   f'fill="#fff" stroke="{color}" stroke-width="2"><title>{_e(label)} peak '
                   f'{format_bytes(tl.max_bytes)}: {_e(where)}</title></circle>')
        if label == main:  # in the headroom above the curves, a leader line to the marker
            anchor = 'end' if px > (left + right) / 2 else 'start'
            dx = -6 if anchor == 'end' else 6
            out.append(f'<path d="M{_f(px)},{_f(py - 5)} L{_f(px)},{top + 8} L{_f(px + dx)},'
                       f'{top + 8}" fill="none" stroke="#111" stroke-width="0.8"/>'
                       f'<text id="peak-label" x="{_f(px + dx * 1.5)}" y="{top + 12}" '
                       f'text-anchor="{anchor}" class="peak-label">peak '
                       f'{format_bytes(tl.max_bytes)}: {_e(where)}</text>')
    out.append('</svg>')
    return ''.join(out)


# ------------------------------------------------------------------------------------------
# the units
# ------------------------------------------------------------------------------------------
def units_chart(table: CostTable, chosen: Mapping[str, str | None],
                segments: Sequence[Sequence[str]] = ()) -> tuple[str, str]:
    """``(axis svg, chart svg)``: per unit in execution order a ``<g class="unit">`` with a bar
    per measured mode of the MiB it keeps after the forward (top) and the ms its recompute adds
    to a step (bottom), the chosen mode's bars outlined and named under them; the unit's name
    runs vertically below. The chart widens with the units (the page scrolls it); the axes
    are a separate svg that stays in view."""
    modes = [m for m in MODES if any(m in u.kept for u in table.units)]
    bar, gap = 8, 8
    group = max(len(modes) * bar + gap, 18)
    font = 11
    longest = max([len(n) for n in table.names] + [4])
    label_h = int(longest * font * 0.62) + 14
    top, h1, mid, h2 = 26, 220, 34, 110
    y1, y2 = top + h1, top + h1 + mid + h2  # the two baselines
    y_chosen = y2 + 16
    height = y_chosen + 10 + label_h
    width = 14 + group * len(table.units) + 10
    kept_top = max(u.kept[m] for u in table.units for m in u.kept) / MiB * 1.05
    time_top = max([u.extra_time(m) for u in table.units for m in u.kept] + [0]) * 1e3 * 1.1
    kt, tt = nice_ticks(kept_top or 1), nice_ticks(time_top or 1)
    ks, ts = h1 / kt[-1], h2 / tt[-1]  # px per MiB, px per ms
    axis = [f'<svg id="units-axis" width="78" '
            f'height="{height}">']
    axis += _y_axis(76, y1, ks, kt, 'kept after forward (MiB)')
    axis += _y_axis(76, y2, ts, tt, 'recompute (ms/step)')
    axis.append(f'<text x="74" y="{y_chosen + 4}" text-anchor="end" class="tick">chosen</text>')
    axis.append('</svg>')
    out = [f'<svg id="units" width="{width}" '
           f'height="{height}" data-units="{len(table.units)}" data-group-width="{group}" '
           f'data-label-font="{font}">']
    for v in kt:
        out.append(f'<line x1="0" x2="{width}" y1="{_f(y1 - v * ks)}" y2="{_f(y1 - v * ks)}" '
                   'stroke="#e3e3e3"/>')
    for v in tt:
        out.append(f'<line x1="0" x2="{width}" y1="{_f(y2 - v * ts)}" y2="{_f(y2 - v * ts)}" '
                   'stroke="#e3e3e3"/>')
    index = {n: i for i, n in enumerate(table.names)}
    for first, last in segments:  # a bracket over the segment's groups
        a, b = index[first], index[last]
        xa, xb = 14 + a * group + 2, 14 + (b + 1) * group - 2
        out.append(f'<path class="segment" d="M{xa},{top - 2} L{xa},{top - 8} L{xb},{top - 8} '
                   f'L{xb},{top - 2}" fill="none" stroke="#1f5fa8" stroke-width="1.5"/>'
                   f'<text x="{_f((xa + xb) / 2)}" y="{top - 11}" text-anchor="middle" '
                   f'class="tick">segment</text>')
    for i, u in enumerate(table.units):
        gx = 14 + i * group
        mode = chosen.get(u.name)
        g = [f'<g class="unit" data-unit="{_e(u.name)}" data-mode="{_e(mode_name(mode))}">']
        for k, m in enumerate(modes):
            if m not in u.kept:
                continue
            fill, color = _fill(m)
            x = gx + gap / 2 + k * bar
            outline = ' stroke="#000" stroke-width="1.6"' if m == mode else \
                f' stroke="{color}" stroke-width="0.6"'
            kh = u.kept[m] / MiB * ks
            g.append(f'<rect class="kept" data-mode="{mode_name(m)}" data-bytes="{u.kept[m]}" '
                     f'x="{_f(x)}" y="{_f(y1 - kh)}" width="{bar - 1}" height="{_f(kh)}" '
                     f'fill="{fill}"{outline}><title>{_e(u.name)} {mode_name(m)}: keeps '
                     f'{u.kept[m] / MiB:.2f} MiB</title></rect>')
            if m is not None:
                ms = u.extra_time(m) * 1e3
                th = ms * ts
                g.append(f'<rect class="recompute" data-mode="{mode_name(m)}" '
                         f'data-ms="{ms:.3f}" x="{_f(x)}" y="{_f(y2 - th)}" '
                         f'width="{bar - 1}" height="{_f(th)}" fill="{fill}"{outline}>'
                         f'<title>{_e(u.name)} {mode_name(m)}: +{ms:.1f} ms</title></rect>')
        cx = gx + group / 2
        g.append(f'<text class="chosen" x="{_f(cx)}" y="{y_chosen + 4}" text-anchor="middle">'
                 f'{mode_name(mode)[0].upper()}</text>')
        g.append(f'<text class="unit-label" x="{_f(cx + font / 2 - 1)}" y="{y_chosen + 12}" '
                 f'transform="rotate(-90 {_f(cx + font / 2 - 1)} {y_chosen + 12})" '
                 f'text-anchor="end">{_e(u.name)}</text>')
        g.append('</g>')
        out.append(''.join(g))
    out.append(f'<line x1="0" y1="{y1}" x2="{width}" y2="{y1}" stroke="#333"/>'
               f'<line x1="0" y1="{y2}" x2="{width}" y2="{y2}" stroke="#333"/>')
    out.append('</svg>')
    return ''.join(axis), ''.join(out)


def mode_legend(modes: Sequence[str | None]) -> str:
    """Swatches with the mode names (the fills of :func:`pattern_defs`)."""
    items = []
    for m in modes:
        fill, color = _fill(m)
        items.append(f'<span class="swatch"><svg width="22" height="14"><rect x="1" y="1" '
                     f'width="20" height="12" fill="{fill}" stroke="{color}"/></svg> '
                     f'{mode_name(m)} ({mode_name(m)[0].upper()})</span>')
    items.append('<span class="swatch"><svg width="22" height="14"><rect x="1" y="1" '
                 'width="20" height="12" fill="#fff" stroke="#000" stroke-width="2"/></svg> '
                 'chosen (outlined)</span>')
    return ' '.join(items)


# ------------------------------------------------------------------------------------------
# the fixed part
# ------------------------------------------------------------------------------------------
_FIXED_COLORS = ['#4c72b0', '#dd8452', '#55a868', '#c44e52', '#8172b3', '#937860', '#da8bc3',
                 '#8c8c8c']


def fixed_chart(fixed: Mapping[str, int], kept: Mapping[str, int], budget: int,
                height: int = 300) -> str:
    """``<svg id="fixed">``: the plan-independent bytes by kind as one stacked bar, each part
    named beside it, and beside that one bar per ``kept`` (activations kept after the forward,
    e.g. plain and the plan), on one MiB scale with the budget."""
    top, bottom = 20, height - 40
    biggest = max([sum(fixed.values()), budget] + list(kept.values())) * 1.05 or 1
    ticks = nice_ticks(biggest / MiB)
    s = (bottom - top) / ticks[-1]  # px per MiB
    width = 78 + 60 + 200 + 90 * len(kept) + 10
    out = [f'<svg id="fixed" width="{width}" '
           f'height="{height}" data-fixed-bytes="{sum(fixed.values())}">']
    out += _y_axis(76, bottom, s, ticks, 'MiB', width - 86)
    y, last_label = bottom, bottom + 12
    x = 96
    for k, (name, nbytes) in enumerate(fixed.items()):
        h = nbytes / MiB * s
        color = _FIXED_COLORS[k % len(_FIXED_COLORS)]
        out.append(f'<rect class="fixed-part" data-kind="{_e(name)}" data-bytes="{nbytes}" '
                   f'x="{x}" y="{_f(y - h)}" width="44" height="{_f(h)}" fill="{color}" '
                   f'stroke="#fff"><title>{_e(name)} {format_bytes(nbytes)}</title></rect>')
        ly = min(y - h / 2 + 4, last_label - 13)  # labels never closer than a line
        out.append(f'<text x="{x + 52}" y="{_f(ly)}" class="tick" text-anchor="start">'
                   f'{_e(name.replace("_", " "))} {format_bytes(nbytes)}</text>')
        last_label = ly
        y -= h
    out.append(f'<text x="{x + 22}" y="{bottom + 16}" text-anchor="middle" class="tick">'
               f'fixed</text>')
    x = 96 + 44 + 200
    for k, (name, nbytes) in enumerate(kept.items()):
        h = nbytes / MiB * s
        fill, color = _fill(None if name == 'plain' else 'full')
        out.append(f'<rect class="kept-total" data-label="{_e(name)}" data-bytes="{nbytes}" '
                   f'x="{x}" y="{_f(bottom - h)}" width="44" height="{_f(h)}" fill="{fill}" '
                   f'stroke="{color}"><title>{_e(name)} {format_bytes(nbytes)}</title></rect>'
                   f'<text x="{x + 22}" y="{_f(bottom - h - 4)}" text-anchor="middle" '
                   f'class="tick">{format_bytes(nbytes)}</text>'
                   f'<text x="{x + 22}" y="{bottom + 16}" text-anchor="middle" class="tick">'
                   f'{_e(name)}</text>')
        x += 90
    out.append(f'<text x="{96 + 44 + 200 + 45 * len(kept) - 22}" y="{bottom + 32}" '
               'text-anchor="middle" class="tick">activations kept after forward</text>')
    yb = bottom - budget / MiB * s
    out.append(f'<line class="budget" data-bytes="{budget}" x1="78" x2="{width - 10}" '
               f'y1="{_f(yb)}" y2="{_f(yb)}" stroke="#c00000" stroke-dasharray="9 4"/>'
               f'<text x="{width - 12}" y="{_f(yb - 4)}" text-anchor="end" class="budget">'
               f'budget {format_bytes(budget)}</text>')
    out.append(f'<line x1="78" y1="{bottom}" x2="{width - 10}" y2="{bottom}" stroke="#333"/>')
    out.append('</svg>')
    return ''.join(out)


# ------------------------------------------------------------------------------------------
# the memory / time sweep
# ------------------------------------------------------------------------------------------
def _marker(kind, x, y, color, title, cls):
    t = f'<title>{_e(title)}</title>'
    if kind == 'circle':
        return f'<circle class="{cls}" cx="{_f(x)}" cy="{_f(y)}" r="4" fill="{color}">{t}</circle>'
    if kind == 'square':
        return (f'<rect class="{cls}" x="{_f(x - 4)}" y="{_f(y - 4)}" width="8" height="8" '
                f'fill="none" stroke="{color}" stroke-width="1.6">{t}</rect>')
    if kind == 'triangle':
        return (f'<path class="{cls}" d="M{_f(x)},{_f(y - 5)} L{_f(x + 5)},{_f(y + 4)} '
                f'L{_f(x - 5)},{_f(y + 4)} Z" fill="{color}">{t}</path>')
    return (f'<path class="{cls}" d="M{_f(x)},{_f(y - 6)} L{_f(x + 6)},{_f(y)} L{_f(x)},'
            f'{_f(y + 6)} L{_f(x - 6)},{_f(y)} Z" fill="{color}">{t}</path>')


def _range_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values spanning ``lo`` to ``hi`` (not from 0: the points of a sweep are
    close together)."""
    span = hi - lo if hi > lo else abs(hi) or 1.0
    step = nice_ticks(span, count)[1]
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int(math.ceil((hi - start) / step - 1e-9)) + 1)] \
        if hi > start else [start, start + step]


def sweep_chart(planner: Sequence[tuple[int, float]], baselines: Mapping[str, tuple[int, float]],
                budget: int, chosen: tuple[int, float] | None = None, width: int = 900,
                height: int = 440) -> str:
    """``<svg id="sweep">``: predicted step time (ms) against predicted peak (MiB) of the
    planner at many budgets (a line of circles) and of the plans set by hand: per-stage
    ``with_cp`` flags (squares, labelled with their flags where the label has room), every
    unit ``'full'`` and all off (triangles), Chen's sqrt(n) (diamond); the budget as a
    vertical line. Every marker names itself on hover."""
    left, right, top, bottom = 78, width - 230, 20, height - 50
    pts = list(planner) + list(baselines.values()) + ([chosen] if chosen else [])
    peaks = [p / MiB for p, _ in pts] + [budget / MiB]
    times = [t * 1e3 for _, t in pts]
    pad_x, pad_y = (max(peaks) - min(peaks)) * 0.04, (max(times) - min(times)) * 0.06
    xt = _range_ticks(min(peaks) - pad_x, max(peaks) + pad_x)
    yt = _range_ticks(min(times) - pad_y, max(times) + pad_y)
    xs = (right - left) / (xt[-1] - xt[0])
    ys = (bottom - top) / (yt[-1] - yt[0])

    def X(p):
        return left + (p / MiB - xt[0]) * xs

    def Y(t):
        return bottom - (t * 1e3 - yt[0]) * ys
    out = [f'<svg id="sweep" width="{width}" height="{height}" data-budget="{budget}">']
    for v in yt:
        y = bottom - (v - yt[0]) * ys
        out.append(f'<line x1="{left - 4}" x2="{right}" y1="{_f(y)}" y2="{_f(y)}" '
                   f'stroke="#e3e3e3"/><text x="{left - 6}" y="{_f(y + 4)}" text-anchor="end" '
                   f'class="tick">{_tick_text(v)}</text>')
    for v in xt:
        x = left + (v - xt[0]) * xs
        out.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{top}" y2="{bottom + 4}" '
                   f'stroke="#e3e3e3"/><text x="{_f(x)}" y="{bottom + 18}" '
                   f'text-anchor="middle" class="tick">{_tick_text(v)}</text>')
    out.append(f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>'
               f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#333"/>')
    out.append(f'<text x="{_f((left + right) / 2)}" y="{bottom + 38}" text-anchor="middle" '
               'class="axis-title">predicted peak (MiB)</text>')
    out.append(f'<text class="axis-title" transform="translate(16,{_f((top + bottom) / 2)}) '
               'rotate(-90)" text-anchor="middle">predicted step time (ms)</text>')
    xb = X(budget)
    out.append(f'<line class="budget" data-bytes="{budget}" x1="{_f(xb)}" x2="{_f(xb)}" '
               f'y1="{top}" y2="{bottom}" stroke="#c00000" stroke-dasharray="9 4"/>'
               f'<text x="{_f(xb + 4)}" y="{top + 10}" class="budget">budget</text>')
    d = ' '.join(f'{"M" if k == 0 else "L"}{_f(X(p))},{_f(Y(t))}'
                 for k, (p, t) in enumerate(planner))
    out.append(f'<path d="{d}" fill="none" stroke="#1f5fa8" stroke-width="1.8"/>')
    for p, t in planner:
        out.append(_marker('circle', X(p), Y(t), '#1f5fa8',
                           f'planner: {format_bytes(p)}, {t * 1e3:.1f} ms', 'planner'))
    shapes = {'all off': 'triangle', 'every unit full': 'triangle', 'Chen sqrt(n)': 'diamond'}
    placed = []  # (x, y, width) of the labels drawn: a label never covers another
    named_first = sorted(baselines.items(), key=lambda kv: kv[0].startswith('stages '))
    for name, (p, t) in named_first:
        stage = name.startswith('stages ')
        color = '#c8680a' if stage else '#a8321f'
        x, y = X(p), Y(t)
        out.append(_marker('square' if stage else shapes.get(name, 'diamond'), x, y, color,
                           f'{name}: {format_bytes(p)}, {t * 1e3:.1f} ms', 'baseline'))
        label = name[len('stages '):] if stage else name
        w = len(label) * (5.5 if stage else 6.5)
        lx, ly = x + 6, y - 5
        if lx + w > right:
            lx = x - 6 - w
        if all(abs(ly - py) >= 11 or lx + w <= px or px + pw <= lx for px, py, pw in placed):
            placed.append((lx, ly, w))
            out.append(f'<text x="{_f(lx)}" y="{_f(ly)}" class="{"small" if stage else "tick"}">'
                       f'{_e(label)}</text>')
    if chosen:
        out.append(_marker('diamond', X(chosen[0]), Y(chosen[1]), '#000',
                           f'chosen plan: {format_bytes(chosen[0])}, {chosen[1] * 1e3:.1f} ms',
                           'chosen'))
    legend = [('circle', '#1f5fa8', f'planner ({len(planner)} budgets)'),
              ('square', '#c8680a', 'per-stage with_cp flags'),
              ('triangle', '#a8321f', 'all off / every unit full'),
              ('diamond', '#a8321f', 'Chen sqrt(n)'), ('diamond', '#000', 'chosen plan')]
    for k, (kind, color, text) in enumerate(legend):
        y = top + 10 + 20 * k
        out.append(_marker(kind, right + 24, y, color, text, 'legend-marker') +
                   f'<text x="{right + 36}" y="{y + 4}" class="legend">{_e(text)}</text>')
    out.append('</svg>')
    return ''.join(out)
