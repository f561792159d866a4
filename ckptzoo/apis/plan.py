"""Plan a training run under ``memory_budget``: probe, solve, validate with one measured step,
and when no checkpoint plan fits, search fp16 / gradient accumulation / a smaller batch.

The library (:mod:`ckptzoo.memory`) measures and solves; this module runs it on a training
run that :func:`ckptzoo.apis.build_training` assembled. The probe and the validation make real
optimizer steps; :class:`ProbeSession` restores the weights, optimizer state, RNG states and
``runner.meta`` afterwards, so a planned run trains exactly as the same plan set by hand. Under
DDP every rank steps in the probe (each step all-reduces its log variables) and all follow rank
0's measurements and plan.

The route of a budget is one way: :func:`~ckptzoo.apis.assemble.resolve_auto_with_cp` (where
the model is built) turns ``with_cp='auto'`` into a request for a plan; :func:`plan_training`
parses ``memory_budget`` once, reuses ``work_dir/memory_plan.json`` on a resume or calls
:func:`plan_memory`, whose outer search hands back the run it planned on (:class:`PlannedRun`),
and returns the plan with the run to train: that run, or, for a saved plan whose options differ
from the configured run's, the run assembled once with them. There, and only there, the plan's
options are set in the config and its modes on the model; nothing assembles a run twice for the
same options, and the plan is data that nothing changes afterwards (the re-planner of
:mod:`ckptzoo.apis.batch_plans` makes new ones).
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os.path as osp
import random
import warnings
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

import numpy as np
import torch
import torch.nn as nn
from mmengine.config import Config

from ..memory import (CostTable, InfeasibleBudget, format_budget, format_bytes, parse_budget)
from ..datasets.batch_shapes import LoaderShapes, loader_shapes
from ..memory.model.buckets import choose_buckets, solve_buckets
from ..memory.model.shape_model import ShapeCostModel
from ..memory.measure.timeline import TimelineSet
from ..memory.plan_file import (PLAN_FILE, PlanResult, plan_changes, read_plan_file,
                                write_plan_file)
from ..memory.plan_fit import fit_changes, made_for, window_probed
from ..memory.measure.probe import ddp_bucket_bytes, probe, probe_modes
from ..memory.report.table import plan_table
from ..memory.measure.step import on_cuda, optimizer_hook, probe_batch
from ..memory.measure.step_peak import measure_step
from ..core.bbox import restore_sampling_at_capacity, set_sampling_at_capacity
from ..runner.dist_utils import get_dist_info
from ..runner.work_dir import unwritable
from ..utils.model_wrapper import unwrap_model
from .assemble import TrainingRun, resolve_auto_with_cp
from .options import TrainingOptions

__all__ = ['resolve_auto_with_cp', 'planning_requested', 'ProbeSession', 'from_rank0',
           'outer_options', 'batch_shapes', 'plan_checkpoints', 'PlannedRun', 'plan_memory',
           'plan_training', 'plan_made_for', 'check_plan_outputs']

_T = TypeVar('_T')
#: at most this many batch-shape buckets (plans) per run
MAX_BUCKETS = 8
#: ``tools/train.py`` writes the memory report of a plan made now under this name in the work dir
REPORT_FILE = 'memory_report.html'


def planning_requested(cfg: Config) -> int | None:
    """The budget in bytes when the config asks for a plan (``memory_budget``, which
    ``with_cp='auto'`` needs: see :func:`~ckptzoo.apis.assemble.resolve_auto_with_cp`), else
    None."""
    resolve_auto_with_cp(cfg)
    budget = cfg.get('memory_budget')
    return None if budget is None else parse_budget(budget)


def from_rank0(obj: _T) -> _T:
    """Rank 0's ``obj`` on every rank (``obj`` itself outside DDP): under DDP every rank
    probes in step, and all follow rank 0's measurements."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or \
            torch.distributed.get_world_size() == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


