"""The memory planner against budgets, measured: one table per model.

    python tools/benchmarks/planner.py [--models resnet50 retinanet] [--budgets 10]
                                      [--rounds 3] [--per-budget 2] [--cumulative-iters 1 2 4]

For each model (ResNet-50 classifier, batch 8, 224 px, generated images; RetinaNet R50-FPN
``configs/voc/retinanet_r50_fpn_1x_voc0712.py``, batch 2, generated VOC data resized to
320x320; Mask R-CNN R50-FPN ``configs/coco/mask_rcnn_r50_fpn_1x_coco.py``, batch 2, generated
COCO data with polygon masks at 512x320, the RoI samplers at their largest counts as the
planner probes them; ``cascade_mask_rcnn``: Cascade Mask R-CNN R50-FPN
``configs/coco/cascade_mask_rcnn_r50_fpn_1x_coco.py`` likewise, on request; ``fcos`` / ``atss``:
mmdet's FCOS R50 (caffe, GN head) / ATSS R50 COCO configs likewise, on request; ``yolox_s``:
mmdet's YOLOX-S at 320x320, random sizes 256-384, measured at the largest, on request): the plans a user sets by hand (plain, the backbone's ``with_cp``, every
unit ``'full'``) predicted and measured, then one probe, then ``--budgets`` budgets evenly spaced between the predicted peak with
every unit ``'full'`` and the plain peak. At each budget the solver's plan is applied and its
peak measured: the exact peak of live tensor storage of one step (``LiveTensorTracker``; CUDA:
``max_memory_allocated``). The reference is the fastest combination of per-stage ``with_cp``
flags that fits: all 16 are searched on the probe's predictions, the ``--per-budget``
fastest-predicted that fit each budget are measured (peak, and time). The times of the
planner's plans and of these candidates are taken step by step in turn (ABCABC...) in this
one process, ``--rounds`` times, and compared as medians (``ckptzoo.memory.measure.timing``). The
training run is built by ``ckptzoo.apis.build_training``. ``--cumulative-iters``: one table
per model and value of gradient accumulation (the batch as above): every probed and measured
step is then a window's last iteration, the gradients of the ones before it held from its
start, as the run's largest step.
"""
import argparse
import logging
import os.path as osp
import statistics
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.benchmarks import synthetic  # noqa: E402

MIB = 2 ** 20


def _build(cfg):
    from ckptzoo.apis import build_training, set_random_seed
    set_random_seed(0)
    synthetic.step_only(cfg, 'ckptzoo_bench_plan_', dict(type='IterBasedRunner', max_iters=1))
    return build_training(cfg, logger=logging.getLogger('ckptzoo.bench_plan'))


def _plan(table, plan):
    """A plan (groups over ``table``) as the model takes it: (unit modes, segments)."""
    from ckptzoo.memory import plan_modes, plan_segments
    return plan_modes(table, plan), plan_segments(table, plan)


def _key(plan):
    modes, segments = plan
    return tuple(sorted(modes.items(), key=str)), tuple(map(tuple, segments))


def bench(name, args, out, cumulative_iters=1, title=None):
    """The table of model ``name``, appended to ``out``: the run is assembled as
    ``tools/train.py`` does and measured in the planner's own probe session
    (``ckptzoo.apis.plan.ProbeSession``: its probe, its modes, the run's state restored)."""
    from ckptzoo.apis.plan import ProbeSession
    cfg = synthetic.planner_config(name)
    if cumulative_iters > 1:
        cfg.optimizer_config = dict(cfg.get('optimizer_config') or {},
                                    cumulative_iters=cumulative_iters)
    run = _build(cfg)
    with ProbeSession(run) as session:
        _bench(title or name, args, out, cfg, run, session)


