"""The probe: recorded training steps at the worst-case input shape, per checkpoint unit.

Every call of a checkpoint unit is instrumented while the probe runs: the live bytes and the
time when its forward starts and ends, and (a hook on its output's gradient) when its backward
starts. On CPU memory is exact: :class:`~ckptzoo.memory.measure.trackers.LiveTensorTracker` tags every
storage with the unit whose forward made it, and what a unit keeps is the bytes of its storages
still alive when the forward ends, which counts selective checkpointing's cache (held outside
saved-tensor hooks) like any other memory; the same attribution lets ``'full'`` be derived from
the plain step instead of run. On CUDA the same points read ``torch.cuda.memory_allocated`` /
``max_memory_allocated``, a unit keeps the growth of allocated memory over its forward, and
every mode is recorded. The recompute of a checkpointed unit is timed where it runs, in
backward, rather than taken as the difference of two steps (a unit's share of a step is smaller
than the step's noise).
"""
from __future__ import annotations

import contextlib
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from ...models.checkpointing import CheckpointObserver, observe
from .trackers import LiveTensorTracker
from ...utils.model_wrapper import unwrap_model
from ...utils.nested import iter_tensors
from ..model.cost_table import MODES, CostTable, UnitCost, model_chains
from .step import (Run, make_optimizer_state, on_cuda,  # noqa: F401
                   optimizer_hook, optimizer_state_bytes, probe_batch, step_tensors, train_step,
                   worst_case_shape)
from .step_peak import measure_step  # noqa: F401

__all__ = ['probe', 'probe_modes', 'ddp_bucket_bytes', 'Run', 'worst_case_shape', 'probe_batch',
           'train_step', 'measure_step']


# ------------------------------------------------------------------------------------------
# the recorder
# ------------------------------------------------------------------------------------------
class _UnitTracker(LiveTensorTracker):
    """The live-tensor tracker that also notes which outputs of a unit are read outside it
    during the forward: by another unit (whose ``'full'`` checkpoint keeps its inputs: counted
    as large as they were at the read, since a reader that keeps only a copy, such as a
    transpose-then-matmul, lets the plain step free the output), or by any other op and still
    alive when the forward ends. A unit output no other op reads is alive in the plain step
    only because the unit's own ops saved it, and a ``'full'`` checkpoint frees it."""

    def __init__(self):
        super().__init__()
        self.watched = {}    # storage key of a unit output -> the unit that made it
        self.read_keys = {}  # key of a watched output read outside, while alive -> unit
        self.unit_read = {}  # key of a watched output another unit read, while alive
        self.unit_bytes = {}  # unit -> bytes of its outputs other units read

    def watch(self, key, unit):
        if self._tags.get(key) == unit:  # made by the unit (not an input passed through)
            self.watched[key] = unit

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.watched:
            for t in iter_tensors((args, kwargs)):
                try:
                    key = t.untyped_storage()._cdata
                except (RuntimeError, NotImplementedError):
                    continue
                unit = self.watched.get(key)
                if unit is None or unit == self.tag:
                    continue
                self.read_keys[key] = unit
                if self.tag is not None and key not in self.unit_read:
                    self.unit_read[key] = unit
                    self.unit_bytes[unit] = self.unit_bytes.get(unit, 0) + \
                        self._sizes.get(key, 0)
        return super().__torch_dispatch__(func, types, args, kwargs)

    def outputs_read_outside(self):
        """``({unit: bytes a 'full' checkpoint keeps}, {unit: bytes of those alive now})``."""
        kept, alive = dict(self.unit_bytes), {}
        for key, unit in self.read_keys.items():
            alive[unit] = alive.get(unit, 0) + self._sizes.get(key, 0)
            if key not in self.unit_read:
                kept[unit] = kept.get(unit, 0) + self._sizes.get(key, 0)
        return kept, alive

    def _free(self, key):
        self.watched.pop(key, None)
        self.read_keys.pop(key, None)
        self.unit_read.pop(key, None)
        super()._free(key)


