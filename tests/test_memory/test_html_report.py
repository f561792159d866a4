"""The memory report: timelines recorded in the planner's own steps (the chosen plan's maximum is
its measured peak, exactly), and the page: one bar group per unit, the budget line where the
budget is, nothing fetched from the network, readable and small with 150 units."""
import json
import logging
import random
import re
from types import SimpleNamespace

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.apis.plan import plan_memory
from ckptzoo.memory import (CostTable, PlanResult, UnitCost, predict_peak, uniform_plan)
from ckptzoo.memory.html_report import memory_report_html, write_memory_report
from ckptzoo.memory.baselines import Sweep, memory_time_sweep
from ckptzoo.memory.step import measure_step, probe_batch, train_step, worst_case_shape
from ckptzoo.memory.svg_charts import MAX_POINTS
from ckptzoo.memory.timeline import PHASES, Timeline, TimelineSet, record_timelines
from tests.test_memory.test_planner import TINY

MiB = 2 ** 20


@pytest.fixture(scope='module')
def planned(tmp_path_factory):
    """TINY at 64 px planned under a budget between every unit 'full' and plain, with the
    planner's timelines."""
    data = dict(TINY['data'], train=dict(TINY['data']['train'], img_size=64))
    set_random_seed(0)
    cfg = Config(dict(TINY, data=data, work_dir=str(tmp_path_factory.mktemp('report'))))
    run = build_training(cfg, logger=logging.getLogger('test_html_report'))
    with record_timelines() as timelines:
        result = plan_memory(run, cfg, 2_950_000)
    return cfg, run, result, timelines


def _attr(html, element_id, name):
    tag = re.search(rf'<[a-z]+ [^>]*id="{element_id}"[^>]*>', html).group(0)
    return re.search(rf'{name}="([^"]*)"', tag).group(1)


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


def test_the_page(planned, tmp_path):
    _, _, result, timelines = planned
    sweep = memory_time_sweep(result.table, points=3)
    path = write_memory_report(result, str(tmp_path / 'report.html'), timelines, sweep)
    html = open(path, encoding='utf-8').read()
    units = re.findall(r'<g class="unit" data-unit="([^"]+)"', html)
    assert units == result.table.names == list(result.plan)
    assert int(_attr(html, 'timeline', 'data-max-bytes')) == result.measured_peak_bytes
    assert int(_attr(html, 'budget', 'data-bytes')) == result.budget_bytes
    y0, px = float(_attr(html, 'timeline', 'data-y0')), \
        float(_attr(html, 'timeline', 'data-px-per-mib'))
    assert float(_attr(html, 'budget', 'y1')) == pytest.approx(
        y0 - result.budget_bytes / MiB * px, abs=0.06)
    assert re.search(r'<circle class="peak" data-label="plan" data-bytes="(\d+)"',
                     html).group(1) == str(result.measured_peak_bytes)
    assert len(re.findall('<circle class="planner"', html)) == len(sweep.planner) <= 3
    assert 'id="sweep"' in html and 'id="fixed"' in html and 'id="unit-table"' in html
    # opens from disk: nothing from the network, no external script, style or image
    assert not re.search(r'https?://|<link|src=|@import', html)
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


def test_150_units_stay_readable_and_small(tmp_path):
    """The units chart widens with the units (the page scrolls it); the names, written
    vertically, are at least a line apart and have room below the bars; each curve keeps at
    most MAX_POINTS points and its exact maximum; the file stays under 5 MB."""
    result, curves = _synthetic(150, 200_000)
    sweep = Sweep([(1_500_000_000, 1.5), (2_000_000_000, 1.2)],
                  {'all off': (2_600_000_000, 1.0), 'Chen sqrt(n)': (1_400_000_000, 1.4)})
    path = write_memory_report(result, str(tmp_path / 'r.html'), curves, sweep)
    html = open(path, encoding='utf-8').read()
    assert len(html.encode()) < 5 * 10 ** 6
    assert len(re.findall(r'<g class="unit" ', html)) == 150
    for label, tl in curves.items():
        path_tag = re.search(rf'<path class="curve" data-label="{label}"[^>]*>', html).group(0)
        assert int(re.search(r'data-points="(\d+)"', path_tag).group(1)) <= MAX_POINTS
        assert int(re.search(r'data-max-bytes="(\d+)"', path_tag).group(1)) == tl.max_bytes
    assert int(_attr(html, 'timeline', 'data-max-bytes')) == result.measured_peak_bytes
    font = float(_attr(html, 'units', 'data-label-font'))
    labels = re.findall(r'<text class="unit-label" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]+)<',
                        html)
    xs = [float(x) for x, _, _ in labels]
    assert len(xs) == 150 and min(b - a for a, b in zip(xs, xs[1:])) >= font
    height = float(_attr(html, 'units', 'height'))
    longest = max(len(name) for *_, name in labels)
    assert float(labels[0][1]) + longest * font * 0.62 <= height  # monospace: 0.6 em a char
    assert float(_attr(html, 'units', 'width')) >= 150 * font


def test_a_plan_without_table_or_timelines_and_buckets():
    """A plan read back from its file has no cost table: the page says how to get one. With
    batch-shape buckets, each has its row, its column of modes and its curve (the validation
    at its shape)."""
    saved = PlanResult.from_json(json.loads(json.dumps(_synthetic(3, 10)[0].to_json())))
    html = memory_report_html(saved)
    assert 'No cost table' in html and 'No timeline was recorded' in html
    assert '<g class="unit"' not in html
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
