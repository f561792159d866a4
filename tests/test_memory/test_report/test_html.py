"""The memory report: timelines recorded in the planner's own steps (the chosen plan's maximum is
its measured peak, exactly); what each chart shows (the plan's curve peaks at the measured peak,
the budget is drawn at the budget, every unit in execution order with its mode); the page: the
charts inline with their key numbers, nothing fetched from the network, no text over another,
readable and small with 150 units."""
import json
import logging
import random
import re
from types import SimpleNamespace
from unittest import mock

import pytest
from matplotlib.text import Text
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.plan import plan_memory
from ckptzoo.memory import (CostTable, PlanResult, UnitCost, predict_peak, uniform_plan)
from ckptzoo.memory.model.baselines import Sweep, memory_time_sweep
from ckptzoo.memory.report.charts import (MAX_POINTS, fixed_bars, fixed_figure, sweep_figure,
                                   sweep_points, timeline_figure, timeline_series, unit_bars,
                                   units_figure)
from ckptzoo.memory.report.html import memory_report_html, write_memory_report
from ckptzoo.memory.measure.step import probe_batch, train_step, worst_case_shape
from ckptzoo.memory.measure.step_peak import measure_step
from ckptzoo.memory.measure.timeline import PHASES, Timeline, TimelineSet
from tests.helpers.configs import TINY

MiB = 2 ** 20


@pytest.fixture(scope='module')
def planned(tmp_path_factory):
    """TINY at 64 px planned under a budget between every unit 'full' and plain, with the
    planner's timelines."""
    data = dict(TINY['data'], train=dict(TINY['data']['train'], img_size=64))
    set_random_seed(0)
    cfg = Config(dict(TINY, data=data, work_dir=str(tmp_path_factory.mktemp('report'))))
    run = build_training(cfg, logger=logging.getLogger('test_html_report'))
    timelines = TimelineSet()
    result, _ = plan_memory(run, cfg, 2_950_000, timelines=timelines)
    return cfg, run, result, timelines


def _attr(html, element_id, name):
    tag = re.search(rf'<[a-z]+ [^>]*id="{element_id}"[^>]*>', html).group(0)
    return re.search(rf'{name}="([^"]*)"', tag).group(1)


def layout_problems(fig):
    """What a reader could not read, as matplotlib lays ``fig`` out: two drawn texts whose
    boxes overlap, a text (partly) outside the figure, a legend over an axes' data area."""
    drawn, draw = [], Text.draw

    def recording(text, renderer):
        if text.get_visible() and text.get_text().strip():
            drawn.append(text)
        return draw(text, renderer)
    with mock.patch.object(Text, 'draw', recording):
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn]
    page = fig.bbox.padded(1)
    problems = [f'{text!r} outside the figure' for text, b in boxes
                if not (page.x0 <= b.x0 and b.x1 <= page.x1 and page.y0 <= b.y0 and
                        b.y1 <= page.y1)]
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if box_a.padded(-0.5).overlaps(box_b.padded(-0.5)):
                problems.append(f'{a!r} overlaps {b!r}')
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    for legend in legends:
        for ax in fig.axes:
            if legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)):
                problems.append('a legend covers an axes')
    return problems


def _line(fig, gid):
    return next(line for ax in fig.axes for line in ax.get_lines() if line.get_gid() == gid)


def test_the_plans_timeline_peaks_at_its_measured_peak(planned):
    """Recorded in the validation step the planner makes anyway: its largest point is the
    peak written to the plan file, byte for byte; the plain one is the probe's plain step,
    whose peak the peak model predicts."""
    _, _, result, timelines = planned
    curves = timelines.curves(result)
    assert list(curves) == ['plain', 'plan']
    plan, plain = curves['plan'], curves['plain']
    assert set(result.plan.values()) - {None}  # something is checkpointed
    assert plan.max_bytes == result.measured_peak_bytes
    assert plain.max_bytes == pytest.approx(
        predict_peak(result.table, uniform_plan(result.table, None)), rel=0.01)
    assert plain.max_bytes > plan.max_bytes
    for tl in (plan, plain):
        starts = [tl.phases[p] for p in PHASES]
        assert starts == sorted(starts) and starts[0] == 0 and starts[-1] < len(tl)
        assert tl.shape == (64, 64)
    # the probe made the optimizer state before its steps: held from the first point on
    assert plain.note is None
    assert plain.lives[0] >= result.table.fixed['parameters'] + \
        result.table.fixed['optimizer_state'] > result.table.fixed['parameters']
    assert any(a.startswith('recompute backbone.') for a in plan.activities)
    assert 'backward backbone.stem' in plain.activities


