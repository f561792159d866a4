"""A training step's memory over time: the live bytes through forward, loss, backward and the
optimizer step, and what ran at each point (which unit's forward, backward or recompute).

Recorded inside steps the planner makes anyway (the probe's plain step, the validation step),
never in extra ones: on CPU the exact :class:`~ckptzoo.memory.measure.trackers.LiveTensorTracker`
notes the live bytes after every tensor op (a point's bytes are the largest the tracker saw
since the previous point, so the largest point *is* the step's measured peak); on CUDA
``memory_allocated`` / ``max_memory_allocated`` are read where a unit's forward, backward or
recompute starts or ends and where a phase starts.

``timelines = TimelineSet(); plan_memory(..., timelines=timelines)`` collects them from the
planner as it runs: the planner's probe session hands a new timeline of the set to each
:func:`~ckptzoo.memory.measure.probe.probe` and :func:`~ckptzoo.memory.measure.step.measure_step` it makes
(their ``timeline`` argument).
"""
from __future__ import annotations

import contextlib
import time
import weakref
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from ...models.checkpointing import CheckpointObserver, observe
from ...utils.model_wrapper import unwrap_model
from ...utils.nested import iter_tensors
from ..model.budget import format_bytes
from .step import Run, on_cuda, optimizer_state_bytes, step_tensors, train_step
from .peak_meter import PeakMeter
from .trackers import LiveTensorTracker

__all__ = ['PHASES', 'Timeline', 'TimelineSet', 'recording', 'measure_with_timeline',
           'timeline_from_events', 'optimizer_state_bytes']

#: the phases of a step, in order
PHASES = ('forward', 'loss', 'backward', 'optimizer step')


class Timeline:
    """Points in execution order: ``peaks[i]`` the largest live bytes since point ``i - 1``,
    ``lives[i]`` the live bytes at point ``i``, ``activities[doing[i]]`` what ran
    (``'forward backbone.layer1.0'``, ``'recompute neck.level2'``, ``'optimizer step'`` ...);
    ``phases``: ``{phase: index of its first point}``; ``shape``: the batch's ``(H, W)``."""

    def __init__(self, label: str | None = None):
        self.label = label
        self.shape: tuple[int, int] | None = None
        self.cuda = False
        self.peaks = array('q')
        self.lives = array('q')
        self.doing = array('l')
        self.activities: list[str] = []
        self._index: dict[str, int] = {}
        self.phases: dict[str, int] = {}
        self.note: str | None = None
        self._now = self._activity('forward')
        self._after_units = None

    # -- recording ----------------------------------------------------------------------
    def _activity(self, text):
        if text not in self._index:
            self._index[text] = len(self.activities)
            self.activities.append(text)
        return self._index[text]

    def op(self, tracker: LiveTensorTracker) -> None:
        """A point after a tensor op (the tracker calls it): the largest live bytes since the
        previous point, and the live bytes now."""
        self.peaks.append(max(tracker.window_peak, tracker.live_bytes))
        self.lives.append(tracker.live_bytes)
        self.doing.append(self._now)
        tracker.window_peak = 0

    def _cuda_point(self):
        torch.cuda.synchronize()
        self.peaks.append(torch.cuda.max_memory_allocated())
        self.lives.append(torch.cuda.memory_allocated())
        self.doing.append(self._now)
        torch.cuda.reset_peak_memory_stats()

    def now(self, activity: str) -> None:
        """What runs from here on (on CUDA, a point closes what ran until now)."""
        if self.cuda:
            self._cuda_point()
        if activity == 'forward' and self.activities[self._now].startswith('forward '):
            self._after_units = len(self.peaks)
        self._now = self._activity(activity)

    def phase(self, name: str) -> None:
        """Phase ``name`` (one of :data:`PHASES`) starts here."""
        self.now(name)
        if name == 'backward':  # the loss: after the last unit's forward, to the backward
            start = self._after_units if self._after_units is not None else len(self.peaks)
            loss = self._activity('loss')
            for i in range(start, len(self.peaks)):
                self.doing[i] = loss
            self.phases['loss'] = start
        self.phases[name] = len(self.peaks)

    def finish(self) -> None:
        """The end of the step (on CUDA, the last point)."""
        if self.cuda:
            self._cuda_point()

    def shift(self, nbytes: int, before: str | None = None) -> None:
        """Add ``nbytes`` to every point (before phase ``before`` only, if given): memory the
        step held but did not see, e.g. DDP's gradient buckets when the probe steps the module
        alone, or optimizer state that a first step makes in its optimizer step."""
        stop = self.phases.get(before, len(self.peaks)) if before else len(self.peaks)
        for i in range(stop):
            self.peaks[i] += nbytes
            self.lives[i] += nbytes

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.peaks)

    @property
    def max_bytes(self) -> int:
        """The step's peak: the largest point."""
        return max(self.peaks) if self.peaks else 0

    @property
    def peak_index(self) -> int:
        """The first point at the peak."""
        return self.peaks.index(self.max_bytes) if self.peaks else 0

    def activity_at(self, i: int) -> str:
        """What ran at point ``i``."""
        return self.activities[self.doing[i]]

    def phase_at(self, i: int) -> str:
        """The phase point ``i`` is in."""
        current = PHASES[0]
        for name in PHASES:
            if self.phases.get(name, len(self) + 1) <= i:
                current = name
        return current

    def downsample(self, max_points: int = 2000) -> list[tuple[int, int]]:
        """``[(point index, bytes)]``: at most ``max_points`` points, each the largest of its
        stretch (so the maximum is kept exactly), in order."""
        n = len(self)
        if n <= max_points:
            return list(enumerate(self.peaks))
        out = []
        for b in range(max_points):
            lo, hi = b * n // max_points, (b + 1) * n // max_points
            if hi > lo:
                chunk = self.peaks[lo:hi]
                top = max(chunk)
                out.append((lo + chunk.index(top), top))
        return out


