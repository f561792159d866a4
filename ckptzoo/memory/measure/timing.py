"""Step times of several plans, measured so that they can be compared on a noisy machine.

A plan is ``{unit name: mode}`` or ``({unit name: mode}, [[first, last], ...])`` with
segments. One plan after the other, step by step (ABCABC...), in the same process, on the same batch;
each round starts from the same weights and optimizer state, so that no plan trains on a
model the others did not see. The medians over rounds are what to compare: a machine shared
with other jobs slows all plans of a round alike, and a single slow step moves no median.
"""
from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import torch

from ...utils.model_wrapper import unwrap_model
from .step import Run, on_cuda, train_step
from .step_peak import measure_step

__all__ = ['interleaved_step_times', 'paired_step_times', 'measured_peaks', 'median_times',
           'median_ratio']


#: ``{unit name: mode}``, or ``({unit name: mode}, [[first, last], ...])`` with segments
TimedPlan = Mapping[str, str | None] | tuple


def _sync(run):
    if on_cuda(run):
        torch.cuda.synchronize()


@contextlib.contextmanager
def _each_from_the_same_start(run):
    """A function that sets a plan on the model as it is now (weights, optimizer state);
    all three are restored afterwards."""
    runner = run.runner
    model = unwrap_model(runner.model)
    saved_plan = (model.checkpoint_plan(), model.checkpoint_segments())
    state = copy.deepcopy(model.state_dict())
    opt_state = copy.deepcopy(runner.optimizer.state_dict())

    def reset(plan):
        modes, segments = plan if isinstance(plan, tuple) else (plan, [])
        model.load_state_dict(state)
        runner.optimizer.load_state_dict(opt_state)
        model.replace_checkpoint_plan(modes, segments)
    try:
        yield reset
    finally:
        reset(saved_plan)


def interleaved_step_times(run: Run, batch: dict[str, Any], plans: Mapping[Hashable, TimedPlan],
                           rounds: int = 3) -> dict[Hashable, list[float]]:
    """``{key: [seconds per round]}`` for ``plans = {key: {unit name: mode}}``: each round
    steps once with each plan, in turn. The model's plan, weights and optimizer state are
    restored afterwards."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f'rounds must be a positive int, got {rounds!r}')
    times = {key: [] for key in plans}
    with _each_from_the_same_start(run) as reset:
        for _ in range(rounds):
            for key, plan in plans.items():
                reset(plan)
                _sync(run)
                t0 = time.perf_counter()
                train_step(run, batch)
                _sync(run)
                times[key].append(time.perf_counter() - t0)
    return times


def paired_step_times(run: Run, batch: dict[str, Any],
                      pairs: Sequence[tuple[TimedPlan, TimedPlan]],
                      rounds: int = 3) -> list[list[tuple[float, float]]]:
    """``[[(seconds of a, seconds of b) per round] per pair]`` for ``pairs = [(plan a, plan
    b)]``: each round times every pair's two plans one right after the other (A B, then B A in
    the next round, so that a drifting load favours neither), so their ratio sees the same
    load even when a round takes minutes. Compare the median of the per-round ratios."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f'rounds must be a positive int, got {rounds!r}')
    out = [[] for _ in pairs]
    with _each_from_the_same_start(run) as reset:
        for r in range(rounds):
            for k, (a, b) in enumerate(pairs):
                seconds = {}
                for which in (('a', 'b') if r % 2 == 0 else ('b', 'a')):
                    reset(a if which == 'a' else b)
                    _sync(run)
                    t0 = time.perf_counter()
                    train_step(run, batch)
                    _sync(run)
                    seconds[which] = time.perf_counter() - t0
                out[k].append((seconds['a'], seconds['b']))
    return out


def median_ratio(times: Sequence[tuple[float, float]]) -> float:
    """The median over rounds of ``a / b`` in one pair of :func:`paired_step_times`."""
    return statistics.median(a / b for a, b in times)


def median_times(times: Mapping[Hashable, Sequence[float]]) -> dict[Hashable, float]:
    """``{key: median seconds}`` of :func:`interleaved_step_times`' result."""
    return {key: statistics.median(values) for key, values in times.items()}


def measured_peaks(run: Run, batch: dict[str, Any],
                   plans: Mapping[Hashable, TimedPlan]) -> dict[Hashable, int]:
    """``{key: peak bytes}`` of one step per plan (:func:`~ckptzoo.memory.measure.step.measure_step`:
    exact live-tensor bytes on CPU, ``max_memory_allocated`` on CUDA), from the same start."""
    peaks = {}
    with _each_from_the_same_start(run) as reset:
        for key, plan in plans.items():
            reset(plan)
            peaks[key] = measure_step(run, batch)[0]
    return peaks
