"""Budget in, plan out: probe, solve, validate with one measured step, apply.

``plan_training(run, cfg)`` is what ``tools/train.py`` (through ``ckptzoo.apis.train_model``)
and ``tools/plan_memory.py`` call on a run that :func:`ckptzoo.apis.build_training` assembled.
The probe and the validation make real optimizer steps; the weights, optimizer state and RNG
states are restored afterwards, so a planned run trains exactly as the same plan set by hand.
"""
import contextlib
import copy
import json
import os.path as osp
import random
from dataclasses import dataclass, field

import numpy as np
import torch

from .budget import format_bytes, parse_budget
from .cost_table import MODES, CostTable
from .peak import plan_from_modes, plan_modes, plan_segments, predict_time, unit_kept
from .probe import measure_step, probe, probe_batch, worst_case_shape
from .solver import solve

__all__ = ['PlanResult', 'planning_requested', 'plan_memory', 'plan_training', 'plan_table',
           'apply_plan', 'PLAN_FILE']

#: the plan is saved under this name in the work dir, and a resume reuses it
PLAN_FILE = 'memory_plan.json'


@dataclass
class PlanResult:
    budget_bytes: int
    predicted_peak_bytes: int
    measured_peak_bytes: int
    plan: dict
    segments: list
    fp16: bool
    cumulative_iters: int
    samples_per_gpu: int
    predicted_step_time: float = None
    measured_step_time: float = None
    margin: float = 0.0
    replans: int = 0
    table: object = field(default=None, repr=False)

    def to_json(self):
        keys = ('budget_bytes', 'predicted_peak_bytes', 'measured_peak_bytes', 'plan',
                'segments', 'fp16', 'cumulative_iters', 'samples_per_gpu',
                'predicted_step_time', 'measured_step_time', 'margin', 'replans')
        out = {k: getattr(self, k) for k in keys}
        out['plan'] = dict(self.plan)
        return out

    @classmethod
    def from_json(cls, d):
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != 'table'})


def planning_requested(cfg):
    """The budget in bytes when the config asks for a plan (``memory_budget``, or
    ``with_cp='auto'`` somewhere in ``model``), else None. ``with_cp='auto'`` is replaced by
    False: the plan, not the flag, sets the modes."""
    autos = []

    def scan(node, path):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == 'with_cp' and value == 'auto':
                    node[key] = False
                    autos.append(f'{path}.with_cp')
                else:
                    scan(value, f'{path}.{key}')
    scan(cfg.model, 'model')
    budget = cfg.get('memory_budget')
    if budget is None:
        if autos:
            raise ValueError(f"{autos[0]}='auto' needs a memory budget: set memory_budget = "
                             "'6GB' (bytes, a size with B/KB/MB/GB/KiB/MiB/GiB, or a fraction "
                             "of the GPU such as 0.9) at the top level of the config, or pass "
                             "--cfg-options memory_budget=6GB")
        return None
    return parse_budget(budget)


@contextlib.contextmanager
def _restored(run):
    """Weights, buffers, optimizer state and RNG states as they were; the plain module
    (not its DDP wrapper) as ``runner.model``: a probe step must not all-reduce."""
    runner = run.runner
    wrapper = runner.model
    module = getattr(wrapper, 'module', wrapper)
    state = copy.deepcopy(module.state_dict())
    opt_state = copy.deepcopy(runner.optimizer.state_dict())
    rng = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
           torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    meta = copy.deepcopy(runner.meta)
    runner.model = module
    try:
        yield module
    finally:
        runner.model = wrapper
        module.load_state_dict(state)
        runner.optimizer.load_state_dict(opt_state)
        runner.optimizer.zero_grad(set_to_none=True)
        for p in module.parameters():
            p.grad = None
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if rng[3] is not None:
            torch.cuda.set_rng_state_all(rng[3])
        runner.meta = meta


def _accumulation(cfg):
    opt = cfg.get('optimizer_config') or {}
    return int(opt.get('cumulative_iters', 1)) if isinstance(opt, dict) else 1