class _Recorder(CheckpointObserver):
    """Events ``(kind, unit, live bytes, peak since the previous event, time)``, and per unit
    the seconds its checkpoint spent recomputing in backward; it observes the units while
    :func:`~ckptzoo.models.checkpointing.observe` registers it."""

    def __init__(self, names, cuda, tracker=None):
        self.names = names        # id(CheckpointUnit) -> name
        self.cuda = cuda
        self.tracker = tracker
        self.events = []
        self.forward = True
        self.bwd_started = set()
        self.kept = {}
        self.kept_outputs = {}    # name -> bytes of its own outputs that ops outside it read
        self.alive_outputs = {}   # name -> those of them still alive when the forward ends
        self.checkpointed = set()  # names of the units the checkpoint guard would checkpoint
        self.current = None       # the unit whose forward runs
        self.recompute = {}       # name -> seconds of its recompute(s) in backward
        self.regions = weakref.WeakKeyDictionary()  # checkpointed region -> its unit's name

    def _live(self):
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        return self.tracker.live_bytes, self.tracker.peak_bytes

    def event(self, kind, unit=None):
        live, peak = self._live()
        self.events.append((kind, unit, live, peak, time.perf_counter()))
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        else:
            self.tracker.reset_peak()

    def unit_call(self, run, unit, function, args, module):
        name = self.names.get(id(unit))
        if name is None or not self.forward or not torch.is_grad_enabled():
            return run()
        self.event('fstart', name)
        if _would_checkpoint(unit, function, args, module):
            self.checkpointed.add(name)
        if self.tracker is not None:
            self.tracker.tag = name
        self.current = name
        try:
            out = run()
        finally:
            self.current = None
            if self.tracker is not None:
                self.tracker.tag = None
        self.event('fend', name)
        if self.tracker is not None:
            for t in iter_tensors(out):
                self.tracker.watch(t.untyped_storage()._cdata, name)
        for t in iter_tensors(out):
            if t.requires_grad:
                t.register_hook(self._bwd_hook(name))
        return out

    def region_call(self, run, region, recomputing):
        """A recompute (in backward) timed for the unit whose forward ran the region."""
        if not recomputing:
            self.regions[region] = self.current
            return run()
        t0 = time.perf_counter()
        try:
            return run()
        finally:
            name = self.regions.get(region)
            if name is not None:
                self.recompute[name] = self.recompute.get(name, 0.0) + \
                    time.perf_counter() - t0

    def _bwd_hook(self, name):
        def hook(grad):
            if name not in self.bwd_started:
                self.bwd_started.add(name)
                self.event('bstart', name)
        return hook

    def forward_end(self):
        self.event('loss')
        self.forward = False
        if self.tracker is not None:
            self.kept = self.tracker.live_bytes_by_tag()
            self.kept_outputs, self.alive_outputs = self.tracker.outputs_read_outside()
            self.tracker.watched.clear()  # backward's reads are not the forward's consumers


def _would_checkpoint(unit, function, args, module):
    """Whether the checkpoint guard would checkpoint this call in ``'full'`` (else it runs
    plainly and keeps what plain keeps)."""
    from ...models.checkpointing.functional import _owner, should_checkpoint
    module = module if module is not None else _owner(function)
    return should_checkpoint(args, module, unit.use_reentrant)


def _record_step(run, batch, names, timeline=None):
    """One instrumented step: the recorder with its events (and on CPU ``timeline``, a
    :class:`~ckptzoo.memory.measure.timeline.Timeline`, recorded from the same tracker; on CUDA it is
    made from the recorder's events, which read the allocator as it would)."""
    cuda = on_cuda(run)
    optimizer = run.runner.optimizer
    with contextlib.ExitStack() as stack:
        tracker = None
        if not cuda:
            tracker = stack.enter_context(_UnitTracker())
            tracker.track(step_tensors(run, batch))
        else:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        forward_end = None
        if timeline is not None and not cuda:
            from .timeline import recording
            forward_end = stack.enter_context(recording(run, batch, timeline, tracker))
        recorder = _Recorder(names, cuda, tracker)
        recorder.event('begin')
        handle = optimizer.register_step_pre_hook(lambda *a: recorder.event('step'))
        stack.callback(handle.remove)
        stack.enter_context(observe(recorder))
        on_end = recorder.forward_end if forward_end is None else \
            (lambda: (recorder.forward_end(), forward_end()))
        train_step(run, batch, on_forward_end=on_end)
        recorder.event('end')
    if timeline is not None and cuda:
        from .timeline import timeline_from_events
        timeline_from_events(timeline, recorder.events, batch)
    return recorder


