"""The memory planner's library: a budget in, the fastest checkpoint plan that fits out.

``budget`` parses what users write; ``step`` is one training step outside the loop and its
worst-case input; ``batch_shapes`` the batch shapes and box counts the training loader gives;
``probe`` records what each checkpoint unit keeps and costs (a ``cost_table``),
``shape_model`` those costs at any batch shape; ``peak`` is the peak model; ``solver`` chooses
the plan, ``buckets`` a plan per batch-shape bucket; ``plan_file`` is the plan as data and as
``memory_plan.json``; ``report`` and ``baselines`` are for people and tools; ``timing``
compares plans on a noisy machine; ``plan_hook`` switches the plan per batch shape during
training, and measures, logs and guards each step's memory. ``trackers`` counts bytes (live
tensor storage, saved for backward) and ``meter`` reads a training step's time and memory
with them.
Planning a training run (the search over fp16, accumulation and batch, the probe steps' state,
DDP) is :mod:`ckptzoo.apis.plan`'s.
"""
from ..datasets.batch_shapes import GroupShapes, LoaderShapes, loader_shapes, pipeline_bound
from .model.buckets import Bucket, bucket_for, choose_buckets, solve_buckets
from .model.budget import format_budget, format_bytes, parse_budget
from .model.cost_table import MODES, CostTable, UnitCost
from .measure.meter import StepMeter
from .measure.peak_meter import PeakMeter
from .model.peak import (Group, Plan, apply_plan, kept_bytes, peak_points, plan_from_modes, plan_modes,
                   plan_segments, predict_peak, predict_time, uniform_plan)
from .plan_hook import MemoryPlanHook
from .plan_file import PLAN_FILE, PlanFileError, PlanResult, read_plan_file, write_plan_file
from .model.shape_model import ShapeCostModel
from .model.solver import (InfeasibleBudget, Solution, chen_sqrt_plan, choose_plan, count_plans,
                     exhaustive_search, minimum_peak, most_frugal, pareto_front, solve)
from .measure.trackers import LiveTensorTracker, SavedTensorCounter, peak_live_bytes, saved_tensor_bytes

__all__ = ['parse_budget', 'format_bytes', 'format_budget', 'MODES', 'CostTable', 'UnitCost', 'Group', 'Plan',
           'apply_plan', 'kept_bytes', 'peak_points', 'plan_from_modes', 'plan_modes',
           'plan_segments', 'predict_peak', 'predict_time', 'uniform_plan', 'PLAN_FILE',
           'PlanFileError', 'PlanResult', 'read_plan_file', 'write_plan_file',
           'InfeasibleBudget', 'Solution', 'chen_sqrt_plan', 'choose_plan', 'count_plans',
           'exhaustive_search', 'minimum_peak', 'most_frugal', 'pareto_front', 'solve',
           'LiveTensorTracker', 'SavedTensorCounter', 'peak_live_bytes', 'saved_tensor_bytes',
           'StepMeter', 'PeakMeter', 'ShapeCostModel', 'Bucket', 'bucket_for', 'choose_buckets',
           'solve_buckets', 'GroupShapes', 'LoaderShapes', 'loader_shapes', 'pipeline_bound',
           'MemoryPlanHook']
