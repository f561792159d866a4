"""The memory report of a RetinaNet plan made on the CPU, opened in a real browser (headless
Chromium): the rendered page has its four charts, one group per checkpoint unit in execution
order with its mode and its name drawn, the timeline's maximum is the plan file's measured peak
and its budget the plan's, no chart's texts overlap as the browser laid them out, and a
1280x800 screenshot shows the page."""
import json
import os.path as osp
import re
import shutil
import subprocess

import pytest
from PIL import Image

from ckptzoo.datasets import generate_voc
from tests.helpers.tools import load_tool

pytestmark = pytest.mark.subprocess

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'voc', 'retinanet_r50_fpn_1x_voc0712.py')
# a RetinaNet R18 small enough to plan in seconds: 8 base channels, 64 px, 2 images a batch
TINY_R18 = ['model.backbone.depth=18', 'model.backbone.base_channels=8',
            'model.backbone.init_cfg=None', 'model.backbone.frozen_stages=-1',
            'model.neck.in_channels=[8,16,32,64]', 'model.neck.out_channels=8',
            'model.bbox_head.in_channels=8', 'model.bbox_head.feat_channels=8',
            'model.bbox_head.stacked_convs=1', 'data.train.dataset.pipeline.2.img_scale=(64,64)',
            'data.train.times=1', 'data.workers_per_gpu=0']
BUDGET = '3.0MiB'  # between every unit checkpointed (2.8 MiB) and plain (3.3 MiB)


def chromium():
    """The headless browser's command, or None."""
    for name in ('chromium', 'chromium-browser', 'google-chrome', 'google-chrome-stable'):
        path = shutil.which(name)
        if path:
            return path
    return None


def _browse(args, url):
    proc = subprocess.run([chromium(), '--headless', '--no-sandbox', '--disable-gpu',
                           '--hide-scrollbars', *args, url], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _attrs(tag):
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


@pytest.mark.skipif(chromium() is None, reason='no chromium on PATH: `apt-get install '
                    'chromium` (.ci/run installs it) to open the report in a real browser')
def test_retinanet_report_in_a_browser(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the config reads data/VOCdevkit/VOC{2007,2012}
    for year, seed in (('VOC2007', 0), ('VOC2012', 1)):
        generate_voc('data', num_trainval=4, num_test=0, img_size=(64, 64), seed=seed,
                     year=year, names=('aeroplane', 'bicycle', 'bird'))
    report, out = tmp_path / 'report.html', tmp_path / 'plan.json'
    assert load_tool('plan_memory.py').main(
        [CONFIG, '--budget', BUDGET, '--out', str(out), '--report', str(report), '--sweep',
         '--cfg-options', *TINY_R18]) == 0
    plan = json.loads(out.read_text())
    assert set(plan['plan'].values()) - {None}, 'the budget should need checkpoints'
    with Image.open(tmp_path / 'plan.png') as img:  # --sweep's PNG: the report's sweep figure
        assert img.format == 'PNG' and img.size[0] > 600

    dom = _browse(['--dump-dom', '--virtual-time-budget=2000'], report.as_uri())
    charts = {name: _attrs(tag) for tag, name in
              re.findall(r'(<svg id="(timeline|units|fixed|sweep)"[^>]*>)', dom)}
    assert sorted(charts) == ['fixed', 'sweep', 'timeline', 'units']
    units = re.findall(r'class="unit" data-unit="([^"]+)" data-mode="([^"]+)">(?:\s*<[^>]*>)*?'
                       r'\s*<text[^>]*>([^<]+)</text>', dom)
    assert [u for u, _, _ in units] == list(plan['plan'])
    assert [m for _, m, _ in units] == [m or 'plain' for m in plan['plan'].values()]
    assert [text for _, _, text in units] == list(plan['plan'])  # each name drawn as text
    assert re.search(r'<body[^>]* data-text-overlaps="0"', dom), \
        'overlapping texts: ' + str(re.findall(r'data-text-overlap-pairs="([^"]*)"', dom))
    assert int(charts['timeline']['data-max-bytes']) == plan['measured_peak_bytes']
    assert int(charts['timeline']['data-budget']) == plan['budget_bytes']
    assert int(charts['units']['data-units']) == len(plan['plan'])
    curve = _attrs(re.search(r'<g [^>]*class="curve" data-label="plan"[^>]*>', dom).group(0))
    assert int(curve['data-max-bytes']) == plan['measured_peak_bytes']
    assert 'id="timeline-budget"' in dom

    shot = tmp_path / 'shot.png'
    _browse([f'--screenshot={shot}', '--window-size=1280,800'], report.as_uri())
    with Image.open(shot) as img:
        assert img.size == (1280, 800)
        assert len(img.convert('RGB').getcolors(1 << 20)) > 50  # drawn, not blank
