"""Paired and interleaved step timing: the order of the steps, the plan in force at each, and
the model restored between them."""
import logging

import pytest
import torch
from mmengine.config import Config

import ckptzoo.memory.measure.timing as timing
from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory.measure.probe import measure_step, probe_batch
from tests.helpers.configs import TINY

A = {'backbone.layer1.0': 'full'}
B = {'backbone.layer2': 'selective'}


@pytest.fixture
def run(tmp_path):
    set_random_seed(0)
    return build_training(Config(dict(TINY, work_dir=str(tmp_path))),
                          logger=logging.getLogger('test_timing'))


@pytest.fixture
def steps(monkeypatch):
    """Each fake step records the modes in force and the first weight, then changes it."""
    seen = []

    def step(run, batch):
        model = run.runner.model
        modes = {k: v for k, v in model.checkpoint_plan().items() if v is not None}
        weight = next(model.parameters())
        seen.append((modes, weight.detach().flatten()[0].item()))
        with torch.no_grad():
            weight.add_(1.0)
    monkeypatch.setattr(timing, 'train_step', step)
    return seen


def _modes(plan, run):
    return {k: v for k, v in run.runner.model.set_checkpoint_plan(
        dict({'*': None}, **plan)).items() if v is not None}


def test_paired_steps_alternate_and_start_from_the_same_model(run, steps):
    a, b = _modes(A, run), _modes(B, run)
    run.runner.model.set_checkpoint_plan({'*': None})
    before = next(run.runner.model.parameters()).detach().clone()
    out = timing.paired_step_times(run, None, [(A, B), (B, A)], rounds=2)
    assert [len(p) for p in out] == [2, 2] and all(t > 0 for p in out for r in p for t in r)
    assert [m for m, _ in steps] == [a, b, b, a, b, a, a, b]  # AB, BA, then reversed
    assert len({w for _, w in steps}) == 1  # every step from the same weights
    assert torch.equal(next(run.runner.model.parameters()), before)
    assert not any(run.runner.model.checkpoint_plan().values())  # the plan restored
    assert timing.median_ratio([(2.0, 1.0), (3.0, 1.0), (9.0, 1.0)]) == 3.0
    with pytest.raises(ValueError, match='rounds must be a positive int'):
        timing.paired_step_times(run, None, [(A, B)], rounds=0)


def test_interleaved_steps_and_measured_peaks(run, steps):
    times = timing.interleaved_step_times(run, None, {'a': A, 'b': B}, rounds=2)
    assert [m for m, _ in steps] == [_modes(A, run), _modes(B, run)] * 2
    run.runner.model.set_checkpoint_plan({'*': None})
    assert set(timing.median_times(times)) == {'a', 'b'}
    batch = probe_batch(run)
    peaks = timing.measured_peaks(run, batch, {'a': A, 'plain': {}})
    run.runner.model.set_checkpoint_plan(A)
    assert peaks['a'] == measure_step(run, batch)[0]