def _analyse(recorder, order):
    """Per unit ``(kept, fwd_peak, bwd_peak, fwd_time, bwd_time)``, plus the bases, the tail
    and the step of one recorded step."""
    ev = recorder.events
    idx = {(k, u): i for i, (k, u, *_) in enumerate(ev) if u is not None}
    n = len(order)
    kept = []
    for name in order:
        if recorder.cuda:  # growth over its forward
            kept.append(max(0, ev[idx[('fend', name)]][2] - ev[idx[('fstart', name)]][2]))
        else:
            kept.append(recorder.kept.get(name, 0))

    def peak_in(a, b):  # the largest live bytes between events a and b (indices, a < b)
        return max(e[3] for e in ev[a + 1:b + 1])

    fwd_peak, fwd_base, fwd_time = [], [], []
    prev = 0
    for i, name in enumerate(order):
        s, e = idx[('fstart', name)], idx[('fend', name)]
        fwd_peak.append(peak_in(prev, e) - ev[s][2])
        fwd_base.append(ev[s][2] - sum(kept[:i]))
        fwd_time.append(ev[e][4] - ev[s][4])
        prev = e
    loss = next(i for i, e in enumerate(ev) if e[0] == 'loss')
    bstarts = [i for i, e in enumerate(ev) if e[0] == 'bstart']
    first_b = bstarts[0] if bstarts else len(ev) - 1
    tail = peak_in(prev, max(loss, first_b)) - sum(kept)
    step = next((i for i, e in enumerate(ev) if e[0] == 'step'), None)
    bwd_end = step if step is not None else len(ev) - 1
    bwd_order = [order.index(ev[i][1]) for i in bstarts]
    bwd_order += [i for i in range(n - 1, -1, -1) if i not in bwd_order]
    bwd_peak, bwd_base, bwd_time = [0] * n, [0] * n, [0.0] * n
    for p, b in enumerate(bstarts):
        i = order.index(ev[b][1])
        nxt = bstarts[p + 1] if p + 1 < len(bstarts) else bwd_end
        still = sum(kept[k] for k in bwd_order[p:])
        bwd_peak[i] = peak_in(b, nxt) - ev[b][2]
        bwd_base[i] = ev[b][2] - still
        bwd_time[i] = ev[nxt][4] - ev[b][4]
    step_peak = peak_in(bwd_end, len(ev) - 1) if step is not None else 0
    return dict(kept=kept, fwd_peak=fwd_peak, fwd_base=fwd_base, fwd_time=fwd_time,
                tail=tail, bwd_order=bwd_order, bwd_peak=bwd_peak, bwd_base=bwd_base,
                bwd_time=bwd_time, step_peak=step_peak,
                step_time=ev[-1][4] - ev[0][4], peak=max(e[3] for e in ev))


def _set_modes(model, mode, names):
    """Set every unit that accepts ``mode``; the names that do."""
    accepted = []
    for name in names:
        try:
            model.set_checkpoint_plan({name: mode})
            accepted.append(name)
        except ValueError:
            pass
    return accepted


def _derive_full(rec, plain, i, name):
    """``(kept, fwd_peak, bwd_peak)`` of unit ``name`` in ``'full'`` mode from its plain
    recorded step, without running it: a full checkpoint keeps its inputs (counted by their
    producers), so a unit keeps those of its own outputs that an op outside it reads, as large
    as they were at the read (a reader that keeps only a copy, such as a transpose-then-matmul,
    frees the output in the plain step, but a checkpointed reader keeps it); one that nothing
    else reads, such as the lowest FPN level's merged lateral, is alive in the plain step only
    because the unit's own conv saved it. The BN-safe recompute adds no tensor. Its backward
    first recomputes the plain forward (at most the plain forward transient) and then runs the
    plain backward over the recomputed tensors; the outputs the plain step kept because a
    reader saved them are counted in ``kept`` but not made again. The forward transient is
    bounded by the plain one (the saved tensors are dropped as the forward goes):
    over-estimates only."""
    kept, fwd, bwd = plain['kept'][i], plain['fwd_peak'][i], plain['bwd_peak'][i]
    if name not in rec.checkpointed:  # the guard runs it plainly: plain costs
        return kept, fwd, bwd
    kept_full = rec.kept_outputs.get(name, 0)
    return kept_full, fwd, max(kept + bwd, fwd) - rec.alive_outputs.get(name, 0)


