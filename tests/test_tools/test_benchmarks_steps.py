"""tools/benchmarks/steps.py runs every variant in its own process and prints every row (numbers are
reported, never asserted: timings are not tested)."""
import os
import os.path as osp
import re
import subprocess
import sys

import pytest

from tests.helpers.tools import load_tool

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
BENCH = osp.join(ROOT, 'tools', 'benchmarks', 'steps.py')
VARIANTS = ('base', 'fp16', 'accum2', 'with_cp', 'cp_fp16_accum2', 'cp_full', 'cp_full_seg',
            'cp_selective', 'frozen_bn')
NUMBER = r'\d+(\.\d+)?'


def _run(tmp_path, *extra, env=None):
    cmd = [sys.executable, BENCH, osp.join(ROOT, 'configs', 'retinanet_cp.py'),
           '--img-size', '64', '--batch', '2', '--iters', '1', '--warmup', '0',
           '--threads', '1', '--device', 'cpu', '--data-root', str(tmp_path / 'data'),
           '--out-dir', str(tmp_path / 'out'), *extra]
    proc = subprocess.run(cmd, cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **{'PYTHONPATH': ROOT, **(env or {})}))
    return proc


def test_every_variant_row_printed_with_numbers(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert out.startswith('command: `python tools/benchmarks/steps.py ')
    assert 'CPU:' in out and 'peak live tensors' in out
    for name in VARIANTS:
        assert f'[{VARIANTS.index(name) + 1}/{len(VARIANTS)}] {name}:' in proc.stderr
        row = re.search(rf'^\| {name} \|(.*)$', out, re.M)
        assert row, f'no row for {name}:\n{out}'
        cells = [c.strip() for c in row.group(1).split('|')[:-1]]
        # peak, ratio, saved, ratio, held at forward end, ratio, time (min-max), ratio
        assert len(cells) == 8 and 'FAILED' not in row.group(0), row.group(0)
        assert re.fullmatch(NUMBER, cells[0]) and float(cells[0]) > 0
        for i in (1, 3, 5, 7):
            assert re.fullmatch(NUMBER + '×', cells[i]), cells
        assert re.fullmatch(NUMBER, cells[2]) and re.fullmatch(NUMBER, cells[4])
        assert re.fullmatch(rf'{NUMBER} \({NUMBER}–{NUMBER}\)', cells[6])
    held = {name: float(re.search(rf'^\| {name} \| [\d.]+ \| [\d.]+× \| [\d.]+ \| [\d.]+× '
                                  r'\| ([\d.]+) \|', out, re.M).group(1)) for name in VARIANTS}
    # deterministic bytes, not timings: checkpointing the backbone keeps less than plain, the
    # whole detector less again; selective keeps conv outputs (between the two); frozen BN
    # keeps no BN input
    assert held['cp_full'] < held['with_cp'] < held['base'], held
    assert held['cp_full'] < held['cp_selective'] < held['base'], held
    assert held['frozen_bn'] < held['base'], held
    assert osp.getsize(tmp_path / 'out' / 'benchmark.png') > 0
    with open(tmp_path / 'out' / 'benchmark.md', encoding='utf-8') as f:
        assert '| cp_fp16_accum2 |' in f.read()


def test_failed_variant_and_peers_without_timm(tmp_path):
    """A failing variant is a FAILED row with its reason, the other rows still print, the exit
    status is 0 (base ran); --peers without timm says so in timm's rows."""
    hide = tmp_path / 'hide_timm' / 'timm'
    hide.mkdir(parents=True)
    (hide / '__init__.py').write_text("raise ImportError('timm hidden for this test')\n")
    env = dict(CKPTZOO_BENCH_FAIL='fp16',
               PYTHONPATH=os.pathsep.join([str(hide.parent), ROOT]))
    proc = _run(tmp_path, '--variants', 'base', 'fp16', '--peers', '--peer-only',
                'densenet121', '--peer-batch', '2', '--peer-img-size', '32',
                '--peer-plans', 'selective_blocks', env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r'^\| fp16 \| FAILED: RuntimeError: injected failure', out, re.M), out
    assert 'fp16: FAILED: RuntimeError: injected failure' in proc.stderr
    assert re.search(r'^\| base \| [\d.]+ \| 1\.00×', out, re.M)
    for impl, cp in (('ckptzoo', '—'), ('ckptzoo', "'full' \\(with_cp\\)"),
                     ('ckptzoo', "'selective'"), ('ckptzoo', "'selective' on dense layers only"),
                     ('torchvision', '—'),
                     ('torchvision', 'memory_efficient'),
                     ('torchvision', "'selective' policy, whole model in one checkpoint")):
        assert re.search(rf'^\| densenet121 \| {impl} \| {cp} \| [\d.]+ \|', out, re.M), out
    for cp in ('—', 'set_grad_checkpointing'):
        assert re.search(rf'^\| densenet121 \| timm \| {cp} \| FAILED: timm is not installed',
                         out, re.M), out
    assert osp.getsize(tmp_path / 'out' / 'benchmark_peers.png') > 0


def test_rounds_run_round_robin_and_pair_steps(tmp_path):
    """--rounds 2: every job twice, A B A B; the time ratio is the median of per-step ratios
    within each round (a slow round weighs on both sides), not the ratio of pooled medians."""
    proc = _run(tmp_path, '--variants', 'base', 'frozen_bn', '--rounds', '2')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    order = re.findall(r'^\[(\d)/4\] (\w+) \(round (\d)/2\):', proc.stderr, re.M)
    assert order == [('1', 'base', '1'), ('2', 'frozen_bn', '1'), ('3', 'base', '2'),
                     ('4', 'frozen_bn', '2')], proc.stderr
    assert '2 times round-robin' in proc.stdout
    assert re.search(r'^\| frozen_bn \| [\d.]+ \|.*\| [\d.]+ \([\d.]+–[\d.]+\) \| [\d.]+× \|$',
                     proc.stdout, re.M), proc.stdout

    benchmark = load_tool('benchmarks/steps.py')
    from tools.benchmarks import report
    # round 2 twice as slow for both: per-step pairing gives 1.5, pooled medians would not
    ref = report.merge_rounds([dict(ok=True, times=[1.0, 1.0]), dict(ok=True, times=[2.0, 2.0])])
    run = report.merge_rounds([dict(ok=True, times=[1.5, 1.5]), dict(ok=True, times=[3.0, 3.0])])
    assert run['times'] == [1.5, 1.5, 3.0, 3.0]
    assert report.time_ratio(run, ref) == '1.50×'
    assert report.time_ratio(dict(ok=True, times=[3.0]), ref) == '2.00×'
    assert not report.merge_rounds([dict(ok=True, times=[1.0]), dict(ok=False, error='x')])['ok']
    with pytest.raises(SystemExit):
        benchmark.parse_args(['--rounds', '0'])
