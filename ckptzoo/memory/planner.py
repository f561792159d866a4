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
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from .budget import format_bytes, parse_budget
from .cost_table import MODES, CostTable
from .peak import plan_from_modes, plan_modes, plan_segments, predict_time, unit_kept
from .plan_file import plan_changes, read_plan_file
from .probe import ddp_bucket_bytes, measure_step, probe, probe_batch, worst_case_shape
from .solver import InfeasibleBudget, solve

__all__ = ['PlanResult', 'planning_requested', 'plan_memory', 'plan_training', 'plan_table',
           'choose_plan', 'apply_plan', 'outer_options', 'apply_options', 'run_with_options',
           'reference_candidates', 'PLAN_FILE']

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
    run: object = field(default=None, repr=False)  # the training run to train
    configured: dict = None  # the options as configured, before the outer search

    def to_json(self):
        keys = ('budget_bytes', 'predicted_peak_bytes', 'measured_peak_bytes', 'plan',
                'segments', 'fp16', 'cumulative_iters', 'samples_per_gpu',
                'predicted_step_time', 'measured_step_time', 'margin', 'replans')
        out = {k: getattr(self, k) for k in keys}
        if self.configured is not None:
            out['configured'] = dict(self.configured)
        out['plan'] = dict(self.plan)
        return out

    @classmethod
    def from_json(cls, d):
        return cls(**{k: d[k] for k in cls.__dataclass_fields__
                      if k in d and k not in ('table', 'run')})


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


