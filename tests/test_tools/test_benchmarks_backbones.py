"""tools/benchmarks/backbones.py: its configs build for every backbone it names, and the
table in docs/benchmarks.md is the committed results file rendered."""
import json
import os.path as osp

import pytest
import torch

from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
RESULTS = osp.join(ROOT, 'docs', 'results', 'backbones_cpu_2026-11-27.json')


@pytest.mark.parametrize('name', ['regnetx-400mf', 'hrnetv2p-w18', 'mobilenetv2',
                                  'timm-convnext-t'])
def test_each_backbone_config_builds(name):
    from ckptzoo.registry import build_detector
    tool = load_tool('benchmarks/backbones.py')
    cfg = tool.backbone_config(name)
    with torch.device('meta'):
        model = build_detector(cfg.model)
    assert any(u.startswith('backbone.') for u in model.checkpoint_units())
    plan = tool._with_cp_plan(cfg)
    assert plan and all(u.startswith('backbone.') for u in plan)


def test_the_documented_table_is_the_results_file():
    tool = load_tool('benchmarks/backbones.py')
    with open(RESULTS, encoding='utf-8') as f:
        results = json.load(f)
    with open(osp.join(ROOT, 'docs', 'benchmarks.md'), encoding='utf-8') as f:
        doc = f.read()
    assert tool.markdown(results['rows']) in doc
    for row in results['rows']:
        assert row['measured'] <= row['budget'], row
        assert abs(row['predicted'] - row['measured']) <= 0.05 * row['measured'], row
        assert row['full'] < row['plain']