def _selective_seconds(records, order):
    """``{name: seconds}`` a ``'selective'`` unit adds to a step: its recompute, timed where it
    runs (in backward), plus its share of the forward's extra cost (the policy's dispatch of
    every op, out-of-place activations). That share is the whole forward's difference to the
    plain one, split in proportion to the recomputes: a unit's own forward difference is
    smaller than one step's noise, the sum over all units is not."""
    rec, sel, accepted = records['selective']
    plain = records[None][1]
    recompute = {n: rec.recompute.get(n, 0.0) for n in order if n in accepted}
    extra_fwd = max(0.0, sum(sel['fwd_time'][i] - plain['fwd_time'][i]
                             for i, n in enumerate(order) if recompute.get(n)))
    total = sum(recompute.values())
    return {n: max(1e-6, r + (extra_fwd * r / total if total else 0.0))
            for n, r in recompute.items()}


def probe(run: Run, batch: dict[str, Any], modes: Sequence[str | None] = MODES,
          chains: list[tuple[int, int]] | None = None, derive_full: bool = True,
          timeline: Any = None) -> CostTable:
    """The :class:`CostTable` of the run's model on ``batch``, from one recorded step per mode.

    The plain step is recorded first; on CPU, where the tracker attributes every storage to
    the unit that made it, ``'full'`` is derived from it (:func:`_derive_full`) instead of run.
    Every recorded step is the run's largest iteration: the optimizer's state exists from its
    start (made first when there is none, :func:`~ckptzoo.memory.measure.step.make_optimizer_state`,
    so a step the loss scaler skips cannot hide it), and with gradient accumulation it is a
    window's last iteration, the gradients held from its start
    (:func:`~ckptzoo.memory.measure.step.train_step`; the table's ``window``). ``derive_full=False``
    records ``'full'`` too (to check the derivation). The table lists the units in the order the
    plain step runs them (a model may list them otherwise). Units are measured one by one (segments
    are lifted for the probe); the plan and segments in force are restored afterwards.
    ``chains`` (where segments may be formed) default to the model's own
    (``checkpoint_chains()``). ``timeline`` (a :class:`~ckptzoo.memory.measure.timeline.Timeline`, or
    None for none) records the plain step."""
    model = unwrap_model(run.runner.model)
    units = model.checkpoint_units()
    order = list(units)
    names = {id(u): n for n, u in units.items()}
    derive = derive_full and 'full' in modes and not on_cuda(run)
    recorded = [None] + [m for m in modes if m is not None and not (derive and m == 'full')]
    make_optimizer_state(run)
    saved = model.checkpoint_plan()
    saved_segments = model.checkpoint_segments()  # units are measured one by one
    model.set_checkpoint_segments([])
    records, steady = {}, None
    try:
        for mode in recorded:
            model.set_checkpoint_plan({'*': None})
            accepted = set(_set_modes(model, mode, order)) if mode is not None else set(order)
            rec = _record_step(run, batch, names, timeline if mode is None else None)
            missing = [n for n in order if ('fstart', n) not in
                       {(k, u) for k, u, *_ in rec.events}]
            if missing and mode is None:
                # units this configuration never runs (a backbone's layers past the last
                # output taken): nothing to plan, left plain
                warnings.warn(f'checkpoint units {", ".join(missing)} do not run in the '
                              'probe step (e.g. past the last output a backbone returns): '
                              'they are left plain and out of the plan')
                order = [n for n in order if n not in missing]
            if mode is None:  # the table follows the units in the order they run
                ran = dict.fromkeys(u for k, u, *_ in rec.events if k == 'fstart')
                order = [n for n in ran if n in set(order)]
            elif missing:
                raise RuntimeError(f'checkpoint units {missing} ran in the plain probe step '
                                   f'but not under mode {mode!r}: the unit list and the '
                                   'forward disagree')
            records[mode] = (rec, _analyse(rec, order), accepted)
            steady = records[mode][1]
    finally:
        model.set_checkpoint_plan(dict(saved))
        model.set_checkpoint_segments(saved_segments)
    plain_rec, plain = records[None][:2]
    selective = _selective_seconds(records, order) if 'selective' in records else {}
    unit_costs = []
    for i, name in enumerate(order):
        cost = UnitCost(name, {}, {}, {}, fwd_time=plain['fwd_time'][i])
        for mode, (_, r, accepted) in records.items():
            if name not in accepted:
                continue
            cost.kept[mode] = r['kept'][i]
            cost.fwd_peak[mode] = max(0, r['fwd_peak'][i])
            cost.bwd_peak[mode] = max(0, r['bwd_peak'][i])
            if mode == 'selective':
                cost.recompute_time[mode] = selective[name]
            elif mode not in (None, 'full'):  # 'full' recomputes one forward: fwd_time
                # the difference of two timed steps
                extra = (r['fwd_time'][i] - plain['fwd_time'][i] +
                         r['bwd_time'][i] - plain['bwd_time'][i])
                cost.recompute_time[mode] = max(1e-6, extra)
        if derive:
            kept, fwd, bwd = _derive_full(plain_rec, plain, i, name)
            cost.kept['full'], cost.fwd_peak['full'] = kept, max(0, fwd)
            cost.bwd_peak['full'] = max(0, bwd)
        unit_costs.append(cost)
    # the plan-independent memory: the steady step's (with optimizer state), and never less
    # than any other step saw (errors can only over-estimate)
    rs = [r for _, r, _ in records.values()]
    table = CostTable(
        unit_costs,
        fwd_base=[max(r['fwd_base'][i] for r in rs) for i in range(len(order))],
        bwd_base=[max(r['bwd_base'][i] for r in rs) for i in range(len(order))],
        tail_peak=max(r['tail'] for r in rs),
        step_peak=max(r['step_peak'] for r in rs),
        step_time=plain['step_time'], bwd_order=steady['bwd_order'], chains=chains or [],
        fixed=_fixed_bytes(run, batch), window=optimizer_hook(run.runner).cumulative_iters)
    if chains is None:
        table.chains, table.exits = model_chains(model, order)
    return table