class _UnitLabels(CheckpointObserver):
    """Tells the timeline which unit's forward, backward (a hook on its outputs' gradient) or
    recompute runs."""

    def __init__(self, timeline, names):
        self.timeline = timeline
        self.names = names  # id(CheckpointUnit) -> name
        self.current = None
        self.regions = weakref.WeakKeyDictionary()

    def unit_call(self, run, unit, function, args, module):
        name = self.names.get(id(unit))
        if name is None or self.timeline.phases.get('backward') is not None or \
                not torch.is_grad_enabled():
            return run()
        self.timeline.now(f'forward {name}')
        self.current = name
        try:
            out = run()
        finally:
            self.current = None
            self.timeline.now('forward')
        for t in iter_tensors(out):
            if t.requires_grad:
                t.register_hook(self._backward_of(name))
        return out

    def _backward_of(self, name):
        def hook(grad):
            self.timeline.now(f'backward {name}')
        return hook

    def region_call(self, run, region, recomputing):
        if not recomputing:
            self.regions[region] = self.current
            return run()
        timeline = self.timeline
        before = timeline.activities[timeline._now]
        timeline.now(f'recompute {self.regions.get(region) or "?"}')
        try:
            return run()
        finally:
            timeline.now(before)


@contextlib.contextmanager
def recording(run: Run, batch: dict[str, Any], timeline: Timeline,
              tracker: LiveTensorTracker | None = None) -> Iterator[Any]:
    """Record one step of ``run`` into ``timeline`` inside the block; yields the callable to
    pass as :func:`~ckptzoo.memory.measure.step.train_step`'s ``on_forward_end``. On CPU ``tracker``
    (already tracking the step's tensors) notes every op; on CUDA the allocator is read at
    every event. A step that makes the optimizer state (a run's first) is drawn as the steps
    after it, which hold that state from their start: see :attr:`Timeline.note`."""
    model = unwrap_model(run.runner.model)
    optimizer = run.runner.optimizer
    timeline.cuda = on_cuda(run)
    img = batch.get('img') if isinstance(batch, Mapping) else None
    if isinstance(img, torch.Tensor) and img.dim() >= 2:
        timeline.shape = tuple(int(s) for s in img.shape[-2:])
    names = {id(u): n for n, u in model.checkpoint_units().items()} \
        if hasattr(model, 'checkpoint_units') else {}
    state_before = optimizer_state_bytes(optimizer)
    with contextlib.ExitStack() as stack:
        if timeline.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            tracker.window_peak = 0
            timeline.op(tracker)  # the step's start: what it holds
            tracker.timeline = timeline
            stack.callback(setattr, tracker, 'timeline', None)
        timeline.phases['forward'] = 0
        handle = optimizer.register_step_pre_hook(
            lambda *a: timeline.phase('optimizer step'))
        stack.callback(handle.remove)
        stack.enter_context(observe(_UnitLabels(timeline, names)))
        yield lambda: timeline.phase('backward')
        timeline.finish()
    made = optimizer_state_bytes(optimizer) - state_before
    if made > 0:
        timeline.shift(made, before='optimizer step')
        timeline.note = (f'this step made the optimizer state ({format_bytes(made)}) in its '
                         'optimizer step; it is drawn as the steps after it, which hold that '
                         'state throughout')