def _from_rank0(obj):
    """Rank 0's ``obj`` on every rank: under DDP every rank probes in step (each step
    all-reduces its log variables), and all follow rank 0's measurements."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()) or \
            torch.distributed.get_world_size() == 1:
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def probe_modes(run):
    """The modes worth probing: ``'offload'`` moves saved tensors to CPU memory, which saves
    nothing when the model already runs on the CPU."""
    from ..runner.utils import get_model_device
    if get_model_device(run.runner.model).type == 'cpu':
        return (None, 'full', 'selective')
    return MODES


def apply_plan(model, table, plan):
    """Set a plan (groups over ``table``) on ``model``: the units' modes and the segments."""
    model = getattr(model, 'module', model)
    model.set_checkpoint_plan(plan_modes(table, plan))
    model.set_checkpoint_segments(plan_segments(table, plan))


def plan_memory(run, cfg, budget, max_replans=2, logger=None, segments=True):
    """Probe, solve for ``budget`` bytes, validate with one measured step (re-planning with a
    margin raised by the observed error, at most ``max_replans`` times). Applies the plan (unit
    modes and segments) to the model and returns a :class:`PlanResult`; raises
    :class:`~ckptzoo.memory.solver.InfeasibleBudget` when nothing fits.

    ``segments``: allow segments over the model's chains (``checkpoint_chains()``); False
    keeps to one checkpoint per unit."""
    from ..runner.hooks.optimizer import OptimizerHook
    hook = next(h for h in run.runner.hooks if isinstance(h, OptimizerHook))
    with _restored(run) as model:
        hook.before_run(run.runner)
        batch = probe_batch(run, worst_case_shape(cfg))
        table = _from_rank0(probe(run, batch, modes=probe_modes(run)).to_dict())
        table = CostTable.from_dict(table)
        margin, replans = 0.0, 0
        while True:
            solution = solve(table, int(budget * (1 - margin)), segments=segments)
            apply_plan(model, table, solution.plan)
            measured, seconds = _from_rank0(measure_step(run, batch))
            if measured <= budget or replans >= max_replans:
                break
            error = (measured - solution.peak) / max(solution.peak, 1)
            margin += max(error, 1e-3)
            replans += 1
            if logger is not None:
                logger.warning(f'memory plan: measured peak {format_bytes(measured)} is over '
                               f'the budget {format_bytes(budget)} (predicted '
                               f'{format_bytes(solution.peak)}); re-planning with a margin of '
                               f'{margin:.1%}')
        plan = plan_modes(table, solution.plan)
    apply_plan(model, table, solution.plan)
    return PlanResult(budget, solution.peak, measured, plan, plan_segments(table, solution.plan),
                      cfg.get('fp16') is not None, _accumulation(cfg),
                      cfg.data.samples_per_gpu, solution.time, seconds, margin, replans, table)


def plan_table(result):
    """The plan as a text table: unit (a segment: first..last), mode, predicted MiB kept,
    predicted recompute ms."""
    table = result.table
    rows = []
    if table is not None:
        plan = plan_from_modes(table, result.plan, result.segments)
        kept = unit_kept(table, plan)
        for g in plan:
            units = table.units[g.start:g.stop]
            name, mode = units[0].name, str(g.mode)
            if len(units) > 1:  # a segment: one row, its units' recompute together
                name, mode = f'{name}..{units[-1].name}', 'segment'
            rows.append((name, mode, f'{sum(kept[g.start:g.stop]) / 2 ** 20:>9.1f} '
                         f'{(predict_time(table, (g, )) - table.step_time) * 1e3:>13.1f}'))
        step = f'{predict_time(table, plan) * 1e3:.0f} ms'
    else:
        rows = [(name, str(mode), '') for name, mode in result.plan.items()]
        rows += [(f'{a}..{b}', 'segment', '') for a, b in result.segments or []]
        step = 'n/a'
    width = max([24] + [len(r[0]) for r in rows])
    lines = [f'{"unit":<{width}} {"mode":<10} {"kept MiB":>9} {"recompute ms":>13}']
    lines += [f'{name:<{width}} {mode:<10} {cells}'.rstrip() for name, mode, cells in rows]
    lines.append(f'budget {format_bytes(result.budget_bytes)}, predicted peak '
                 f'{format_bytes(result.predicted_peak_bytes)}, measured peak '
                 f'{format_bytes(result.measured_peak_bytes)}, predicted step {step}')
    return '\n'.join(lines)


