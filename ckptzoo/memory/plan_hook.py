"""The memory plan follows the batch: a checkpoint plan per batch-shape bucket, switched before
each forward, each step's peak measured and logged, and the budget guarded.

A plan made for one worst-case batch either wastes time on the small batches or does not hold
for a batch nobody probed; switching modes and segments is free (no rebuild, weights untouched),
so each batch runs under the fastest plan whose bucket dominates its padded shape. The plan
can only be trusted as far as it is measured: a step over the budget is reported with the batch
that caused it and its bucket is planned again.
"""
from __future__ import annotations

import collections
import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..registry import HOOKS
from ..runner.hooks.hook import Hook
from ..utils.model_wrapper import unwrap_model
from .model.buckets import bucket_for
from .model.budget import format_budget, format_bytes, parse_budget
from ..runner.utils import cuda_device
from .measure.peak_meter import PeakMeter
from .measure.step import optimizer_hook

__all__ = ['MemoryPlanHook', 'PRIORITY', 'batch_shape', 'batch_boxes', 'memory_mib']

#: after the optimizer hook (ABOVE_NORMAL, 40: its ``after_train_iter`` runs the backward and
#: the step that a measurement must include), before the checkpoint hook (NORMAL, 50)
PRIORITY = 45


def memory_mib(nbytes: int) -> int:
    """MiB as mmcv's TextLoggerHook prints them: ``int`` of the quotient (truncated)."""
    return int(nbytes / (1024 * 1024))


def batch_shape(batch: Any) -> tuple[int, int] | None:
    """The padded ``(H, W)`` of ``batch['img']`` (a tensor ``(N, C, H, W)``), else None."""
    img = batch.get('img') if isinstance(batch, dict) else None
    if isinstance(img, torch.Tensor) and img.dim() >= 2:
        return int(img.shape[-2]), int(img.shape[-1])
    return None


def batch_boxes(batch: Any) -> int | None:
    """The largest number of ground-truth boxes of one image of ``batch``, None without
    ``gt_bboxes`` (classification)."""
    boxes = batch.get('gt_bboxes') if isinstance(batch, dict) else None
    if not isinstance(boxes, (list, tuple)) or not boxes:
        return None
    return max(len(b) for b in boxes)


def _area(bucket):
    return bucket.shape[0] * bucket.shape[1]


def _plan_key(plan, segments):
    return tuple(plan.items()), tuple(tuple(s) for s in segments)