def measure_with_timeline(run: Run, batch: dict[str, Any],
                          timeline: Timeline) -> tuple[int, float]:
    """``(peak bytes, seconds)`` of one step with the plan in force, as
    :func:`~ckptzoo.memory.measure.step.measure_step` measures them, recording ``timeline``: on CPU
    the meter's tracker notes the timeline's points; on CUDA the timeline's points read (and
    reset) the allocator's peak, so the step's peak is the largest point."""
    cuda = on_cuda(run)
    with PeakMeter(step_tensors(run, batch), cuda=cuda) as meter:
        with recording(run, batch, timeline, meter.tracker) as forward_end:
            t0 = time.perf_counter()
            train_step(run, batch, on_forward_end=forward_end)
            if cuda:
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
    peak = timeline.max_bytes if cuda else meter.peak_bytes
    return peak, seconds


def timeline_from_events(timeline: Timeline, events: list[tuple], batch: dict[str, Any]) -> None:
    """Fill ``timeline`` from the probe recorder's events ``(kind, unit, live bytes, peak since
    the previous event, time)`` of a CUDA step (read from the allocator at every event)."""
    timeline.cuda = True
    img = batch.get('img')
    if isinstance(img, torch.Tensor) and img.dim() >= 2:
        timeline.shape = tuple(int(s) for s in img.shape[-2:])
    after = dict(fstart='forward {}', fend='forward', loss='backward', bstart='backward {}',
                 step='optimizer step', begin='forward')
    doing = 'forward'
    timeline.phases['forward'] = 0
    for kind, unit, live, peak, _ in events:
        timeline.peaks.append(peak)
        timeline.lives.append(live)
        timeline.doing.append(timeline._activity(doing))
        if kind == 'fend':
            timeline.phases['loss'] = len(timeline.peaks)
        elif kind == 'loss':
            timeline.phases['backward'] = len(timeline.peaks)
        elif kind == 'step':
            timeline.phases['optimizer step'] = len(timeline.peaks)
        doing = after.get(kind, doing).format(unit)


# ------------------------------------------------------------------------------------------
# collecting the planner's timelines
# ------------------------------------------------------------------------------------------
class TimelineSet:
    """The timelines of one planning: ``plain`` (the probe's plain step; the last probe's) and
    ``measured`` (every validation step, in order). Made empty and given to the planner
    (``plan_memory(..., timelines=timelines)``), which records into it steps it makes anyway
    (no extra steps)."""

    def __init__(self):
        self.plain: Timeline | None = None
        self.measured: list[Timeline] = []

    def new(self, kind: str) -> Timeline:
        """A timeline for the next ``kind`` (``'plain'`` or ``'measured'``) step."""
        timeline = Timeline(kind)
        if kind == 'plain':
            self.plain = timeline
        else:
            self.measured.append(timeline)
        return timeline

    def curves(self, result: Any = None) -> dict[str, Timeline]:
        """``{label: timeline}`` to draw for ``result`` (a :class:`PlanResult`): the plain
        step, the chosen plan's validation (the last whose peak is the result's measured
        peak, else the last), and per batch-shape bucket (when the result has ``buckets``) the
        last validation at the bucket's shape."""
        out = {}
        if self.plain is not None:
            out['plain'] = self.plain
        measured = getattr(result, 'measured_peak_bytes', None)
        same = [t for t in self.measured if t.max_bytes == measured]
        if self.measured:
            out['plan'] = (same or self.measured)[-1]
        for bucket in getattr(result, 'buckets', None) or []:
            shape = tuple(bucket.shape)
            found = [t for t in self.measured if t.shape == shape]
            if found and found[-1] is not out['plan']:
                out[f'bucket {shape[0]}x{shape[1]}'] = found[-1]
        return out

