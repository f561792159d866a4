"""tools/benchmarks/cuda_check.py: without a GPU a dry run of the same code paths (CUDA parts
skipped with one line each); the committed GPU results render to the tables docs/benchmarks.md
quotes (so the documented numbers are the measured ones)."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
RESULTS = osp.join(ROOT, 'docs', 'results')
MIB = 2 ** 20


@pytest.mark.slow
@pytest.mark.subprocess
def test_dry_run_without_a_gpu(tmp_path):
    out = tmp_path / 'out'
    proc = subprocess.run(
        [sys.executable, osp.join(ROOT, 'tools/benchmarks/cuda_check.py'), '--out-dir', str(out),
         '--models', 'retinanet'], cwd=str(tmp_path), capture_output=True, text=True,
        timeout=600, env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=''))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('No CUDA GPU: a dry run')
    for skipped in ('CUDA-only tests: skipped', "retinanet every unit 'offload': skipped",
                    'retinanet fp16 (loss_scale=512.): skipped'):
        assert sum(ln.startswith(skipped) for ln in lines) == 1, skipped
    results = json.loads((out / 'cuda_check.json').read_text())
    assert results['info']['gpu'] is None and results['img_size'] == [160, 96]
    rows = results['models']['retinanet']['rows']
    assert sorted(rows) == ['base', 'bf16', 'cp_full', 'with_cp']
    assert all(r['ok'] and r['peak_live'] > 0 and len(r['times']) == 1 for r in rows.values())
    plans = results['models']['retinanet']['plans']
    assert plans['ok'] and len(plans['runs']) == 3
    for run in plans['runs']:
        assert run['buckets'] and run['over_budget'] == 0
        for b in run['buckets']:
            assert b['steps'] >= 1 and b['allocated'] <= run['budget'], (run, b)
    md = (out / 'cuda_check.md').read_text()
    assert 'no GPU: a dry run' in md and '| plain | ' in md


def test_the_documented_cuda_numbers_are_the_committed_results():
    tool = load_tool('benchmarks/cuda_check.py')
    with open(osp.join(ROOT, 'docs', 'benchmarks.md'), encoding='utf-8') as f:
        doc = f.read()
    cuda = doc[doc.index('\n## CUDA\n'):]
    names = sorted(n for n in os.listdir(RESULTS) if n.startswith('cuda_check_'))
    assert names
    for name in names:
        with open(osp.join(RESULTS, name), encoding='utf-8') as f:
            results = json.load(f)
        assert results['info']['gpu'] in cuda  # the GPU is named
        tables = tool.render(results)
        for model, res in results['models'].items():
            for variant, r in res['rows'].items():
                mib = tool._mib(r['max_allocated'])
                assert f'| {mib} |' in tables
                assert f'| {mib} ' in cuda or f'| {mib} (' in cuda, (name, model, variant, mib)
                assert f'| {tool._mib(r["max_reserved"])} |' in cuda, (model, variant)
            for run in res['plans']['runs']:
                assert all(b['allocated'] <= run['budget'] for b in run['buckets'])
                worst = max(b['allocated'] for b in run['buckets'])
                assert tool._mib(worst) in cuda, (model, run['budget'])