def _bench(name, args, out, cfg, run, session):
    import torch
    from ckptzoo.memory import (choose_plan, kept_bytes, most_frugal, plan_modes, plan_segments,
                                predict_peak, predict_time, uniform_plan)
    from ckptzoo.memory.model.baselines import baseline_plans, reference_candidates
    from ckptzoo.memory.measure.step import probe_batch, train_step, worst_case_shape
    from ckptzoo.memory.measure.timing import (interleaved_step_times, measured_peaks, median_ratio,
                                       paired_step_times)
    shape = worst_case_shape(cfg)
    model = run.runner.model
    if hasattr(model, 'train_shapes'):  # YOLOX trains at the largest size it draws
        sizes = [s for s, _ in model.train_shapes(shape)]
        shape = (max(h for h, _ in sizes), max(w for _, w in sizes))
    batch = probe_batch(run, shape)
    train_step(run, batch)  # warm-up: optimizer state exists as in every later step
    plain = {'plain': {'*': None}}
    steps = interleaved_step_times(run, batch, plain, rounds=2)['plain']
    t0 = time.perf_counter()
    table = session.cost_table(batch)
    t_probe = time.perf_counter() - t0
    # plain steps right before and after the probe: a load that drifts moves both
    step = statistics.median(steps + interleaved_step_times(run, batch, plain, 2)['plain'])
    full = uniform_plan(table, 'full')
    low, high = predict_peak(table, full), predict_peak(table, uniform_plan(table, None))
    budgets = [high - (high - low) * k // (args.budgets - 1) for k in range(args.budgets)]
    t0 = time.perf_counter()
    choose_plan(table, (low + high) // 2)
    t_solve = time.perf_counter() - t0
    sols = [choose_plan(table, budget) for budget in budgets]
    # the planner's distinct plans, and per budget the per-stage combinations that can be
    # the fastest fitting one; peaks measured for all, each planner plan timed right next to
    # each of its budget's candidates (ABAB...), as the median of the per-round ratios
    planned = {}
    for sol in sols:
        planned.setdefault(_key(_plan(table, sol.plan)), f'plan {len(planned)}')
    plans = {key: _plan(table, sol.plan) for sol in sols
             for key in [planned[_key(_plan(table, sol.plan))]]}
    stages = {k: v for k, v in baseline_plans(table).items() if k.startswith('stages')}
    per_budget = [reference_candidates(table, stages, [b], args.per_budget) for b in budgets]
    candidates = sorted({k for ks in per_budget for k in ks})
    plans.update({key: _plan(table, stages[key]) for key in candidates})
    frugal = most_frugal(table)
    chen = baseline_plans(table).get('Chen sqrt(n)')
    plans.update({'most frugal': _plan(table, frugal.plan)})
    if chen:
        plans['Chen sqrt(n)'] = _plan(table, chen)
    peaks = measured_peaks(run, batch, plans)
    sols, replans = _validated(run, batch, table, budgets, sols, planned, plans, peaks)
    pairs = {}
    for sol, keys in zip(sols, per_budget):
        mine = planned[_key(_plan(table, sol.plan))]
        for ref in keys:
            if _key(plans[ref]) != _key(plans[mine]):
                pairs.setdefault((mine, ref), (plans[mine], plans[ref]))
    timed = {}
    if args.rounds and pairs:
        timed = dict(zip(pairs, paired_step_times(run, batch, list(pairs.values()),
                                                  args.rounds)))
    print(f'{name}: {len(planned)} planner plans, per-stage candidates {candidates}, '
          f'{len(pairs)} pairs', file=sys.stderr, flush=True)
    rows = []
    for budget, sol, keys, again in zip(budgets, sols, per_budget, replans):
        modes = plan_modes(table, sol.plan)
        mine = planned[_key(_plan(table, sol.plan))]
        counts = {m: sum(1 for v in modes.values() if v == m) for m in set(modes.values())}
        counts = dict(counts, **{'segments': len(plan_segments(table, sol.plan))})
        if again:
            counts['re-planned'] = f'{again}×'
        fit_pred = [(predict_time(table, stages[k]), k) for k in stages
                    if predict_peak(table, stages[k]) <= budget]
        refs = []  # (planner / reference, reference, planner seconds, reference seconds)
        for ref in keys:
            if peaks[ref] > budget:
                continue
            if _key(plans[ref]) == _key(plans[mine]):
                refs.append((1.0, ref, None, None))
            elif (mine, ref) in timed:
                t = timed[(mine, ref)]
                refs.append((median_ratio(t), ref, statistics.median(a for a, _ in t),
                             statistics.median(b for _, b in t)))
        rows.append((budget, sol, peaks[mine], counts,
                     min(fit_pred) if fit_pred else None, max(refs) if refs else None))
    named = _named_plans(table)
    named_peaks = measured_peaks(run, batch, {k: _plan(table, v) for k, v in named.items()})
    kept_plain = sum(u.kept[None] for u in table.units)
    evaluation = _eval_peak(run, batch)
    device = 'CUDA ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'
    out += [f'### {name}', '',
            f'device: {device}; plain step (median of 2 before and 2 after the probe) {step * 1e3:.0f} ms; probe '
            f'{t_probe:.1f} s ({t_probe / step:.1f} steps), solve {t_solve * 1e3:.0f} ms; '
            f'bytes kept by the units: plain {kept_plain / MIB:.1f} MiB, most frugal plan '
            f'(fewest bytes kept within 1% of the smallest predicted peak) '
            f'{kept_bytes(table, frugal.plan) / MIB:.1f} MiB '
            f'({kept_bytes(table, frugal.plan) / kept_plain:.2f}×, '
            f'{len(plan_segments(table, frugal.plan))} segments; peak predicted '
            f'{frugal.peak / MIB:.1f}, measured {peaks["most frugal"] / MIB:.1f} MiB)' + (
                f'; Chen sqrt(n) ({len(plan_segments(table, chen))} segments): predicted '
                f'{predict_peak(table, chen) / MIB:.1f} MiB, measured '
                f'{peaks["Chen sqrt(n)"] / MIB:.1f} MiB' if chen else '') + '; '
            + (f'evaluation of the batch (simple_test, rescale=True, no gradients): peak '
               f'{evaluation / MIB:.1f} MiB, against the plain training step\'s '
               f'{named_peaks["plain"] / MIB:.1f} MiB; ' if evaluation is not None else '') +
            f'{len(pairs)} pairs (planner '
            f'plan, per-stage flags {", ".join(k[7:] for k in candidates)}) timed step by '
            f'step, {args.rounds} rounds', '',
            '| plan set by hand | predicted (MiB) | measured (MiB) | pred − meas |',
            '| --- | --- | --- | --- |'] + [
                f'| {k} | {predict_peak(table, v) / MIB:.1f} | {named_peaks[k] / MIB:.1f} | '
                f'{(predict_peak(table, v) - named_peaks[k]) / named_peaks[k]:+.2%} |'
                for k, v in named.items()] + [
            '',
            '| budget (MiB) | predicted (MiB) | measured (MiB) | fits | pred − meas | '
            'plan (units per mode) | ms / step predicted | ms / step measured (median) | '
            'best per-stage flags fitting, predicted: ms | best per-stage flags fitting, '
            'measured (median): ms | planner / per-stage (median of paired ratios) |',
            '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    last = None
    for budget, sol, meas, counts, ref_pred, ref in rows:
        mono = '' if last is None or meas <= last else ' (rose)'
        last = meas
        plan = ', '.join(f'{v} {k}' for k, v in sorted(counts.items(), key=str))
        pred_cell = f'{ref_pred[1][7:]}: {ref_pred[0] * 1e3:.0f}' if ref_pred else 'none fits'
        if ref is None:
            sec_cell, meas_cell, ratio = '', 'none fits' if not ref_pred else '', ''
        elif ref[2] is None:
            sec_cell, meas_cell, ratio = 'same plan', f'{ref[1][7:]}: same plan', '1.00'
        else:
            sec_cell = f'{ref[2] * 1e3:.0f}'
            meas_cell = f'{ref[1][7:]}: {ref[3] * 1e3:.0f}'
            ratio = f'{ref[0]:.2f}'
        out.append(f'| {budget / MIB:.1f} | {sol.peak / MIB:.1f} | {meas / MIB:.1f}{mono} | '
                   f'{"yes" if meas <= budget else "NO"} | {(sol.peak - meas) / meas:+.2%} | '
                   f'{plan} | {sol.time * 1e3:.0f} | {sec_cell} | {pred_cell} | {meas_cell} | '
                   f'{ratio} |')
    out.append('')


def _eval_peak(run, batch):
    """The peak of one evaluation forward of ``batch``'s images (``simple_test`` with
    ``rescale=True``: results at the original image size, as ``tools/test.py`` makes them),
    no gradients, the weights counted; None on CUDA (the CPU tracker) or for a model without
    a test mode."""
    import torch
    from ckptzoo.memory.measure.trackers import peak_live_bytes
    model = run.runner.model
    if torch.cuda.is_available() or 'img_metas' not in batch:
        return None
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            peak, _ = peak_live_bytes(model, existing=model, img=[batch['img']],
                                      img_metas=[batch['img_metas']], return_loss=False,
                                      rescale=True)
    finally:
        model.train(was)
    return peak


def _validated(run, batch, table, budgets, sols, planned, plans, peaks, max_replans=2):
    """The planner's validation (``plan_checkpoints``), per budget: while the solver's plan
    measures over the budget, solve again for the budget less a margin raised by the observed
    error, at most ``max_replans`` times. ``(sols, replans)``; new plans join ``planned``,
    ``plans`` and ``peaks``."""
    from ckptzoo.memory import InfeasibleBudget, choose_plan
    from ckptzoo.memory.measure.timing import measured_peaks
    out, counts = [], []
    for budget, sol in zip(budgets, sols):
        name = planned[_key(_plan(table, sol.plan))]
        margin, again = 0.0, 0
        while peaks[name] > budget and again < max_replans:
            margin += max((peaks[name] - sol.peak) / max(sol.peak, 1), 1e-3)
            try:
                sol = choose_plan(table, int(budget * (1 - margin)))
            except InfeasibleBudget:
                break
            again += 1
            name = planned.setdefault(_key(_plan(table, sol.plan)), f'plan {len(planned)}')
            if name not in peaks:
                plans[name] = _plan(table, sol.plan)
                peaks.update(measured_peaks(run, batch, {name: plans[name]}))
        out.append(sol)
        counts.append(again)
    return out, counts


def _named_plans(table):
    """Plain, what ``with_cp=True`` in the backbone gives (its residual stages' units;
    CSPDarknet's: all its units), and every unit ``'full'``."""
    from ckptzoo.memory import plan_from_modes, uniform_plan
    csp = any(n.startswith('backbone.stage') and n[len('backbone.stage'):][:1].isdigit()
              for n in table.names)  # CSPDarknet: with_cp is its stem and every stage module
    backbone = {n: 'full' for n in table.names
                if n.startswith(('backbone.layer', 'backbone.stages.', 'backbone.features.'))
                or csp and n.startswith(('backbone.stem', 'backbone.stage'))}
    return {'plain': uniform_plan(table, None),
            'backbone with_cp=True': plan_from_modes(table, backbone),
            "every unit 'full'": uniform_plan(table, 'full')}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=['resnet50', 'retinanet', 'mask_rcnn'],
                        choices=['resnet50', 'retinanet', 'mask_rcnn', 'cascade_mask_rcnn',
                                 'fcos', 'atss', 'yolox_s', 'deformable_detr', 'mask2former'])
    parser.add_argument('--budgets', type=int, default=10)
    parser.add_argument('--rounds', type=int, default=3,
                        help='interleaved timed steps per plan (medians); 0: peaks only')
    parser.add_argument('--per-budget', type=int, default=2,
                        help='per-stage combinations timed per budget: the fastest predicted')
    parser.add_argument('--cumulative-iters', nargs='+', type=int, default=[1],
                        help='gradient accumulation: one table per value')
    args = parser.parse_args(argv)
    if args.budgets < 2:
        parser.error(f'--budgets must be >= 2, got {args.budgets}')
    if any(k < 1 for k in args.cumulative_iters):
        parser.error(f'--cumulative-iters must be positive ints, got {args.cumulative_iters}')
    out = [f'command: `python tools/benchmarks/planner.py {" ".join(argv or sys.argv[1:])}`', '']
    for name in args.models:
        for k in args.cumulative_iters:
            bench(name, args, out, k, title=f'{name}, cumulative_iters={k}'
                  if args.cumulative_iters != [1] else name)
    print('\n'.join(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
