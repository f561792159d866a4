"""The memory report's charts, drawn with matplotlib: a step's memory over time, the units'
bytes and recompute per mode, the fixed memory, the memory / time sweep.

Each chart is two functions: one computes what it shows (``timeline_series``, ``unit_bars``,
``fixed_bars``, ``sweep_points``: plain numbers, what tests check) and one draws that
(``*_figure``). :func:`svg` turns a figure into inline SVG for the page (text stays text, the
key numbers in ``data-*`` attributes); :func:`save_png` writes one to a file (``--sweep``).
Figures are made as :class:`~matplotlib.figure.Figure` on an Agg canvas, without pyplot: no
display is ever opened and nothing stays registered that would need closing. Modes are told
apart by hatch and by name in the legend, not by colour alone.
"""
from __future__ import annotations

import functools
import io
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, NamedTuple

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import Bbox, blended_transform_factory

from ..model.budget import format_budget, format_bytes
from ..model.cost_table import MODES, CostTable
from ..model.peak import plan_from_modes, uniform_plan, unit_kept
from ..measure.timeline import PHASES, Timeline

__all__ = ['MAX_POINTS', 'MODE_STYLE', 'mode_name', 'Curve', 'TimelineData', 'timeline_series',
           'timeline_figure', 'UnitBar', 'UnitBars', 'unit_bars', 'units_figure', 'FixedBars',
           'fixed_bars', 'fixed_figure', 'SweepPoints', 'sweep_points', 'sweep_figure', 'svg',
           'save_png']

MiB = 2 ** 20
#: points per timeline curve, at most (each the largest of its stretch)
MAX_POINTS = 2000
#: mode -> (legend name, colour, matplotlib hatch)
MODE_STYLE = {None: ('plain', '#8c8c8c', ''), 'full': ('full', '#1f5fa8', '//'),
              'selective': ('selective', '#c8680a', '..'),
              'offload': ('offload', '#2b8a3e', 'xx')}
BUDGET_COLOR = '#c00000'
_CURVES = [('#555555', (0, (6, 4)), 1.4), ('#1f5fa8', '-', 1.8), ('#c8680a', (0, (2, 3)), 1.4),
           ('#2b8a3e', (0, (8, 3, 2, 3)), 1.4), ('#7b3fa0', (0, (1, 2)), 1.4),
           ('#a8321f', (0, (10, 4)), 1.4)]
_FIXED_COLORS = ['#4c72b0', '#dd8452', '#55a868', '#c44e52', '#8172b3', '#937860', '#da8bc3',
                 '#8c8c8c']
# set for every figure, whatever the user's matplotlibrc says: text stays text in the SVG, its
# ids do not change from run to run, the font is the one matplotlib measured the labels in
_RC = {'svg.fonttype': 'none', 'svg.hashsalt': 'ckptzoo', 'font.family': 'sans-serif',
       'font.sans-serif': ['DejaVu Sans'], 'font.monospace': ['DejaVu Sans Mono'],
       'font.size': 9, 'axes.titlesize': 10, 'axes.labelsize': 9, 'legend.fontsize': 9,
       'axes.spines.top': False, 'axes.spines.right': False, 'axes.axisbelow': True,
       'grid.color': '#e3e3e3', 'legend.frameon': False, 'hatch.linewidth': 0.8,
       'savefig.facecolor': 'white'}


def mode_name(mode: str | None) -> str:
    """How the report names a mode (None: ``'plain'``)."""
    return MODE_STYLE[mode][0]