def outer_options(cfg, cuda):
    """The settings the outer search tries, in order, when no checkpoint plan fits:
    ``{'fp16', 'cumulative_iters', 'samples_per_gpu'}`` with ``samples_per_gpu`` divided by
    2, 4, ... (while it divides) and ``cumulative_iters`` multiplied by as much (mmcv
    semantics: the lr is unchanged, one optimizer update per ``cumulative_iters``
    iterations); on CUDA each with ``fp16`` first (autocast halves the activations), on CPU
    without (float16 autocast on a CPU is many times slower than float32)."""
    base = dict(fp16=cfg.get('fp16') is not None, cumulative_iters=_accumulation(cfg),
                samples_per_gpu=_samples_per_gpu(cfg))
    out, k = [], 1
    while k <= base['samples_per_gpu'] and base['samples_per_gpu'] % k == 0:
        for fp16 in ([True, False] if cuda and not base['fp16'] else [base['fp16']]):
            options = dict(fp16=fp16, cumulative_iters=base['cumulative_iters'] * k,
                           samples_per_gpu=base['samples_per_gpu'] // k)
            if options != base:
                out.append(options)
        k *= 2
    return out


def _samples_per_gpu(cfg):
    return int(cfg.data.get('train_dataloader', {}).get('samples_per_gpu',
                                                         cfg.data.samples_per_gpu))


def apply_options(cfg, options):
    """Set ``fp16``, ``cumulative_iters`` and ``samples_per_gpu`` in ``cfg`` (in place)."""
    if options['fp16'] and cfg.get('fp16') is None:
        cfg.fp16 = dict(loss_scale='dynamic')
    elif not options['fp16']:
        cfg.fp16 = None
    if options['cumulative_iters'] != _accumulation(cfg):
        opt = cfg.get('optimizer_config')
        if opt is not None and not isinstance(opt, dict):
            raise TypeError(f'cumulative_iters={options["cumulative_iters"]} needs '
                            f'optimizer_config as a dict, got {opt!r}')
        cfg.optimizer_config = dict(opt or {}, cumulative_iters=options['cumulative_iters'])
    cfg.data.samples_per_gpu = options['samples_per_gpu']
    if 'samples_per_gpu' in cfg.data.get('train_dataloader', {}):
        cfg.data.train_dataloader.samples_per_gpu = options['samples_per_gpu']
    return cfg


def _options_of(cfg):
    return dict(fp16=cfg.get('fp16') is not None, cumulative_iters=_accumulation(cfg),
                samples_per_gpu=_samples_per_gpu(cfg))


def run_with_options(run, cfg, options):
    """``(run, cfg)`` training ``run``'s model and data with ``options`` (a copy of ``cfg``;
    the lr stays as it is, ``auto_scale_lr`` is not applied again)."""
    if options == _options_of(cfg):
        return run, cfg
    from ..apis.train import build_training
    cfg = apply_options(copy.deepcopy(cfg), options)
    cfg.auto_scale_lr = None
    runner = run.runner
    module = getattr(runner.model, 'module', runner.model)
    new = build_training(cfg, model=module, datasets=[dl.dataset for dl in run.data_loaders],
                         distributed=run.distributed, validate=run.validate,
                         timestamp=runner.timestamp, meta=runner.meta, logger=runner.logger)
    return new, cfg


def choose_plan(table, budget, segments=True):
    """The solver's fastest predicted plan under ``budget``, in the planner's order of
    preference: plain autograd, ``'full'`` and ``'selective'`` units first; segments only where
    no per-unit plan fits; ``'offload'`` (CUDA) only where nothing else does. A segment
    recomputes all its units before their backward, which then runs on tensors no longer in
    cache: measured 2-5 % of a ResNet-50 step slower than the same units checkpointed one by
    one (docs/benchmarks.md), a cost the time model does not see; ``'offload'`` moves every
    saved tensor over the host link. The peak chosen never rises as the budget falls: a later
    stage is tried only below every earlier stage's smallest peak."""
    cheap = tuple(m for m in MODES if m != 'offload')
    stages = [cheap] + ([None] if any('offload' in u.kept for u in table.units) else [])
    error = None
    for modes in stages:
        for with_segments in ((False, True) if segments else (False, )):
            try:
                return solve(table, budget, modes=modes, segments=with_segments)
            except InfeasibleBudget as exc:
                error = exc
    raise error


def _plan_checkpoints(run, cfg, budget, max_replans, logger, segments):
    """Probe, solve, validate for one setting of the options: a :class:`PlanResult`."""
    from ..runner.hooks.optimizer import OptimizerHook
    from ..runner.utils import get_model_device
    hook = next(h for h in run.runner.hooks if isinstance(h, OptimizerHook))
    # the steps below run the module without its DDP wrapper: on CPU the exact tracker does
    # not see the reducer's buckets, so they are added (CUDA's allocator counts them anyway)
    buckets = ddp_bucket_bytes(run.runner.model)
    with _restored(run) as model:
        hook.before_run(run.runner)
        batch = probe_batch(run, worst_case_shape(cfg))
        table = _from_rank0(probe(run, batch, modes=probe_modes(run)).to_dict())
        table = CostTable.from_dict(table)
        unseen = 0 if get_model_device(model).type == 'cuda' else buckets
        if unseen:
            table.add_resident('ddp_buckets', unseen)
        elif buckets:
            table.fixed['ddp_buckets'] = buckets
        margin, replans = 0.0, 0
        while True:
            solution = choose_plan(table, int(budget * (1 - margin)), segments)
            apply_plan(model, table, solution.plan)
            measured, seconds = _from_rank0(measure_step(run, batch))
            measured += unseen
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
    options = _options_of(cfg)
    return PlanResult(budget, solution.peak, measured, plan, plan_segments(table, solution.plan),
                      options['fp16'], options['cumulative_iters'], options['samples_per_gpu'],
                      solution.time, seconds, margin, replans, table)


def _fp16_flags(model):
    return [(m, m.__dict__.get('fp16_enabled'), m.__dict__.get('fp16_dtype'))
            for m in model.modules() if 'fp16_enabled' in m.__dict__]


def plan_memory(run, cfg, budget, max_replans=2, logger=None, segments=True):
    """Probe, solve for ``budget`` bytes, validate with one measured step (re-planning with a
    margin raised by the observed error, at most ``max_replans`` times). When no checkpoint
    plan fits, the outer search (:func:`outer_options`) re-probes with fp16 (CUDA) and with
    ``samples_per_gpu`` divided under gradient accumulation, and takes the first that fits.
    Applies the plan to the model and returns a :class:`PlanResult` whose ``run`` is the
    training run to train (``run`` itself, or one rebuilt with the options); raises
    :class:`~ckptzoo.memory.solver.InfeasibleBudget` with the smallest budget that fits and
    what reaches it when nothing does.

    ``segments``: allow segments over the model's chains (``checkpoint_chains()``); False
    keeps to one checkpoint per unit."""
    from ..runner.utils import get_model_device
    cuda = get_model_device(run.runner.model).type == 'cuda'
    module = getattr(run.runner.model, 'module', run.runner.model)
    flags = _fp16_flags(module)
    tried = []
    notes = [] if cuda else ['fp16 is not available on a CPU (float16 autocast there is far '
                             'slower than float32, and it is not searched)']
    for options in [None] + outer_options(cfg, cuda):
        trial, trial_cfg = (run, cfg) if options is None else run_with_options(run, cfg, options)
        try:
            result = _plan_checkpoints(trial, trial_cfg, budget, max_replans, logger, segments)
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
            tried.append((exc.minimum.peak, len(tried), exc.minimum, _options_of(trial_cfg)))
            if logger is not None:
                logger.info(f'memory plan: nothing fits with {_options_of(trial_cfg)} '
                            f'(smallest predicted peak {format_bytes(exc.minimum.peak)})')
            continue
        result.run = trial
        result.configured = _options_of(cfg)
        if options is not None and logger is not None:
            logger.warning(f'memory plan: no checkpoint plan fits {format_bytes(budget)} as '
                           f'configured; training with {options} (the lr as configured; '
                           'max_iters of an IterBasedRunner counts iterations of the smaller '
                           'batch)')
        return result
    _, _, minimum, options = min(tried, key=lambda t: t[:2])
    raise InfeasibleBudget(budget, minimum, options=options if len(tried) > 1 else None,
                           notes=notes)


def _batch_too_small(exc):
    """torch refusing a batch too small for BatchNorm / InstanceNorm in training."""
    return str(exc).startswith(('Expected more than 1 value per channel when training',
                                'Expected more than 1 spatial element when training'))


def _fixed_text(table):
    """The plan-independent bytes by kind, as the reports print them."""
    return ', '.join(f'{k} {format_bytes(v)}' for k, v in table.fixed.items())


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
        fixed = _fixed_text(table)
    else:
        rows = [(name, str(mode), '') for name, mode in result.plan.items()]
        rows += [(f'{a}..{b}', 'segment', '') for a, b in result.segments or []]
        step, fixed = 'n/a', ''
    width = max([24] + [len(r[0]) for r in rows])
    lines = [f'{"unit":<{width}} {"mode":<10} {"kept MiB":>9} {"recompute ms":>13}']
    lines += [f'{name:<{width}} {mode:<10} {cells}'.rstrip() for name, mode, cells in rows]
    lines.append(f'budget {format_bytes(result.budget_bytes)}, predicted peak '
                 f'{format_bytes(result.predicted_peak_bytes)}, measured peak '
                 f'{format_bytes(result.measured_peak_bytes)}, predicted step {step}; '
                 f'fp16={result.fp16}, cumulative_iters={result.cumulative_iters}, '
                 f'samples_per_gpu={result.samples_per_gpu}')
    if fixed:
        lines.append(f'fixed: {fixed}')
    return '\n'.join(lines)


def plan_training(run, cfg, logger=None, resume=False):
    """Plan a training run before it starts, when the config asks for it (see
    :func:`planning_requested`). Under DDP every rank runs the probe steps in step, and rank
    0's measurements and plan are broadcast, so every rank trains the same plan; the plan is
    saved to ``work_dir/memory_plan.json`` and a resume reuses it, unless the budget or the
    options as configured (``samples_per_gpu``, ``cumulative_iters``, ``fp16``) changed: then
    it says so and plans again; a file that is no plan is refused
    (:mod:`.plan_file`). When the plan needs fp16,
    gradient accumulation or a smaller ``samples_per_gpu``, they are set in ``cfg`` and
    ``result.run`` is the training run rebuilt with them: train that one."""
    budget = planning_requested(cfg)
    if budget is None:
        return None
    from ..runner.dist_utils import get_dist_info
    rank, world = get_dist_info()
    path = osp.join(cfg.work_dir, PLAN_FILE)
    result = None
    if resume and osp.exists(path):
        saved = read_plan_file(path)
        changes = plan_changes(saved, budget, _options_of(cfg))
        if changes:
            (logger.warning if logger is not None else warnings.warn)(
                f'memory plan: {path} was made for ' + ', '.join(
                f'{name}={old}' for name, old, _ in changes) + '; the config now gives ' +
                ', '.join(f'{name}={new}' for name, _, new in changes) + ': planning again '
                '(the resumed run trains with the new plan)')
        else:
            result = PlanResult.from_json(saved)
            if logger is not None:
                logger.info(f'memory plan: reusing {path}')
    if result is None:  # every rank steps in the probe; all solve rank 0's table (_from_rank0)
        result = plan_memory(run, cfg, budget, logger=logger)
    if world > 1:
        shared = PlanResult.from_json(_from_rank0(result.to_json()))
        if rank != 0:  # rank 0's keeps its cost table
            shared.run = result.run
            result = shared
    options = dict(fp16=result.fp16, cumulative_iters=result.cumulative_iters,
                   samples_per_gpu=result.samples_per_gpu)
    if result.run is None:  # reused from the file: rebuild with its options
        result.run, _ = run_with_options(run, cfg, options)
    apply_options(cfg, options)
    module = getattr(result.run.runner.model, 'module', result.run.runner.model)
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
    lines.append(f'fixed: {_fixed_text(table)}; plain step {table.step_time * 1e3:.0f} ms')
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


def reference_candidates(table, plans, budgets, per_budget=2):
    """The keys of ``plans`` (``{key: plan}``) worth timing against the planner: at each
    budget, the ``per_budget`` fastest by predicted time among those whose predicted peak fits.
    Measuring these, not all of ``plans`` at every budget, finds the fastest that fits as
    long as the predicted times rank the plans within ``per_budget``."""
    from .peak import predict_peak
    predicted = {key: (predict_time(table, plan), predict_peak(table, plan))
                 for key, plan in plans.items()}
    chosen = []
    for budget in budgets:
        fits = sorted((t, key) for key, (t, peak) in predicted.items() if peak <= budget)
        for _, key in fits[:per_budget]:
            if key not in chosen:
                chosen.append(key)
    return chosen