class ProbeSession:
    """Training steps outside the training loop, which leave no trace: ``with
    ProbeSession(run) as session:`` sets up the optimizer hook (``before_run``) and makes the
    plain module (not its DDP wrapper) ``runner.model``, so that a probe step does not
    all-reduce gradients; on exit the wrapper, weights, buffers, optimizer state, RNG states
    and ``runner.meta`` are as they were. The steps run the module alone: on CPU the exact
    tracker then does not see DDP's gradient buckets, which :meth:`cost_table` and
    :meth:`measure_step` add (CUDA's allocator counts them anyway). The model's RoI samplers
    yield their largest counts inside (their ``at_capacity``, set on enter and restored on
    exit: :func:`~ckptzoo.core.bbox.set_sampling_at_capacity`): the plan is for the most RoIs
    training can see, not for an untrained RPN's few positives. ``timelines`` (a
    :class:`~ckptzoo.memory.measure.timeline.TimelineSet`, or None): the probe's plain step and every
    measured step record a new timeline of it (no extra steps)."""

    def __init__(self, run: TrainingRun, timelines: TimelineSet | None = None):
        self.run = run
        self.timelines = timelines
        self.wrapper = run.runner.model
        self.model: nn.Module = unwrap_model(self.wrapper)
        #: bytes of DDP's gradient buckets (0 unwrapped); ``unseen``: those the steps miss
        self.buckets = ddp_bucket_bytes(self.wrapper)
        self.unseen = 0

    def __enter__(self) -> ProbeSession:
        runner = self.run.runner
        self._state = copy.deepcopy(self.model.state_dict())
        self._opt_state = copy.deepcopy(runner.optimizer.state_dict())
        self._rng = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
                     torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        self._meta = copy.deepcopy(runner.meta)
        runner.model = self.model
        self.unseen = 0 if on_cuda(self.run) else self.buckets
        optimizer_hook(runner).before_run(runner)
        self._samplers = set_sampling_at_capacity(self.model, True)
        # a model that resizes its batches (YOLOX) runs each probe batch at its own shape
        keep = getattr(self.model, 'keep_batch_shape', None)
        self._kept = keep() if keep is not None else contextlib.nullcontext()
        self._kept.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._kept.__exit__(None, None, None)
        restore_sampling_at_capacity(self._samplers)
        runner = self.run.runner
        runner.model = self.wrapper
        self.model.load_state_dict(self._state)
        runner.optimizer.load_state_dict(self._opt_state)
        runner.optimizer.zero_grad(set_to_none=True)
        for p in self.model.parameters():
            p.grad = None
        random.setstate(self._rng[0])
        np.random.set_state(self._rng[1])
        torch.set_rng_state(self._rng[2])
        if self._rng[3] is not None:
            torch.cuda.set_rng_state_all(self._rng[3])
        runner.meta = self._meta
        if on_cuda(self.run):  # the probe's cached blocks (plain steps among them) go back:
            torch.cuda.empty_cache()  # training's reserved memory is its own steps'

    def cost_table(self, batch: dict[str, Any], plain_only: bool = False) -> CostTable:
        """The probe's table on ``batch`` (rank 0's under DDP), over the modes worth probing
        on this device (``plain_only``: one plain recorded step, ``'full'`` derived from it on
        CPU), DDP's buckets included."""
        modes = probe_modes(self.run)
        if plain_only:
            modes = (None,) if on_cuda(self.run) else (None, 'full')
        timeline = self.timelines.new('plain') if self.timelines is not None else None
        table = CostTable.from_dict(from_rank0(probe(
            self.run, batch, modes=modes, timeline=timeline).to_dict()))
        if self.unseen and timeline is not None:
            timeline.shift(self.unseen)
        if self.unseen:
            table.add_resident('ddp_buckets', self.unseen)
        elif self.buckets:
            table.fixed['ddp_buckets'] = self.buckets
        return table

    def measure_step(self, batch: dict[str, Any]) -> tuple[int, float]:
        """``(peak bytes, seconds)`` of one step with the plan in force (rank 0's under DDP),
        DDP's buckets included (in the report's timeline too)."""
        timeline = self.timelines.new('measured') if self.timelines is not None else None
        measured, seconds = from_rank0(measure_step(self.run, batch, timeline=timeline))
        if self.unseen and timeline is not None:
            timeline.shift(self.unseen)
        return measured + self.unseen, seconds