def _styled(draw):
    """Run a figure function under :data:`_RC` (matplotlib reads most settings when an artist
    is made, so the whole drawing runs inside it)."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        with mpl.rc_context(_RC):
            return draw(*args, **kwargs)
    return wrapper


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout='constrained')
    FigureCanvasAgg(fig)
    return fig


def _budget_line(ax, budget: int, vertical: bool = False) -> None:
    value = budget / MiB
    label = f'budget {format_budget(budget)}'
    if vertical:
        ax.axvline(value, color=BUDGET_COLOR, ls=(0, (6, 3)), lw=1.4, label=label, gid='budget')
        return
    ax.axhline(value, color=BUDGET_COLOR, ls=(0, (6, 3)), lw=1.4, gid='budget')
    ax.text(0.995, value, label, transform=blended_transform_factory(ax.transAxes, ax.transData),
            ha='right', va='bottom', color=BUDGET_COLOR, fontweight='bold',
            bbox=dict(fc='white', ec='none', alpha=0.8, pad=1))


# ------------------------------------------------------------------------------------------
# the step's memory over time
# ------------------------------------------------------------------------------------------
class Curve(NamedTuple):
    """One curve as drawn: ``x`` on the step axis (0 to 1, see :func:`timeline_series`),
    ``y`` bytes (each the largest of its stretch); its peak's place, bytes and what ran."""
    x: list[float]
    y: list[int]
    peak_x: float
    peak_bytes: int
    where: str


class TimelineData(NamedTuple):
    """``curves`` ``{label: Curve}``; ``phases`` ``[(phase, x start, x end)]``."""
    curves: dict[str, Curve]
    phases: list[tuple[str, float, float]]


#: the largest share of the axis a phase takes (the optimizer step runs many small ops)
_PHASE_CAP = {'loss': 0.12, 'optimizer step': 0.15}


def _phase_spans(curves: Mapping[str, Timeline]) -> dict[str, int]:
    """Per phase, the largest number of points any curve has in it."""
    spans = {}
    for tl in curves.values():
        starts = [tl.phases.get(p, 0 if p == PHASES[0] else None) for p in PHASES]
        for k, p in enumerate(PHASES):
            if starts[k] is None:
                continue
            end = next((s for s in starts[k + 1:] if s is not None), len(tl))
            spans[p] = max(spans.get(p, 0), end - starts[k])
    return spans


def timeline_series(curves: Mapping[str, Timeline], max_points: int = MAX_POINTS
                    ) -> TimelineData:
    """Each curve cut to at most ``max_points`` points (each the largest of its stretch, so
    the peak stays exact) on a step axis from 0 to 1 where each phase is as wide as its
    longest curve's share of the points, within 8 % and :data:`_PHASE_CAP`: curves of
    different lengths line up phase by phase, and a short phase stays visible."""
    spans = _phase_spans(curves)
    phases = [p for p in PHASES if p in spans]
    total = sum(spans.values()) or 1
    raw = [min(max(spans[p] / total, 0.08), _PHASE_CAP.get(p, 1.0)) for p in phases]
    place, start = {}, 0.0
    for p, r in zip(phases, raw):
        place[p] = (start, r / sum(raw))
        start += r / sum(raw)

    def x_of(tl, i):
        p = tl.phase_at(i)
        x0, width = place[p]
        return x0 + width * (i - tl.phases.get(p, 0)) / max(spans[p], 1)

    out = {}
    for label, tl in curves.items():
        points = tl.downsample(max_points)
        i = tl.peak_index
        out[label] = Curve([x_of(tl, k) for k, _ in points], [b for _, b in points],
                           x_of(tl, i) if len(tl) else 0.0, tl.max_bytes,
                           tl.activity_at(i) if len(tl) else '')
    return TimelineData(out, [(p, x0, x0 + w) for p, (x0, w) in place.items()])


def _curve_label(label: str, curve: Curve, tl: Timeline | None) -> str:
    shape = f', batch {tl.shape[0]}x{tl.shape[1]}' if tl is not None and tl.shape else ''
    return f'{label}: peak {format_bytes(curve.peak_bytes)} at {curve.where}{shape}'


