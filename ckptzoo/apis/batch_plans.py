"""A planned run follows the batch while it trains: each batch under its bucket's plan, each
step's memory measured against the budget, a bucket found over it planned again.

:func:`ckptzoo.apis.plan.plan_training` decides the buckets before the run;
:class:`~ckptzoo.memory.plan_hook.MemoryPlanHook` switches, measures and guards during it; this
module connects the two: it gives the hook the plan's buckets and a re-planner over the plan's
cost model, which writes the re-planned bucket back to ``work_dir/memory_plan.json`` so that a
resumed run keeps it.
"""
from __future__ import annotations

import logging
import os.path as osp
from typing import TYPE_CHECKING

from mmengine.config import Config

from ..memory import InfeasibleBudget, format_bytes
from ..memory.buckets import Bucket, solve_buckets
from ..memory.plan_file import PLAN_FILE, PlanResult, write_plan_file
from ..memory.plan_hook import PRIORITY as PLAN_HOOK_PRIORITY, MemoryPlanHook
from ..memory.shape_model import ShapeCostModel
from ..runner.dist_utils import get_dist_info
from .config import memory_check_interval

if TYPE_CHECKING:
    from .train import TrainingRun

__all__ = ['attach_plan_hook']

#: the bound of a plan that holds for every batch shape (a plan file without buckets)
_ANY_SHAPE = (1 << 30, 1 << 30)


def attach_plan_hook(run: TrainingRun, cfg: Config, result: PlanResult | None,
                     logger: logging.Logger | None = None) -> MemoryPlanHook | None:
    """Make the run follow ``result``'s buckets: the run's
    :class:`~ckptzoo.memory.plan_hook.MemoryPlanHook` (registered by :func:`build_training`
    when ``memory_check_interval`` is set, else now) switches to the bucket of each batch,
    guards the budget (every step on CUDA; every ``memory_check_interval``-th on a CPU) and
    re-plans a bucket found over it from the plan's cost model, with the error as a margin;
    the re-planned bucket is written to ``work_dir/memory_plan.json`` so that a resumed run
    keeps it. None without a plan."""
    if result is None:
        return None
    hooks = run.runner.hooks
    for old in [h for h in hooks if isinstance(h, MemoryPlanHook)]:
        hooks.remove(old)  # the measuring-only hook build_training registered
    buckets = list(result.buckets or [Bucket(  # a single-plan file: one bucket for all
        _ANY_SHAPE, dict(result.plan), [list(s) for s in result.segments],
        result.predicted_peak_bytes, result.predicted_step_time)])
    hook = MemoryPlanHook(buckets, result.budget_bytes, interval=memory_check_interval(cfg),
                          replan=_replanner(cfg, result, logger),
                          plan_file=osp.join(cfg.work_dir, PLAN_FILE)
                          if cfg.get('work_dir') else None)
    run.runner.register_hook(hook, priority=PLAN_HOOK_PRIORITY)
    return hook


def _replanner(cfg, result, logger):
    """``replan(bucket, measured, shape, boxes)`` for the hook: the bucket solved again from
    the cost model for the budget less the margin and the error it showed (None without a
    cost model, or when nothing fits: the hook then takes a more frugal plan)."""
    if not result.cost_model:
        return None
    model = ShapeCostModel.from_dict(result.cost_model)
    rank, _ = get_dist_info()

    def replan(bucket, measured, shape, boxes):
        error = measured / max(bucket.predicted_peak_bytes, 1) - 1
        result.margin += max(error, 0.0) + 0.01
        try:
            new = solve_buckets(model, [bucket.shape], int(result.budget_bytes *
                                                          (1 - result.margin)))[0]
        except (InfeasibleBudget, ValueError):  # nothing fits, or a shape beyond the probes
            return None
        new.measured_peak_bytes = measured
        if result.buckets:
            result.buckets = [new if b.shape == bucket.shape else b for b in result.buckets]
        if rank == 0 and cfg.get('work_dir'):
            write_plan_file(osp.join(cfg.work_dir, PLAN_FILE), result)
        if logger is not None:
            logger.info(f'memory plan: bucket {bucket.shape[0]}x{bucket.shape[1]} re-planned '
                        f'with a margin of {result.margin:.1%}: predicted peak '
                        f'{format_bytes(new.predicted_peak_bytes)}')
        return new
    return replan
