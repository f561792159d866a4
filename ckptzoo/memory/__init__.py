"""The memory planner: a budget in, the fastest checkpoint plan that fits out.

``budget`` parses what users write; ``cost_table`` is what a probe step measured; ``peak`` is
the peak model; ``solver`` chooses the plan. ``trackers`` counts bytes (live tensor storage, saved
for backward) and ``meter`` reads a training step's time and memory with them.
"""
from .budget import format_bytes, parse_budget
from .cost_table import MODES, CostTable, UnitCost
from .meter import StepMeter
from .peak import (Group, kept_bytes, peak_points, plan_from_modes, plan_modes, plan_segments,
                   predict_peak, predict_time, uniform_plan)
from .solver import (InfeasibleBudget, Solution, chen_sqrt_plan, count_plans, exhaustive_search,
                     minimum_peak, most_frugal, pareto_front, solve)
from .trackers import LiveTensorTracker, SavedTensorCounter, peak_live_bytes, saved_tensor_bytes

__all__ = ['parse_budget', 'format_bytes', 'MODES', 'CostTable', 'UnitCost', 'Group',
           'kept_bytes', 'peak_points', 'plan_from_modes', 'plan_modes', 'plan_segments',
           'predict_peak', 'predict_time', 'uniform_plan', 'InfeasibleBudget', 'Solution',
           'chen_sqrt_plan', 'count_plans', 'exhaustive_search', 'minimum_peak', 'most_frugal',
           'pareto_front', 'solve', 'LiveTensorTracker', 'SavedTensorCounter', 'peak_live_bytes',
           'saved_tensor_bytes', 'StepMeter']