@_styled
def timeline_figure(data: TimelineData, budget: int, chosen: str = 'plan',
                    timelines: Mapping[str, Timeline] | None = None,
                    cuda: bool = False) -> Figure:
    """Every curve's live MiB through the phases (plain grey dashed, the plan solid blue,
    buckets in other colours and dashes), the budget, each peak marked; the chosen curve's peak
    named with what ran there, in headroom above the curves where no curve runs."""
    fig = _figure(12.2, 4.9)
    ax = fig.add_subplot()
    for k, (_, x0, x1) in enumerate(data.phases):
        if k % 2 == 0:
            ax.axvspan(x0, x1, color='#eef2f7', lw=0, zorder=0)
    ax.set_xticks([(a + b) / 2 for _, a, b in data.phases],
                  [p for p, _, _ in data.phases], fontweight='bold')
    ax.tick_params(axis='x', length=0)
    ax.grid(axis='y')
    top = max([budget] + [c.peak_bytes for c in data.curves.values()]) / MiB or 1.0
    ax.set(xlim=(0, 1), ylim=(0, top * 1.2), ylabel='live memory (MiB)',
           xlabel='step progress (' + ('allocator reads at unit events' if cuda else
                                       'tensor ops') +
           ', in execution order; each phase scaled to its longest curve)')
    k = 0 if 'plain' in data.curves else 1
    for n, (label, c) in enumerate(data.curves.items()):
        color, dash, width = _CURVES[min(n + k, len(_CURVES) - 1)]
        ax.plot(c.x, [b / MiB for b in c.y], color=color, ls=dash, lw=width, gid=f'curve-{n}',
                label=_curve_label(label, c, (timelines or {}).get(label)))
        ax.plot([c.peak_x], [c.peak_bytes / MiB], 'o', mfc='white', mec=color, mew=1.6, ms=6,
                zorder=5)
    _budget_line(ax, budget)
    main = chosen if chosen in data.curves else next(iter(data.curves), None)
    if main is not None:
        c = data.curves[main]
        right = c.peak_x > 0.5
        ax.annotate(f'peak {format_bytes(c.peak_bytes)}: {c.where}',
                    (c.peak_x, c.peak_bytes / MiB), (c.peak_x, top * 1.13), va='center',
                    ha='right' if right else 'left', fontweight='bold', gid='peak-label',
                    arrowprops=dict(arrowstyle='-', lw=0.8, color='#111',
                                    relpos=(1, 0.5) if right else (0, 0.5)))
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color=BUDGET_COLOR, ls=(0, (6, 3)), lw=1.4))
    labels.append(f'budget {format_budget(budget)}')
    fig.legend(handles, labels, loc='outside lower left', ncols=2 if len(labels) > 2 else 3)
    return fig


# ------------------------------------------------------------------------------------------
# the units
# ------------------------------------------------------------------------------------------
class UnitBar(NamedTuple):
    """A unit: ``kept`` ``{mode: bytes kept after the forward}``; ``recompute`` ``{mode:
    seconds it adds to a step}`` of the checkpointing modes measured; ``chosen`` its mode."""
    name: str
    chosen: str | None
    kept: dict[str | None, int]
    recompute: dict[str, float]


class UnitBars(NamedTuple):
    """The units in execution order, the ``modes`` measured, ``segments`` as ``(first, last)``
    unit indices."""
    modes: list[str | None]
    units: list[UnitBar]
    segments: list[tuple[int, int]]


def unit_bars(table: CostTable, plan: Mapping[str, str | None],
              segments: Sequence[Sequence[str]] = ()) -> UnitBars:
    """What the units chart shows of ``table`` and the chosen ``plan`` / ``segments``."""
    modes = [m for m in MODES if any(m in u.kept for u in table.units)]
    index = {n: i for i, n in enumerate(table.names)}
    units = [UnitBar(u.name, plan.get(u.name), dict(u.kept),
                     {m: u.extra_time(m) for m in u.kept if m is not None})
             for u in table.units]
    return UnitBars(modes, units, [(index[a], index[b]) for a, b in segments])


def _mode_handles(modes) -> list:
    handles = [Patch(facecolor='#8c8c8c' if m is None else 'white', edgecolor=MODE_STYLE[m][1],
                     hatch=MODE_STYLE[m][2], label=f'{mode_name(m)} ({mode_name(m)[0].upper()})')
               for m in modes]
    return handles + [Patch(facecolor='white', edgecolor='black', lw=1.8,
                            label='chosen (outlined)')]