def test_measure_step_records_without_changing_the_peak(planned):
    cfg, run, _, _ = planned
    batch = probe_batch(run, worst_case_shape(cfg))
    train_step(run, batch)  # the optimizer state exists, as in a run's later steps
    peak, _ = measure_step(run, batch)
    timeline = Timeline()
    again, _ = measure_step(run, batch, timeline=timeline)
    assert again == peak == timeline.max_bytes and timeline.note is None
    points = timeline.downsample(100)
    assert len(points) <= 100 and max(b for _, b in points) == peak
    assert timeline.activity_at(timeline.peak_index) in timeline.activities


def test_the_charts_data(planned):
    """What the charts show, as numbers: the plan's curve peaks at the measured peak byte for
    byte (and is drawn so), the budget line is at the budget, every unit is in the units chart
    in execution order with its chosen mode, the fixed part is the table's; no chart has a
    text over another or a legend over data."""
    _, _, result, timelines = planned
    series = timeline_series(timelines.curves(result))
    plan = series.curves['plan']
    assert plan.peak_bytes == max(plan.y) == result.measured_peak_bytes
    assert [p for p, _, _ in series.phases] == list(PHASES)
    assert all(0 <= x <= 1 for c in series.curves.values() for x in c.x)
    assert series.phases[0][1] == 0 and series.phases[-1][2] == pytest.approx(1)
    fig = timeline_figure(series, result.budget_bytes, timelines=timelines.curves(result))
    assert set(_line(fig, 'budget').get_ydata()) == {result.budget_bytes / MiB}
    assert max(_line(fig, 'curve-1').get_ydata()) == result.measured_peak_bytes / MiB
    bars = unit_bars(result.table, result.plan, result.segments)
    assert [u.name for u in bars.units] == result.table.names == list(result.plan)
    assert [u.chosen for u in bars.units] == list(result.plan.values())
    assert bars.units[0].kept == result.table.units[0].kept
    fixed = fixed_bars(result.table, result.plan, result.segments)
    assert fixed.parts == result.table.fixed
    assert fixed.kept['plan'] < fixed.kept['plain']
    points = sweep_points(memory_time_sweep(result.table, points=3))
    assert points.named.keys() >= {'all off', 'every unit full'}
    assert all(len(flags) == 4 and set(flags) <= {'0', '1'} for flags in points.stages)
    chosen = (result.predicted_peak_bytes, result.predicted_step_time)
    for figure in (fig, units_figure(bars), fixed_figure(fixed, result.budget_bytes),
                   sweep_figure(points, result.budget_bytes, chosen)):
        assert layout_problems(figure) == []


