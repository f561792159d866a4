"""Time and memory of training steps, read the same way whoever runs the loop.

A benchmark compares steps of different loops (ckptzoo's runner, a peer's plain PyTorch loop):
:class:`StepMeter` reads them alike. Memory on CUDA is ``max_memory_allocated`` /
``max_memory_reserved`` over the timed steps; on CPU, where there is no allocator statistic, the
exact peak of live tensor storage (:class:`~ckptzoo.memory.measure.trackers.LiveTensorTracker`) during
one probe step after them, whose counters would only slow the timed steps; both read by a
:class:`~ckptzoo.memory.measure.peak_meter.PeakMeter`.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from .peak_meter import PeakMeter
from .trackers import SavedTensorCounter

__all__ = ['StepMeter']


class StepMeter:
    """Warm-up steps, timed steps, then one probe step (memory counters), each step being
    ``k`` iterations; the loop calls ``before_iter`` / ``after_forward`` / ``after_iter``
    (:meth:`attach` makes a runner call them) ``total_iters`` times.

    ``result()``: ``times`` (seconds per timed step; an accumulation step is the sum of its
    ``k`` iterations), ``peak_live`` (CPU), ``saved`` (bytes autograd keeps from the forward,
    parameters left out; the largest over the probe step's iterations), ``held`` (CPU: live
    bytes when the probe's forward ends, less those that existed before the step: what the
    forward keeps, whoever keeps it) and ``max_allocated`` / ``max_reserved`` (CUDA).
    """

    def __init__(self, device: str | torch.device, warmup: int, iters: int, k: int = 1):
        self.cuda = str(device).startswith('cuda')
        self.warmup, self.iters, self.k = warmup, iters, k
        self.total_iters = (warmup + iters + 1) * k
        self.times = []
        self._elapsed = 0.0
        self.peak_live = self.saved = 0
        self.held = None
        self.max_allocated = self.max_reserved = None
        self._timed = None  # CUDA: the PeakMeter over the timed steps
        self._probe = None  # CPU: the PeakMeter of the probe's iteration
        self._saved_counter = None

    def _phase(self, i):
        step = i // self.k
        return 'warmup' if step < self.warmup else 'timed' \
            if step < self.warmup + self.iters else 'probe'

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def before_iter(self, i: int, state: Any) -> None:
        """Iteration ``i`` starts; ``state`` holds what exists before it (model, optimizer,
        batch): the baseline of the probe's live-tensor count."""
        phase = self._phase(i)
        if i == self.warmup * self.k and self.cuda:
            self._sync()
            self._timed = PeakMeter(cuda=True).start()
        if phase == 'probe':
            if not self.cuda:
                self._probe = PeakMeter(state).start()
            self._saved_counter = SavedTensorCounter(include_params=False)
            self._saved_counter.__enter__()
        self._sync()
        self._t0 = time.perf_counter()

    def after_forward(self, i: int) -> None:
        """Iteration ``i``'s forward ended: what it holds for backward."""
        if self._probe is not None:
            tracker = self._probe.tracker
            self.held = tracker.live_bytes - tracker.baseline_bytes
        if self._saved_counter is not None:
            self._saved_counter.__exit__(None, None, None)
            self.saved = max(self.saved, self._saved_counter.bytes)
            self._saved_counter = None

    def after_iter(self, i: int) -> None:
        """Iteration ``i`` (backward and optimizer step included) ended: its time, and the
        probe's peak."""
        self._sync()
        elapsed = time.perf_counter() - self._t0
        phase = self._phase(i)
        if phase == 'timed':
            self._elapsed += elapsed
            if (i + 1) % self.k == 0:
                self.times.append(self._elapsed)
                self._elapsed = 0.0
            if i + 1 == (self.warmup + self.iters) * self.k and self._timed is not None:
                self.max_allocated = self._timed.stop()
                self.max_reserved = self._timed.reserved_bytes
        if self._probe is not None:
            probe, self._probe = self._probe, None
            self.peak_live = max(self.peak_live, probe.stop())

    def attach(self, runner: Any) -> None:
        """Read ``runner``'s training iterations: a hook before every other hook (its
        ``after_train_iter``, before the optimizer hook's backward, ends the forward) and one
        after every other (after the backward and the optimizer step)."""
        from ...runner.hooks import Hook
        meter = self

        class StepStart(Hook):
            def before_train_iter(self, runner):
                meter.before_iter(runner.iter, (runner.model, runner.optimizer,
                                                runner.data_batch))

            def after_train_iter(self, runner):
                meter.after_forward(runner.iter)

        class StepEnd(Hook):
            def after_train_iter(self, runner):
                meter.after_iter(runner.iter)

        runner.register_hook(StepStart(), 'HIGHEST')
        runner.register_hook(StepEnd(), 'LOWEST')

    def result(self) -> dict[str, Any]:
        """Step times of the timed iterations and the probe's memory figures (bytes; None
        where the device does not measure them)."""
        return dict(times=self.times, peak_live=self.peak_live if not self.cuda else None,
                    saved=self.saved, held=self.held, max_allocated=self.max_allocated,
                    max_reserved=self.max_reserved)