@_styled
def units_figure(bars: UnitBars) -> Figure:
    """Per unit in execution order, a bar per measured mode of the MiB it keeps after the
    forward (top) and the ms its recompute adds to a step (bottom), the chosen mode's bars
    outlined and its letter under the top panel; segments bracketed. The figure widens with
    the units (the page scrolls it) so that the names, written vertically, stay a line apart."""
    n, modes = len(bars.units), bars.modes
    longest = max([len(u.name) for u in bars.units] + [4])
    wide = n > 30  # wider than the page: it scrolls, the scale at both ends, the legend above
    fig = _figure(max(8.0, 1.4 + 0.24 * n if wide else 5.0 + min(0.45, 7.2 / max(n, 1)) * n),
                  4.4 + longest * 0.085)
    kept_ax, time_ax = fig.subplots(2, 1, height_ratios=[2, 1])
    width = 0.84 / len(modes)
    for j, m in enumerate(modes):
        _, color, hatch = MODE_STYLE[m]
        xs = [i - 0.42 + width * (j + 0.5) for i in range(n)]
        chosen = [u.chosen == m for u in bars.units]
        style = dict(width=width * 0.92, facecolor=color if m is None else 'white',
                     hatch=hatch, hatchcolor=color, linewidth=[1.6 if c else 0.6 for c in chosen],
                     edgecolor=['black' if c else color for c in chosen])
        kept_ax.bar(xs, [u.kept.get(m, 0) / MiB for u in bars.units], **style)
        if m is not None:
            time_ax.bar(xs, [u.recompute.get(m, 0.0) * 1e3 for u in bars.units], **style)
    kept_top = max([b / MiB for u in bars.units for b in u.kept.values()] + [1e-3])
    kept_ax.set_ylim(0, kept_top * (1.2 if bars.segments else 1.05))
    for ax, ylabel in ((kept_ax, 'kept after forward (MiB)'), (time_ax, 'recompute (ms/step)')):
        ax.set_xlim(-0.6, n - 0.4)
        ax.grid(axis='y')
        ax.set_ylabel(ylabel)
        if wide:
            ax.tick_params(axis='y', labelright=True)
    kept_ax.set_xticks(range(n), [mode_name(u.chosen)[0].upper() for u in bars.units],
                       fontweight='bold')
    kept_ax.set_xlabel('chosen mode', labelpad=2)
    labels = time_ax.set_xticks(range(n), [u.name for u in bars.units], rotation=90,
                                family='monospace', fontsize=8)
    for i, text in enumerate(labels):
        text.set_gid(f'unit-{i}')
    blend = blended_transform_factory(kept_ax.transData, kept_ax.transAxes)
    for a, b in bars.segments:
        kept_ax.plot([a - 0.45, a - 0.45, b + 0.45, b + 0.45], [0.9, 0.94, 0.94, 0.9],
                     transform=blend, color='#1f5fa8', lw=1.5)
    handles = _mode_handles(modes)
    if bars.segments:
        handles.append(Line2D([], [], color='#1f5fa8', lw=1.5,
                              label='segment (one checkpoint over the bracketed units)'))
    fig.legend(handles=handles, loc='outside upper left' if wide else 'outside right upper',
               ncols=len(handles) if wide else 1)
    return fig


# ------------------------------------------------------------------------------------------
# the fixed part
# ------------------------------------------------------------------------------------------
class FixedBars(NamedTuple):
    """``parts`` ``{kind: bytes}`` that do not depend on the plan; ``kept`` ``{'plain':
    bytes, 'plan': bytes}`` of activations kept after the forward."""
    parts: dict[str, int]
    kept: dict[str, int]


def fixed_bars(table: CostTable, plan: Mapping[str, str | None],
               segments: Sequence[Sequence[str]] = ()) -> FixedBars:
    """The fixed memory of ``table`` beside the activations plain and the plan keep."""
    chosen = plan_from_modes(table, plan, segments)
    return FixedBars(dict(table.fixed), {'plain': sum(unit_kept(table, uniform_plan(table, None))),
                                         'plan': sum(unit_kept(table, chosen))})


