"""The peak memory and the time of one training step with the plan in force: the one
measurement the probe's validation, the timing and the benchmarks share. It runs the step of
:mod:`~ckptzoo.memory.measure.step` and, asked for a curve, records it with
:mod:`~ckptzoo.memory.measure.timeline` (which runs steps the same way: neither imports this)."""
from __future__ import annotations

import time
from typing import Any

import torch

from .peak_meter import PeakMeter
from .step import Run, on_cuda, step_tensors, train_step
from .timeline import measure_with_timeline

__all__ = ['measure_step']


def measure_step(run: Run, batch: dict[str, Any], timeline: Any = None) -> tuple[int, float]:
    """``(peak bytes, seconds)`` of one step with the plan in force: the exact live-tensor
    peak on CPU, ``max_memory_allocated`` on CUDA (:class:`~ckptzoo.memory.measure.peak_meter.PeakMeter`).
    ``timeline`` (a :class:`~ckptzoo.memory.measure.timeline.Timeline`, or None for none) records the
    step's memory over time, its maximum the peak returned."""
    if timeline is not None:
        return measure_with_timeline(run, batch, timeline)
    cuda = on_cuda(run)
    if cuda:
        torch.cuda.synchronize()
    with PeakMeter(step_tensors(run, batch), cuda=cuda) as meter:
        t0 = time.perf_counter()
        train_step(run, batch)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    return meter.peak_bytes, seconds