def outer_options(cfg: Config, cuda: bool) -> list[dict[str, Any]]:
    """The settings the outer search tries, in order, when no checkpoint plan fits:
    ``{'fp16', 'cumulative_iters', 'samples_per_gpu'}`` with ``samples_per_gpu`` divided by
    2, 4, ... (while it divides) and ``cumulative_iters`` multiplied by as much (mmcv
    semantics: the lr is unchanged, one optimizer update per ``cumulative_iters``
    iterations); on CUDA each with ``fp16`` first (autocast halves the activations), on CPU
    without (float16 autocast on a CPU is many times slower than float32)."""
    base = TrainingOptions.from_cfg(cfg)
    out, k = [], 1
    while k <= base.samples_per_gpu and base.samples_per_gpu % k == 0:
        for fp16 in ([True, False] if cuda and not base.fp16 else [base.fp16]):
            options = TrainingOptions(fp16=fp16, cumulative_iters=base.cumulative_iters * k,
                                      samples_per_gpu=base.samples_per_gpu // k)
            if options != base:
                out.append(options.to_dict())
        k *= 2
    return out


def batch_shapes(run: TrainingRun, cfg: Config, **kwargs: Any) -> LoaderShapes:
    """The padded batch shapes and box counts the run's training loader gives
    (:func:`~ckptzoo.datasets.batch_shapes.loader_shapes` at the run's ``samples_per_gpu``),
    as the model trains them: a model that resizes its batches (``train_shapes``: YOLOX's
    random sizes) trains at the sizes it draws."""
    kwargs.setdefault('samples_per_gpu', run.options.samples_per_gpu)
    shapes = loader_shapes(cfg, run.data_loaders[0].dataset, kwargs.pop('samples_per_gpu'),
                           **kwargs)
    model = unwrap_model(run.runner.model)
    if hasattr(model, 'train_shapes'):
        sizes = sorted({s for g in shapes.groups for shape, _ in g.shapes
                        for s, _ in model.train_shapes(shape)})
        shapes = shapes.trained_at(model.train_shapes, (
            f'{type(model).__name__} resizes each batch to the size it trains at, so the '
            f'buckets cover the sizes it can draw ({", ".join(f"{h}x{w}" for h, w in sizes)}).'))
    return shapes


def _probe_shapes(buckets, divisor=32):
    """The shapes to probe: the largest bucket, and, when there are smaller ones, a second
    shape for the line in pixels: the smallest bucket, or, when that has more than 60 % of the
    largest's pixels, the smallest's aspect at about half the largest's pixels (rounded down to
    ``divisor``, as the pipeline pads), so that the line is well determined and its probe
    costs half a step."""
    big, small = buckets[-1], buckets[0]
    pixels = big[0] * big[1]
    if small[0] * small[1] >= pixels:
        return big, None
    if small[0] * small[1] > 0.6 * pixels:
        f = (0.5 * pixels / (small[0] * small[1])) ** 0.5
        small = tuple(max(divisor, int(s * f) // divisor * divisor) for s in small)
    return big, small


def _times_of(table, big, ratio):
    """``table`` with the times of ``big`` scaled by ``ratio`` (pixels): the small probe is the
    run's first step, whose times carry one-off costs (allocator, kernels' first calls); its
    bytes are exact, and step time grows with the pixels."""
    for unit, ref in zip(table.units, big.units):
        unit.fwd_time = ref.fwd_time * ratio
        unit.recompute_time = {m: t * ratio for m, t in ref.recompute_time.items()}
    table.step_time = big.step_time * ratio
    return table


def plan_checkpoints(run: TrainingRun, cfg: Config, budget: int, max_replans: int = 2,
                     logger: logging.Logger | None = None, segments: bool = True,
                     shapes: LoaderShapes | None = None,
                     max_buckets: int = MAX_BUCKETS,
                     timelines: TimelineSet | None = None) -> PlanResult:
    """A plan per batch-shape bucket for ``budget`` bytes, for the options ``run`` trains
    with, validated with one measured step at the largest bucket; re-planned with a margin
    raised by the observed error while that step is over the budget, at most ``max_replans``
    times. The largest bucket's plan is left on the model.

    The buckets (at most ``max_buckets``) cover every batch shape the loader can give
    (``shapes``, default :func:`batch_shapes`); the probe batches carry the largest number of
    ground-truth boxes an image of the data has. The cost at a bucket's shape is the line in
    pixels through two probes (:class:`~ckptzoo.memory.model.shape_model.ShapeCostModel`): one plain
    recorded step at a smaller shape (:func:`_probe_shapes`), then every mode at the largest
    bucket. Every probe and the validation step are the run's largest iteration (optimizer
    state held; with ``cumulative_iters`` > 1 a window's last, its gradients held from the
    start: :func:`~ckptzoo.memory.measure.probe.probe`), for the options ``run`` has; times are the
    largest's in proportion to the pixels (the first step of a run is slow for one-off
    reasons). Raises
    :class:`~ckptzoo.memory.InfeasibleBudget` naming the largest bucket's shape when no plan
    fits it. ``timelines`` (a :class:`~ckptzoo.memory.measure.timeline.TimelineSet`) records the
    probes' plain steps and the validation steps (:class:`ProbeSession`)."""
    shapes = shapes if shapes is not None else batch_shapes(run, cfg)
    if shapes.worst is None:
        bounds = [None]
    else:
        bounds = choose_buckets(shapes.candidates, max_buckets,
                                required=[g.worst for g in shapes.groups])
    boxes = shapes.max_boxes_per_image or None
    with ProbeSession(run, timelines) as session:
        big, small = _probe_shapes(bounds) if bounds[0] is not None else (None, None)
        batch = probe_batch(run, big, boxes)
        small_batch = probe_batch(run, small, boxes) if small is not None else None
        tables = {}
        if small is not None:  # a run's first step (its times carry one-off costs)
            tables[small] = session.cost_table(small_batch, plain_only=True)
        tables[big or tuple(batch['img'].shape[-2:])] = session.cost_table(batch)
        if small is not None:
            _times_of(tables[small], tables[big], small[0] * small[1] / (big[0] * big[1]))
        model = ShapeCostModel(tables)
        if bounds[0] is None:
            bounds = [model.largest]
        margin, replans = 0.0, 0
        while True:
            try:
                buckets = solve_buckets(model, bounds, int(budget * (1 - margin)), segments)
            except InfeasibleBudget as exc:  # what the planner says of the options tried
                exc.fixed = dict(tables[big or tuple(batch['img'].shape[-2:])].fixed)
                raise
            largest = next((b for b in buckets if b.shape == big), buckets[0])
            session.model.replace_checkpoint_plan(largest.plan, largest.segments)
            measured, seconds = session.measure_step(batch)
            if measured <= budget or replans >= max_replans:
                break
            error = (measured - largest.predicted_peak_bytes) / \
                max(largest.predicted_peak_bytes, 1)
            margin += max(error, 1e-3)
            replans += 1
            if logger is not None:
                logger.warning(f'memory plan: measured peak {format_bytes(measured)} is over '
                               f'the budget {format_budget(budget)} (predicted '
                               f'{format_bytes(largest.predicted_peak_bytes)}); re-planning '
                               f'with a margin of {margin:.1%}')
        largest.measured_peak_bytes = measured
    session.model.replace_checkpoint_plan(largest.plan, largest.segments)
    options = run.options
    return PlanResult(budget, largest.predicted_peak_bytes, measured, dict(largest.plan),
                      [list(s) for s in largest.segments], options.fp16,
                      options.cumulative_iters, options.samples_per_gpu,
                      largest.predicted_step_time, seconds, margin, replans,
                      model.table_at(largest.shape), buckets=buckets, boxes_per_image=boxes,
                      shapes_note=shapes.note, cost_model=model.to_dict())


def _fp16_flags(model):
    return [(m, m.__dict__.get('fp16_enabled'), m.__dict__.get('fp16_dtype'))
            for m in model.modules() if 'fp16_enabled' in m.__dict__]


def _batch_too_small(exc):
    """torch refusing a batch too small for BatchNorm / InstanceNorm in training."""
    return str(exc).startswith(('Expected more than 1 value per channel when training',
                                'Expected more than 1 spatial element when training'))


class PlannedRun(NamedTuple):
    """A plan and the run it is for: ``result`` (None when the config asks for no plan) and
    ``run``, assembled with the plan's options; ``result, run = plan_training(...)``."""

    result: PlanResult | None
    run: TrainingRun


def plan_memory(run: TrainingRun, cfg: Config, budget: int, max_replans: int = 2,
                logger: logging.Logger | None = None, segments: bool = True,
                timelines: TimelineSet | None = None) -> PlannedRun:
    """The fastest plan for ``budget`` bytes (:func:`plan_checkpoints`) and the run it was
    planned on. When no checkpoint plan fits, the outer search (:func:`outer_options`)
    re-probes the run assembled again (:meth:`~ckptzoo.apis.assemble.TrainingRun.with_options`)
    with fp16 (CUDA) and with ``samples_per_gpu`` divided under gradient accumulation, and
    takes the first that fits: that trial run is returned, to train as it is (``run`` itself
    when the configured options fit). The plan is left on the model; the result's options are
    those to train with (``configured``: those of ``cfg``, which is not changed). Raises
    :class:`~ckptzoo.memory.InfeasibleBudget` with the smallest budget that fits and what
    reaches it when nothing does.

    ``segments``: allow segments over the model's chains (``checkpoint_chains()``); False
    keeps to one checkpoint per unit. ``timelines``: see :func:`plan_checkpoints` (every
    trial records into it)."""
    cuda = on_cuda(run)
    flags = _fp16_flags(unwrap_model(run.runner.model))
    configured = TrainingOptions.from_cfg(cfg).to_dict()
    tried = []
    notes = [] if cuda else ['fp16 is not available on a CPU (float16 autocast there is far '
                             'slower than float32, and it is not searched)']
    for options in [None] + outer_options(cfg, cuda):
        trial = run if options is None else run.with_options(
            cfg, TrainingOptions.from_dict(options))
        try:
            result = plan_checkpoints(trial, cfg, budget, max_replans, logger, segments,
                                      timelines=timelines)
        except (InfeasibleBudget, ValueError) as exc:
            for m, enabled, dtype in flags:  # an fp16 trial switched them on
                m.fp16_enabled = enabled
                if dtype is not None or 'fp16_dtype' in m.__dict__:
                    m.fp16_dtype = dtype
            if not isinstance(exc, InfeasibleBudget):
                if options is None or not _batch_too_small(exc):
                    raise
                # every later option has this batch or a smaller one
                notes.insert(0, f'samples_per_gpu={options["samples_per_gpu"]} and below '
                             f'cannot train this model ({exc}: normalisation in training '
                             'needs more than one value per channel), so the search stopped '
                             f'at samples_per_gpu={tried[-1][3]["samples_per_gpu"]}')
                break
            tried.append((exc.minimum.peak, len(tried), exc.minimum, trial.options.to_dict(),
                          exc.shape, getattr(exc, 'fixed', None)))
            if logger is not None:
                logger.info(f'memory plan: nothing fits with {trial.options.to_dict()} '
                            f'(smallest predicted peak {format_bytes(exc.minimum.peak)})')
            continue
        result.configured = configured
        if options is not None and logger is not None:
            logger.warning(f'memory plan: no checkpoint plan fits {format_budget(budget)} as '
                           f'configured ({_why_not(tried[0])}); training with {options} (the '
                           'lr as configured; max_iters of an IterBasedRunner counts '
                           'iterations of the smaller batch)')
        return PlannedRun(result, trial)
    _, _, minimum, options, shape, _ = min(tried, key=lambda t: t[:2])
    raise InfeasibleBudget(budget, minimum, options=options if len(tried) > 1 else None,
                           shape=shape,
                           notes=notes)


def _why_not(tried):
    """Why the options as configured did not fit: their smallest predicted peak, at which
    batch, and how much of it the plan-independent bytes are."""
    peak, _, _, options, shape, fixed = tried
    at = '' if shape is None else f' for batches of {shape[0]}x{shape[1]}'
    text = (f'with {", ".join(f"{k}={v}" for k, v in options.items())} the smallest '
            f'predicted peak is {format_bytes(peak)}{at}')
    weights = {k: v for k, v in (fixed or {}).items()
               if k in ('parameters', 'gradients', 'optimizer_state')}
    if weights:
        text += (f', of which parameters, gradients and optimizer state take '
                 f'{format_bytes(sum(weights.values()))}')
    return text


def _switched_off(asked, result):
    """The units the config checkpointed (``with_cp`` / ``checkpoint_plan``) that the plan
    leaves plain (and in no segment)."""
    in_segment = set()
    if result.table is not None:
        names = result.table.names
        for first, last in result.segments or []:
            in_segment.update(names[names.index(first):names.index(last) + 1])
    return [n for n in asked if result.plan.get(n) is None and n not in in_segment]


def plan_made_for(run: TrainingRun, cfg: Config, samples_per_gpu: int) -> dict[str, Any]:
    """What a plan for ``run`` at ``samples_per_gpu`` is made for (the plan file's
    ``made_for``, :mod:`ckptzoo.memory.plan_fit`): its model and the batch shapes and box
    counts its training data gives (the worst cases only: one epoch's indices, no images)."""
    shapes = batch_shapes(run, cfg, samples_per_gpu=samples_per_gpu, epochs=1)
    return made_for(unwrap_model(run.runner.model), shapes)


def check_plan_outputs(work_dir: str) -> None:
    """Refuse a work dir where ``memory_plan.json`` or ``memory_report.html`` cannot be
    written (a directory of that name, a read-only folder), naming the path and why: found
    after the probe steps it was a bare ``IsADirectoryError``."""
    for path in (osp.join(work_dir, PLAN_FILE), osp.join(work_dir, REPORT_FILE)):
        problem = unwritable(path)
        if problem:
            raise OSError(f'cannot write the memory plan\'s file {path}: {problem}; a run '
                          'with memory_budget writes it into the work dir: remove or rename '
                          'what is there, or choose another work dir')


def _saved_plan(path, budget, configured, logger, run=None, cfg=None):
    """The plan in ``path`` when it was made for this budget and these options, and (given
    ``run``) for this model and this data, else None (saying what changed)."""
    saved = read_plan_file(path)
    changes = plan_changes(saved, budget, configured)
    say = logger.warning if logger is not None else warnings.warn
    if changes:
        say(f'memory plan: {path} was made for ' + ', '.join(
                f'{name}={old}' for name, old, _ in changes) + '; the config now gives ' +
            ', '.join(f'{name}={new}' for name, _, new in changes) + ': planning again '
            '(the resumed run trains with the new plan)')
        return None
    if run is not None:
        fit = fit_changes(saved, plan_made_for(run, cfg, saved['samples_per_gpu']))
        if fit:
            say(f'memory plan: {path} was made for another model or other data: ' +
                '; '.join(fit) + ': planning again (the resumed run trains with the new '
                'plan)')
            return None
        if saved['cumulative_iters'] > 1 and not window_probed(saved):
            say(f'memory plan: {path} plans gradient accumulation (cumulative_iters='
                f'{saved["cumulative_iters"]}) without the gradients that the iterations of a '
                'window hold from their start (written by an earlier version of ckptzoo): '
                'planning again (the resumed run trains with the new plan)')
            return None
        if saved.get('made_for') is None:
            say(f'memory plan: {path} does not record the model and data it was made for '
                '(written by an earlier version of ckptzoo); its checkpoint units are this '
                f'model\'s, so it is reused: delete it to plan again for this data')
    if logger is not None:
        logger.info(f'memory plan: reusing {path}')
    return PlanResult.from_dict(saved)


def plan_training(run: TrainingRun, cfg: Config, logger: logging.Logger | None = None,
                  resume: bool = False) -> PlannedRun:
    """Plan a training run before it starts, when the config asks for it (see
    :func:`planning_requested`); returns :class:`PlannedRun`: the plan (None when the config
    asks for none) and the run to train (``run`` itself without a plan). The plan is saved to
    ``work_dir/memory_plan.json`` and a resume reuses it, unless the budget or the options as
    configured (``samples_per_gpu``, ``cumulative_iters``, ``fp16``), the model or the data's
    batch shapes and box counts changed (:mod:`ckptzoo.memory.plan_fit`): then it says so
    and plans again; a file that is no plan is refused (:mod:`ckptzoo.memory.plan_file`), and
    a work dir where the plan or the report cannot be written before any probe step.
    Under DDP rank 0's plan is every rank's.

    The run to train is the one :func:`plan_memory` planned on, or, for a reused plan whose
    options (fp16, gradient accumulation, a smaller ``samples_per_gpu``) differ from ``run``'s,
    ``run``'s model and datasets assembled once with them (the lr as it is). Here, once, the
    plan's options are set in ``cfg`` and its modes and segments put on that run's model
    (``replace_checkpoint_plan``: exactly the plan, after the assembly applied the config's
    own ``checkpoint_plan``)."""
    budget = planning_requested(cfg)
    if budget is None:
        return PlannedRun(None, run)
    rank, world = get_dist_info()
    check_plan_outputs(cfg.work_dir)  # before any probe step
    path = osp.join(cfg.work_dir, PLAN_FILE)
    result = timelines = None
    if resume and osp.exists(path):
        result = _saved_plan(path, budget, TrainingOptions.from_cfg(cfg).to_dict(), logger,
                             run, cfg)
    asked = [n for n, m in unwrap_model(run.runner.model).checkpoint_plan().items()
             if m is not None]  # what with_cp / checkpoint_plan set
    if result is None:  # every rank steps in the probe; all solve rank 0's table
        timelines = TimelineSet()  # the report's curves, from steps made anyway
        result, run = plan_memory(run, cfg, budget, logger=logger, timelines=timelines)
        result = replace(result, made_for=plan_made_for(run, cfg, result.samples_per_gpu))
    if world > 1:
        shared = PlanResult.from_dict(from_rank0(result.to_dict()))
        if rank != 0:  # rank 0's keeps its cost table
            result = shared
    options = TrainingOptions.from_dict(result.options)
    run = run.with_options(cfg, options)  # the planned run itself; a reused plan's, assembled
    options.apply_to(cfg)
    unwrap_model(run.runner.model).replace_checkpoint_plan(result.plan, result.segments or [])
    if rank == 0:
        write_plan_file(path, result)
        if logger is not None:
            logger.info('memory plan:\n' + plan_table(result))
            off = _switched_off(asked, result)
            if off:
                logger.info(f'memory plan: the config checkpoints {len(asked)} units '
                            f'(with_cp / checkpoint_plan); the plan leaves {len(off)} of them '
                            f'plain ({", ".join(off[:3])}{", ..." if len(off) > 3 else ""}): '
                            'the budget holds without, and plain steps are faster')
        if result.table is not None:  # planned now, not read from a file
            from ..memory.report.html import write_memory_report  # matplotlib: when drawn
            report = write_memory_report(result, osp.join(cfg.work_dir, REPORT_FILE),
                                         timelines, title='Memory plan: ' + osp.basename(
                                             getattr(cfg, 'filename', None) or 'config'))
            if logger is not None:
                logger.info(f'memory report: {report} (open it in a browser)')
    return PlannedRun(result, run)