@_styled
def fixed_figure(bars: FixedBars, budget: int) -> Figure:
    """The fixed bytes by kind as one stacked bar (named in the legend, top part first) and
    a bar per ``kept``, on one MiB scale with the budget."""
    fig = _figure(8.4, 3.6)
    ax = fig.add_subplot()
    bottom, handles = 0.0, []
    for k, (name, nbytes) in enumerate(bars.parts.items()):
        handles.append(ax.bar(0, nbytes / MiB, 0.6, bottom=bottom, edgecolor='white',
                              color=_FIXED_COLORS[k % len(_FIXED_COLORS)],
                              label=f'{name.replace("_", " ")} {format_bytes(nbytes)}'))
        bottom += nbytes / MiB
    for x, (name, nbytes) in enumerate(bars.kept.items(), start=1):
        m = None if name == 'plain' else 'full'
        cont = ax.bar(x, nbytes / MiB, 0.6, facecolor='#8c8c8c' if m is None else 'white',
                      edgecolor=MODE_STYLE[m][1], hatch=MODE_STYLE[m][2])
        ax.bar_label(cont, [format_bytes(nbytes)], padding=2)
    ax.set_xticks(range(len(bars.kept) + 1),
                  [f'fixed\n{format_bytes(sum(bars.parts.values()))}'] +
                  [f'{name}\n(activations kept)' for name in bars.kept])
    top = max([sum(bars.parts.values()), budget] + list(bars.kept.values())) / MiB
    ax.set(ylim=(0, top * 1.15), xlim=(-0.5, len(bars.kept) + 0.5), ylabel='MiB')
    ax.grid(axis='y')
    _budget_line(ax, budget)
    ax.legend(handles=handles[::-1], loc='upper left', bbox_to_anchor=(1.01, 1),
              title='fixed, by kind')
    return fig


# ------------------------------------------------------------------------------------------
# the memory / time sweep
# ------------------------------------------------------------------------------------------
class SweepPoints(NamedTuple):
    """``(peak bytes, step seconds)``: ``planner`` at each budget (by peak), ``stages`` by
    per-stage ``with_cp`` flags (``'0101'``), ``named`` the other plans set by hand."""
    planner: list[tuple[int, float]]
    stages: dict[str, tuple[int, float]]
    named: dict[str, tuple[int, float]]


def sweep_points(sweep: Any) -> SweepPoints:
    """A :class:`~ckptzoo.memory.model.baselines.Sweep` split into what the sweep chart draws."""
    stages = {k[len('stages '):]: v for k, v in sweep.baselines.items()
              if k.startswith('stages ')}
    named = {k: v for k, v in sweep.baselines.items() if not k.startswith('stages ')}
    return SweepPoints(sorted(sweep.planner), stages, named)