def plan_training(run, cfg, logger=None, resume=False):
    """Plan a training run before it starts, when the config asks for it (see
    :func:`planning_requested`). Under DDP every rank runs the probe steps in step, and rank
    0's measurements and plan are broadcast, so every rank trains the same plan; the plan is saved to ``work_dir/memory_plan.json`` and a resume reuses it."""
    budget = planning_requested(cfg)
    if budget is None:
        return None
    from ..runner.dist_utils import get_dist_info
    rank, world = get_dist_info()
    path = osp.join(cfg.work_dir, PLAN_FILE)
    result = None
    if resume and osp.exists(path):
        with open(path, encoding='utf-8') as f:
            result = PlanResult.from_json(json.load(f))
        if logger is not None:
            logger.info(f'memory plan: reusing {path}')
    else:  # every rank steps in the probe; all solve rank 0's table (see _from_rank0)
        result = plan_memory(run, cfg, budget, logger=logger)
    if world > 1:
        shared = PlanResult.from_json(_from_rank0(result.to_json()))
        result = result if rank == 0 else shared  # rank 0's keeps its cost table
    module = getattr(run.runner.model, 'module', run.runner.model)
    module.set_checkpoint_plan(result.plan)
    module.set_checkpoint_segments(result.segments or [])
    if rank == 0:
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(result.to_json(), f, indent=1)
        if logger is not None:
            logger.info('memory plan:\n' + plan_table(result))
    return result


def cost_report(table):
    """Per unit and mode: MiB kept for backward and the recompute ms the probe measured."""
    modes = [m for m in (None, 'full', 'selective', 'offload')
             if any(m in u.kept for u in table.units)]
    head = f'{"unit":<24}' + ''.join(f' {str(m) + " MiB":>14} {str(m) + " ms":>13}'
                                     for m in modes)
    lines = [head]
    for u in table.units:
        cells = ''.join(f' {u.kept[m] / 2 ** 20:>14.2f} {u.extra_time(m) * 1e3:>13.1f}'
                        if m in u.kept else f' {"-":>14} {"-":>13}' for m in modes)
        lines.append(f'{u.name:<24}{cells}')
    fixed = ', '.join(f'{k} {format_bytes(v)}' for k, v in table.fixed.items())
    lines.append(f'fixed: {fixed}; plain step {table.step_time * 1e3:.0f} ms')
    return '\n'.join(lines)


def baseline_plans(table):
    """The plans a user could set by hand, by name: all off, every unit ``'full'``, Chen's
    sqrt(n) segments (over the model's chains), and every combination of per-stage ``with_cp``
    flags of the backbone (``backbone.layer1`` ... or ``backbone.stages.N``)."""
    import itertools
    import re

    from .peak import Group, uniform_plan
    from .solver import chen_sqrt_plan
    plans = {'all off': uniform_plan(table, None), 'every unit full': uniform_plan(table, 'full')}
    if table.chains:
        plans['Chen sqrt(n)'] = chen_sqrt_plan(table)
    stages = []
    for i, name in enumerate(table.names):
        match = re.match(r'backbone\.(layer\d+|stages\.\d+|features\.\w+?\d+)\.', name)
        if match and 'full' in table.units[i].kept:
            if not stages or stages[-1][0] != match.group(1):
                stages.append((match.group(1), []))
            stages[-1][1].append(i)
    for flags in itertools.product((False, True), repeat=len(stages)):
        on = {i for (_, idx), flag in zip(stages, flags) if flag for i in idx}
        plans['stages ' + ''.join('1' if f else '0' for f in flags)] = tuple(
            Group(i, i + 1, 'full' if i in on else None) for i in range(len(table.units)))
    return plans