@HOOKS.register_module()
class MemoryPlanHook(Hook):
    """Switch the checkpoint plan per batch, measure the step's memory, log it, guard a budget.

    Register it with priority :data:`PRIORITY` (45): after the optimizer hook, so that its
    ``after_train_iter`` sees the backward and the optimizer step. A batch's shape is its
    padded ``(H, W)``, or, for a model that resizes its batches (``train_shape``: YOLOX's
    random sizes), the size the model trains it at.

    Args:
        buckets (list | None): :class:`~ckptzoo.memory.model.buckets.Bucket` (or objects with its
            ``shape``, ``plan``, ``segments``, ``predicted_peak_bytes`` and
            ``predicted_step_time``, when ``select`` reads only those); None or ``[]`` keeps the model's plan (measure and log
            only). A batch that no bucket dominates runs under the largest bucket, with a
            warning.
        budget (int | str | None): bytes, or what ``memory_budget`` takes (``'6GB'``); a
            measured step above it is reported on ``runner.logger`` and its bucket planned
            again.
        interval (int): on a CPU, measure every ``interval``-th training step with
            :class:`~ckptzoo.memory.measure.trackers.LiveTensorTracker` (exact, but it slows the step
            it measures); 0: none beyond the first of each kind. With a ``budget`` the first
            step of each kind is measured whatever the interval: each bucket at each position
            of an accumulation window (its first iteration, one inside, the one that steps)
            with and without the optimizer's state (which the first real optimizer step
            makes), the steps whose memory differs, so a run learns at once when one of them
            goes over. On CUDA every step is measured, for free (``max_memory_allocated``
            after ``reset_peak_memory_stats`` at the step's start).
        replan (callable | None): ``replan(bucket, measured_bytes, shape, boxes)`` -> a bucket
            to use instead (None: no better plan). Without it, or when it returns None, the
            bucket takes the plan of the most frugal bucket (the smallest predicted peak per
            pixel), else every unit ``'full'``.
        select (callable | None): ``select(buckets, shape)`` -> bucket or None; default
            :func:`~ckptzoo.memory.model.buckets.bucket_for` (the fastest dominating bucket).
        plan_file (str | None): the ``memory_plan.json`` the buckets come from, named in the
            over-budget warning with how to plan again (a plan made for other data is the
            usual cause of a large overshoot).

    ``memory`` in the log (``runner.log_buffer.output['memory']``) is the largest measured
    peak, in MiB, since the last log line. Under DDP the text logger reduces it with MAX to
    rank 0 (every rank logs, and measures, the same iterations); the guard acts on the rank's
    own measurement, so ranks may train under different plans (a plan changes no gradient,
    only what is kept and recomputed). ``records`` (the last 1000
    measured steps: ``peak_bytes``, and on CUDA ``reserved_bytes``, the caching allocator's
    ``max_memory_reserved``, what the card must really have free), ``over_budget`` (every step over the budget and what was done) and
    ``buckets`` (as re-planned; a bucket's ``measured_peak_bytes`` is raised to what its steps
    measured) are kept for reports, not in checkpoints: a resumed run starts from the buckets
    it is given. A CPU step that raises leaves its tracker counting until the next step starts
    or the run ends.
    """

    def __init__(self, buckets: Sequence[Any] | None = None, budget: int | None = None,
                 interval: int = 1, replan: Callable | None = None,
                 select: Callable | None = None, plan_file: str | None = None):
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
            raise ValueError(f'interval must be a non-negative int (0: never measure on a CPU; '
                             f'N: every Nth training step), got {interval!r}')
        if budget is not None:
            try:
                budget = parse_budget(budget)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f'MemoryPlanHook budget: {exc}') from None
        for name, fn in (('replan', replan), ('select', select)):
            if fn is not None and not callable(fn):
                raise TypeError(f'{name} must be callable or None, got {fn!r}')
        self.buckets = list(buckets or [])
        for i, b in enumerate(self.buckets):
            missing = [a for a in ('shape', 'plan', 'segments', 'predicted_peak_bytes',
                                   'predicted_step_time') if not hasattr(b, a)]
            if missing:
                raise TypeError(f'buckets[{i}] ({b!r}) is not a bucket: it lacks the attributes '
                                f'{", ".join(missing)}')
        self.budget, self.interval = budget, interval
        self.plan_file = plan_file
        self.replan, self.select = replan, select or bucket_for
        self._given = list(self.buckets)  # their predictions rank the fallbacks
        self._rungs = {}  # id(bucket) -> how far down the fallbacks it went
        self.records = collections.deque(maxlen=1000)
        self.over_budget = []
        self.current = None  # the bucket whose plan is in force
        self._in_force = None  # its _plan_key
        self._warned_shape = False
        self._meter = self._cuda = None  # the PeakMeter of the step being measured
        self._step = None
        self._kinds = set()  # the kinds of step measured (_kind)

    # ---------------------------------------------------------------------------- the plan
    def before_run(self, runner):
        model = unwrap_model(runner.model)
        self._cuda = cuda_device(model)
        if self.buckets:
            if not hasattr(model, 'set_checkpoint_plan'):
                raise TypeError(f'MemoryPlanHook buckets need a model with checkpoint units, '
                                f'got {type(model).__name__}')
            from ..models.checkpointing.plan import resolve_plan, resolve_segments
            units, chains = model.checkpoint_units(), model.checkpoint_chains()
            for b in self.buckets:  # a bad plan fails now, not at the batch that needs it
                try:
                    resolve_plan(b.plan, units)
                    resolve_segments(b.segments, units, chains)
                except (KeyError, ValueError, TypeError) as exc:
                    raise type(exc)(f'the plan of the bucket {_shape_str(b.shape)}: {exc}')
        if self.budget is not None and self._cuda is None and self.interval == 0:
            runner.logger.info(f'MemoryPlanHook: the budget {format_budget(self.budget)} is '
                               'checked on the first step of each batch-shape bucket and '
                               'accumulation-window position (memory_check_interval = N in '
                               'the config also measures every Nth step with the exact '
                               'tracker, which slows the step it measures)')

    def _choose(self, runner, shape):
        if shape is None:
            raise TypeError("MemoryPlanHook switches plans by batch['img'].shape[-2:]; this "
                            'batch has no image tensor')
        bucket = self.select(self.buckets, shape)
        if bucket is None:
            bucket = max(self.buckets, key=lambda b: (_area(b), b.shape))
            if not self._warned_shape:
                self._warned_shape = True
                runner.logger.warning(
                    f'a batch of shape {_shape_str(shape)} fits no memory-plan bucket '
                    f'({", ".join(_shape_str(b.shape) for b in self.buckets)}): it runs under '
                    f'the largest, {_shape_str(bucket.shape)} (said once, not for later batches)')
        return bucket

    def _apply(self, runner, bucket):
        self.current = bucket
        key = _plan_key(bucket.plan, bucket.segments)
        if key == self._in_force:
            return
        # exactly the bucket's plan, not a merge into the one in force
        unwrap_model(runner.model).replace_checkpoint_plan(bucket.plan, bucket.segments)
        self._in_force = key

    # ---------------------------------------------------------------------------- the step
    def before_train_iter(self, runner):
        batch = getattr(runner, 'data_batch', None)
        shape, boxes = batch_shape(batch), batch_boxes(batch)
        model = unwrap_model(runner.model)
        if shape is not None and hasattr(model, 'train_shape'):
            shape = tuple(model.train_shape(shape))  # a model that resizes it (YOLOX)
        if self.buckets:
            self._apply(runner, self._choose(runner, shape))
        self._close_meter()  # a step that raised left it open
        self._step = dict(iter=runner.iter, shape=shape, boxes=boxes,
                          bucket=self.current.shape if self.current is not None else None)
        if self._cuda is not None:
            self._meter = PeakMeter(cuda=True, device=self._cuda).start()
        elif self._first_of_kind(runner, shape) or self.every_n_iters(runner, self.interval):
            self._meter = PeakMeter(runner.model, runner.optimizer, batch).start()

    def _first_of_kind(self, runner, shape):
        """Whether this step is the first of its kind (with a budget to guard): the steps of
        one bucket, window position and optimizer state hold the same memory."""
        if self.budget is None:
            return False
        kind = (self.current.shape if self.current is not None else shape,
                _window_position(runner), bool(getattr(runner.optimizer, 'state', None)))
        if kind in self._kinds:
            return False
        self._kinds.add(kind)
        return True

    def after_train_iter(self, runner):
        if self._meter is None:
            return
        meter, self._meter = self._meter, None
        peak = meter.stop()
        reserved = meter.reserved_bytes
        record = dict(self._step, peak_bytes=peak, reserved_bytes=reserved)
        self.records.append(record)
        output = runner.log_buffer.output
        output['memory'] = max(output.get('memory', 0), memory_mib(peak))
        if self.current is not None and hasattr(self.current, 'measured_peak_bytes'):
            self.current.measured_peak_bytes = max(self.current.measured_peak_bytes or 0, peak)
        if self.budget is not None and peak > self.budget:
            self._guard(runner, record)

    def _close_meter(self):
        if self._meter is not None:
            meter, self._meter = self._meter, None
            meter.close()

    def after_run(self, runner):
        self._close_meter()

    # ---------------------------------------------------------------------------- the guard
    def _guard(self, runner, record):
        peak, shape, boxes, bucket = (record['peak_bytes'], record['shape'], record['boxes'],
                                      self.current)
        where = (f'iteration {record["iter"] + 1}: the step took {format_bytes(peak)}, over the '
                 f'memory budget {format_budget(self.budget)}; batch {_shape_str(shape)}, '
                 f'{_boxes_str(boxes)}')
        event = dict(record, budget=self.budget, action=None)
        self.over_budget.append(event)
        if bucket is None:
            event['action'] = 'none: no memory plan to change'
            runner.logger.warning(f'{where}; no memory plan to change (give the hook buckets)')
            return
        where += f', bucket {_shape_str(bucket.shape)}'
        new = self.replan(bucket, peak, shape, boxes) if self.replan is not None else None
        how, rung = 'planned again', 0
        if new is None:
            new, how, rung = self._frugal(bucket)
        if new is None:
            event['action'] = 'none: no more frugal plan'
            runner.logger.warning(f'{where}; no more frugal plan exists: training goes on over '
                                  'the budget (lower the batch size or raise the budget)'
                                  + self._replan_advice())
            return
        self.buckets = [new if b is bucket else b for b in self.buckets]
        self._rungs.pop(id(bucket), None)
        self._rungs[id(new)] = rung
        event['action'] = how
        runner.logger.warning(f'{where}; bucket {how} from the next step'
                              + self._replan_advice())
        self._apply(runner, new)

    def _replan_advice(self):
        """How to plan again from new probes: a plan made for other data (larger images,
        more boxes) is the usual cause of a large overshoot."""
        where = f' ({self.plan_file})' if self.plan_file else ''
        return ('. If the data or the model changed since the plan was made, plan again: a '
                'resumed run plans again by itself when the model, the image sizes or the box '
                f'counts differ from those the plan file{where} records; to plan again now, '
                'stop the run, delete the plan file and resume (--auto-resume)')

    def _frugal(self, bucket):
        """``(bucket with a more frugal plan, how, rung)``, one rung down the ladder each time:
        the plan of the bucket of the smallest predicted peak per pixel (as given), then every
        unit ``'full'``; Nones past its end."""
        best = min(self._given, key=lambda b: b.predicted_peak_bytes / max(_area(b), 1))
        ladder = [(best.plan, best.segments,
                   f'given the plan of the bucket {_shape_str(best.shape)} (the most frugal)'),
                  ({'*': 'full'}, [], "given 'full' on every unit")]
        key = _plan_key(bucket.plan, bucket.segments)
        for rung in range(self._rungs.get(id(bucket), 0), len(ladder)):
            plan, segments, how = ladder[rung]
            if _plan_key(plan, segments) != key:
                new = copy.copy(bucket)
                new.plan, new.segments = dict(plan), [list(s) for s in segments]
                return new, how, rung + 1
        return None, None, None


def _window_position(runner):
    """``(first, steps)`` of this iteration in its accumulation window: whether it starts
    the window (holds no gradients yet) and whether it makes the optimizer step."""
    try:
        hook = optimizer_hook(runner)
    except RuntimeError:  # no optimizer hook: every iteration is a window of its own
        return True, True
    return runner.iter % hook.cumulative_iters == 0, bool(hook.is_step_iter(runner))


def _boxes_str(boxes):
    if boxes is None:
        return 'no ground-truth boxes'
    return f'at most {boxes} ground-truth box{"" if boxes == 1 else "es"} per image'


def _shape_str(shape):
    return 'of unknown shape' if shape is None else f'{shape[0]}x{shape[1]}'