def test_the_page(planned, tmp_path):
    _, _, result, timelines = planned
    sweep = memory_time_sweep(result.table, points=3)
    path = write_memory_report(result, str(tmp_path / 'report.html'), timelines, sweep)
    html = open(path, encoding='utf-8').read()
    for chart in ('timeline', 'units', 'fixed', 'sweep'):
        assert html.count(f'<svg id="{chart}"') == 1
    units = re.findall(r'class="unit" data-unit="([^"]+)" data-mode="([^"]+)">(?:\s*<g[^>]*>)*'
                       r'(?:\s*<[^>]*>)*?\s*<text[^>]*>([^<]+)</text>', html)
    assert [(u, m) for u, m, _ in units] == [(n, m or 'plain') for n, m in result.plan.items()]
    assert [text for u, _, text in units] == [u for u, _, _ in units]  # the name is drawn
    assert int(_attr(html, 'timeline', 'data-max-bytes')) == result.measured_peak_bytes
    assert int(_attr(html, 'timeline', 'data-budget')) == result.budget_bytes
    assert re.search(r'class="curve" data-label="plan" data-max-bytes="(\d+)"',
                     html).group(1) == str(result.measured_peak_bytes)
    assert 'id="timeline-budget"' in html and 'id="timeline-peak-label"' in html
    assert int(_attr(html, 'sweep', 'data-planner-points')) == len(sweep.planner) <= 3
    assert int(_attr(html, 'fixed', 'data-fixed-bytes')) == sum(result.table.fixed.values())
    assert 'id="unit-table"' in html
    # text stays text (searchable, selectable); ids are unique on the page
    assert re.search(r'<text[^>]*>forward</text>', html)
    ids = re.findall(r' id="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    # opens from disk: nothing from the network, no external script, style or image
    assert not re.search(r'https?://|<link|src=|@import|<\?xml|<!DOCTYPE svg', html)
    assert len(html) < 500_000


def _synthetic(n, points):
    """A 150-unit plan in DenseNet's names, with two long timelines (an exact peak inside)."""
    rng = random.Random(0)
    names = ['backbone.stem'] + [f'backbone.denseblock{b}.denselayer{k + 1}'
                                 for b, size in enumerate((6, 12, 64, 58), start=1)
                                 for k in range(size)]
    names = (names + [f'neck.level{i}' for i in range(n - len(names))])[:n]
    units = [UnitCost(name, {None: rng.randint(1, 50) * MiB, 'full': MiB // 4,
                             'selective': rng.randint(1, 20) * MiB},
                      {None: MiB, 'full': MiB, 'selective': MiB},
                      {None: MiB, 'full': 2 * MiB, 'selective': MiB}, fwd_time=0.01,
                      recompute_time={'selective': 0.002}) for name in names]
    table = CostTable(units, [100 * MiB] * n, [100 * MiB] * n, tail_peak=MiB,
                      step_peak=300 * MiB, step_time=1.0,
                      fixed=dict(parameters=30 * MiB, gradients=30 * MiB,
                                 optimizer_state=60 * MiB, batch=12 * MiB))
    plan = {name: rng.choice([None, 'full', 'selective']) for name in names}
    result = PlanResult(2 ** 31, 1_900_000_000, 1_987_654_321, plan, [], False, 1, 2,
                        1.2, 1.3, 0.0, 0, table, dict(fp16=False, cumulative_iters=1,
                                                      samples_per_gpu=4))
    curves = {}
    for label, top in (('plain', 2_500_000_000), ('plan', result.measured_peak_bytes)):
        tl = Timeline(label)
        for i in range(points):
            tl.peaks.append(1_000_000_000 + (i * 7919) % 900_000_000)
            tl.lives.append(tl.peaks[-1])
            tl.doing.append(tl._activity(f'forward {names[i * n // points]}'))
        tl.peaks[points * 2 // 3] = top
        tl.phases = dict(zip(PHASES, (0, points // 3, points // 2, points * 9 // 10)))
        curves[label] = tl
    return result, curves


@pytest.mark.slow
def test_150_units_stay_readable_and_small(tmp_path):
    """The units chart widens with the units (the page scrolls it) so that the names, written
    vertically, overlap nothing; each curve keeps at most MAX_POINTS points and its exact
    maximum; the file stays under 5 MB."""
    result, curves = _synthetic(150, 200_000)
    series = timeline_series(curves)
    for label, tl in curves.items():
        assert len(series.curves[label].x) <= MAX_POINTS
        assert max(series.curves[label].y) == series.curves[label].peak_bytes == tl.max_bytes
    sweep = Sweep([(1_500_000_000, 1.5), (2_000_000_000, 1.2)],
                  {'all off': (2_600_000_000, 1.0), 'Chen sqrt(n)': (1_400_000_000, 1.4)})
    path = write_memory_report(result, str(tmp_path / 'r.html'), curves, sweep)
    html = open(path, encoding='utf-8').read()
    assert len(html.encode()) < 5 * 10 ** 6
    assert len(re.findall(r'class="unit" data-unit=', html)) == 150
    for label, tl in curves.items():
        tag = re.search(rf'class="curve" data-label="{label}"[^>]*>', html).group(0)
        assert int(re.search(r'data-points="(\d+)"', tag).group(1)) <= MAX_POINTS
        assert int(re.search(r'data-max-bytes="(\d+)"', tag).group(1)) == tl.max_bytes
    assert int(_attr(html, 'timeline', 'data-max-bytes')) == result.measured_peak_bytes
    fig = units_figure(unit_bars(result.table, result.plan))
    assert layout_problems(fig) == []
    names = fig.axes[1].get_xticklabels()
    assert len(names) == 150 and min(t.get_fontsize() for t in names) >= 8
    assert layout_problems(timeline_figure(series, result.budget_bytes)) == []


def test_a_plan_without_table_or_timelines_and_buckets():
    """A plan read back from its file has no cost table: the page says how to get one. With
    batch-shape buckets, each has its row, its column of modes and its curve (the validation
    at its shape)."""
    saved = PlanResult.from_dict(json.loads(json.dumps(_synthetic(3, 10)[0].to_dict())))
    html = memory_report_html(saved)
    assert 'No cost table' in html and 'No timeline was recorded' in html
    assert 'class="unit"' not in html and '<svg id="units"' not in html
    result, curves = _synthetic(4, 50)
    result.buckets = [SimpleNamespace(shape=(320, 480), plan=dict.fromkeys(result.plan, 'full'),
                                      segments=[], predicted_peak_bytes=10 * MiB,
                                      measured_peak_bytes=11 * MiB, predicted_step_time=0.5)]
    timelines = TimelineSet()
    timelines.plain = curves['plain']
    small = timelines.new('measured')
    small.shape = (320, 480)
    small.peaks.append(11 * MiB)
    small.lives.append(11 * MiB)
    small.doing.append(0)
    timelines.measured.append(curves['plan'])
    curves['plan'].shape = (640, 640)
    assert list(timelines.curves(result)) == ['plain', 'plan', 'bucket 320x480']
    html = memory_report_html(result, timelines)
    assert '<th>mode @320x480</th>' in html and '<td>320x480</td>' in html
    assert 'data-label="bucket 320x480" data-max-bytes="11534336"' in html