def probe_modes(run: Run) -> tuple[str | None, ...]:
    """The modes worth probing: ``'offload'`` moves saved tensors to CPU memory, which saves
    nothing when the model already runs on the CPU."""
    from ...runner.utils import get_model_device
    if get_model_device(run.runner.model).type == 'cpu':
        return (None, 'full', 'selective')
    return MODES


def _fixed_bytes(run, batch):
    """The plan-independent bytes by kind, for the report (the peak model takes them from the
    recorded steps, where they are live like any other tensor)."""
    model, optimizer = run.runner.model, run.runner.optimizer

    def total(tensors):
        seen = {}
        for t in tensors:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return sum(seen.values())
    params = [p for p in model.parameters()]
    return dict(parameters=total(params), buffers=total(model.buffers()),
                gradients=total(p for p in params if p.requires_grad),
                optimizer_state=optimizer_state_bytes(optimizer),
                batch=total(iter_tensors(batch)))


def ddp_bucket_bytes(model: torch.nn.Module) -> int:
    """Bytes of DDP's gradient buckets for ``model`` (0 when it is not DDP-wrapped): the
    reducer keeps a flat copy of every gradient it all-reduces, allocated when DDP is built,
    unless the gradients are views into the buckets (``gradient_as_bucket_view=True``)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel) or \
            model.gradient_as_bucket_view:
        return 0
    seen = {}
    for p in model.module.parameters():
        if p.requires_grad:
            seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values())
