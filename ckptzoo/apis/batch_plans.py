"""A run's one memory hook, and how a planned run follows the batch while it trains: each
batch under its bucket's plan, each step's memory measured against the budget, a bucket found
over it planned again.

:func:`ckptzoo.apis.plan.plan_training` decides the buckets before the run;
:class:`~ckptzoo.memory.plan_hook.MemoryPlanHook` switches, measures and guards during it; this
module connects the two, in one place: :func:`attach_memory_hook` registers the run's
:class:`~ckptzoo.memory.plan_hook.MemoryPlanHook`, once (the assembly,
:func:`ckptzoo.apis.assemble.build_training`, registers none): with a plan, the plan's buckets,
its budget and a re-planner over its cost model; without one, a hook that only measures (the
config's ``memory_check_interval``). The re-planner makes a new plan rather than changing the
one it was given, and writes it to ``work_dir/memory_plan.json`` so that a resumed run keeps
it.
"""
from __future__ import annotations

import copy
import logging
import os.path as osp
from dataclasses import replace
from typing import TYPE_CHECKING

from mmengine.config import Config

from ..memory import InfeasibleBudget, format_bytes
from ..memory.model.buckets import Bucket, solve_buckets
from ..memory.plan_file import PLAN_FILE, PlanResult, write_plan_file
from ..memory.plan_hook import PRIORITY as PLAN_HOOK_PRIORITY, MemoryPlanHook
from ..memory.model.shape_model import ShapeCostModel
from ..memory.measure.step import on_cuda
from ..runner.dist_utils import get_dist_info
from .config import DEFAULT_MEMORY_CHECK_INTERVAL, memory_check_interval

if TYPE_CHECKING:
    from .assemble import TrainingRun

__all__ = ['attach_memory_hook', 'attach_plan_hook']

#: the bound of a plan that holds for every batch shape (a plan file without buckets)
_ANY_SHAPE = (1 << 30, 1 << 30)


def attach_memory_hook(run: TrainingRun, cfg: Config, result: PlanResult | None = None,
                       logger: logging.Logger | None = None) -> MemoryPlanHook | None:
    """Register the run's one :class:`~ckptzoo.memory.plan_hook.MemoryPlanHook` (at
    :data:`~ckptzoo.memory.plan_hook.PRIORITY`, after the optimizer hook) and return it.

    With a plan (``result``, of :func:`~ckptzoo.apis.plan.plan_training`), the hook switches
    to the bucket of each batch, guards the budget (every step on CUDA; every
    ``memory_check_interval``-th on a CPU) and re-plans a bucket found over it from the plan's
    cost model, with the error as a margin; the re-planned plan is written to
    ``work_dir/memory_plan.json`` so that a resumed run keeps it. The hook gets copies of the
    buckets: ``result`` is not changed. Without a plan, a hook that only measures every
    ``memory_check_interval``-th step on a CPU (unset: every
    :data:`~ckptzoo.apis.config.DEFAULT_MEMORY_CHECK_INTERVAL`-th; 0: none, None is returned).

    A run has one memory hook: one that ``custom_hooks`` registered gives way to the plan's,
    and without a plan it is the run's (returned; none is added)."""
    interval = memory_check_interval(cfg)
    if interval is None:  # unset: sparsely on a CPU, so that the log has ``memory`` there too
        interval = 0 if on_cuda(run) else DEFAULT_MEMORY_CHECK_INTERVAL
    hooks = run.runner.hooks
    given = [h for h in hooks if isinstance(h, MemoryPlanHook)]  # by custom_hooks
    if result is None:
        if given or not interval:
            return given[0] if given else None
        hook = MemoryPlanHook(interval=interval)
    else:
        buckets = [copy.copy(b) for b in result.buckets or [Bucket(
            # a single-plan file: one bucket for all
            _ANY_SHAPE, dict(result.plan), [list(s) for s in result.segments],
            result.predicted_peak_bytes, result.predicted_step_time)]]
        hook = MemoryPlanHook(buckets, result.budget_bytes, interval=interval,
                              replan=_replanner(cfg, result, logger),
                              plan_file=osp.join(cfg.work_dir, PLAN_FILE)
                              if cfg.get('work_dir') else None)
    for old in given:  # the plan's hook takes the place of the config's
        hooks.remove(old)
    run.runner.register_hook(hook, priority=PLAN_HOOK_PRIORITY)
    return hook


#: the name before :func:`attach_memory_hook` registered the measuring-only hook as well
attach_plan_hook = attach_memory_hook


def _replanner(cfg, result, logger):
    """``replan(bucket, measured, shape, boxes)`` for the hook: the bucket solved again from
    the cost model for the budget less the margin and the error it showed (None without a
    cost model, or when nothing fits: the hook then takes a more frugal plan). The current
    plan is kept here: each re-plan makes a new :class:`PlanResult` (the margin raised, the
    bucket replaced), writes it to the plan file and leaves the one before, ``result`` first,
    as it was."""
    if not result.cost_model:
        return None
    model = ShapeCostModel.from_dict(result.cost_model)
    rank, _ = get_dist_info()
    current = result

    def replan(bucket, measured, shape, boxes):
        nonlocal current
        error = measured / max(bucket.predicted_peak_bytes, 1) - 1
        margin = current.margin + max(error, 0.0) + 0.01
        try:
            new = solve_buckets(model, [bucket.shape], int(current.budget_bytes *
                                                           (1 - margin)))[0]
        except (InfeasibleBudget, ValueError):  # nothing fits, or a shape beyond the probes
            current = replace(current, margin=margin)  # the error stays in the margin
            return None
        new.measured_peak_bytes = measured
        buckets = current.buckets and [new if b.shape == bucket.shape else b
                                       for b in current.buckets]
        current = replace(current, margin=margin, buckets=buckets)
        if rank == 0 and cfg.get('work_dir'):
            write_plan_file(osp.join(cfg.work_dir, PLAN_FILE), current)
        if logger is not None:
            logger.info(f'memory plan: bucket {bucket.shape[0]}x{bucket.shape[1]} re-planned '
                        f'with a margin of {margin:.1%}: predicted peak '
                        f'{format_bytes(new.predicted_peak_bytes)}')
        return new
    return replan
