"""tools/benchmarks/planner.py measures in the planner's own probe session: a tiny model's
table is made, and the run is left as it was built (weights, optimizer state, RNG)."""
import argparse
import os.path as osp

import torch
from mmengine.config import Config

from tests.helpers.configs import TINY
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool():
    return load_tool('benchmarks/planner.py')


def test_bench_leaves_the_run_as_it_was_built(monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool.synthetic, 'planner_config', lambda name: Config(TINY))
    built = []
    build = tool._build

    def recorded(cfg):
        run = build(cfg)
        built.append((run, {k: v.clone() for k, v in run.model.state_dict().items()},
                      torch.get_rng_state()))
        return run
    monkeypatch.setattr(tool, '_build', recorded)
    out = []
    tool.bench('tiny', argparse.Namespace(budgets=2, rounds=0, per_budget=1), out)
    # the plans set by hand (plain, backbone with_cp, every unit 'full'), then the 2 budgets
    assert out[0] == '### tiny' and sum(line.startswith('| ') for line in out) == 2 + 3 + 2 + 2
    (run, weights, rng), = built
    for key, value in run.model.state_dict().items():
        assert torch.equal(value, weights[key]), key
    assert not run.optimizer.state  # no step left its momentum behind
    assert torch.equal(torch.get_rng_state(), rng)