_NAMED = {'all off': ('^', '#a8321f'), 'every unit full': ('v', '#a8321f'),
          'Chen sqrt(n)': ('D', '#7b3fa0')}


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@_styled
def sweep_figure(points: SweepPoints, budget: int | None = None,
                 chosen: tuple[int, float] | None = None, title: str | None = None) -> Figure:
    """Predicted step time (ms) against predicted peak (MiB): the planner at many budgets
    (a line of circles) against the plans set by hand: per-stage ``with_cp`` flags (squares,
    each labelled with its flags where the label covers no other and stays inside), every unit
    ``full``, all off, Chen's sqrt(n); the budget and the chosen plan. ``tools/plan_memory.py
    --sweep`` saves it as PNG, the report inlines it as SVG."""
    fig = _figure(11.6, 4.8)
    ax = fig.add_subplot()
    ax.grid(True)
    if points.planner:
        ax.plot([p / MiB for p, _ in points.planner], [t * 1e3 for _, t in points.planner],
                'o-', color='#1f5fa8', ms=5, lw=1.6, label=f'planner ({len(points.planner)} '
                'budgets)')
    if points.stages:
        ax.plot([p / MiB for p, _ in points.stages.values()],
                [t * 1e3 for _, t in points.stages.values()], 's', mfc='none', mec='#c8680a',
                mew=1.4, ms=7, label='per-stage with_cp flags (1: stage checkpointed)')
    for name, (p, t) in points.named.items():
        marker, color = _NAMED.get(name, ('P', '#a8321f'))
        ax.plot([p / MiB], [t * 1e3], marker, color=color, ms=8, label=name)
    if chosen is not None:
        ax.plot([chosen[0] / MiB], [chosen[1] * 1e3], 'D', color='black', ms=7,
                label='chosen plan', zorder=5)
    if budget is not None:
        _budget_line(ax, budget, vertical=True)
    ax.set(xlabel='predicted peak (MiB)', ylabel='predicted step time (ms)')
    if title:
        ax.set_title(title)
    ax.margins(0.06)
    fig.legend(loc='outside right upper')
    fig.draw_without_rendering()  # lay out once, then place the labels where they have room
    fig.set_layout_engine('none')
    renderer, inside = fig.canvas.get_renderer(), ax.get_window_extent()
    every = points.planner + list(points.stages.values()) + list(points.named.values()) + \
        ([chosen] if chosen else [])
    r = 5 * fig.dpi / 72  # a marker's half width in pixels
    placed = [Bbox.from_extents(x - r, y - r, x + r, y + r) for x, y in
              ax.transData.transform([(p / MiB, t * 1e3) for p, t in every])]
    for flags, (p, t) in points.stages.items():
        for dx, ha in ((5, 'left'), (-5, 'right')):
            text = ax.annotate(flags, (p / MiB, t * 1e3), (dx, 3), textcoords='offset points',
                               ha=ha, fontsize=7, color='#7a3e06')
            # with room to spare: a browser lays the text out in its own font metrics
            box = text.get_window_extent(renderer).expanded(1.25, 1.3)
            if inside.x0 <= box.x0 and box.x1 <= inside.x1 and box.y1 <= inside.y1 and \
                    not any(_overlaps(box, b) for b in placed):
                placed.append(box)
                break
            text.remove()
    return fig


# ------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------
def _attrs(values: Mapping[str, Any]) -> str:
    return ''.join(f' {k}="{escape(str(v), quote=True)}"' for k, v in values.items())


def svg(fig: Figure, fig_id: str, data: Mapping[str, Any] | None = None,
        groups: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """``fig`` as an inline ``<svg id="fig_id" data-...>`` for an HTML page: no XML prolog,
    no metadata, no namespace URLs (the HTML parser knows SVG), every id prefixed with
    ``fig_id`` so that several figures share a page; the artists with gid ``g`` get the
    attributes ``groups[g]`` (``class``, ``data-*``) on their ``<g>``."""
    out = io.StringIO()
    with mpl.rc_context(_RC):
        fig.savefig(out, format='svg', metadata={'Date': None})
    text = out.getvalue()
    text = text[text.index('<svg'):]
    text = re.sub(r'\s*<metadata>.*?</metadata>', '', text, flags=re.S)
    text = re.sub(r' xmlns(:xlink)?="[^"]*"', '', text).replace('xlink:href=', 'href=')
    text = re.sub(r'(\bid="|url\(#|href="#)', rf'\g<1>{fig_id}-', text)
    groups = groups or {}

    def tag(match):
        extra = groups.get(match.group(1))
        return match.group(0) + (_attrs(extra) if extra else '')
    text = re.sub(rf'<g id="{fig_id}-([^"]+)"', tag, text)
    return f'<svg id="{fig_id}"{_attrs(data or {})}' + text[len('<svg'):]


def save_png(fig: Figure, path: str, dpi: int = 100) -> str:
    """Write ``fig`` as a PNG to ``path``; returns ``path``."""
    with mpl.rc_context(_RC):
        fig.savefig(path, format='png', dpi=dpi)
    return path
