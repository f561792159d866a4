"""The memory planner against budgets, measured: one table per model.

    python tools/benchmark_planner.py [--models resnet50 retinanet] [--budgets 10] [--iters 2]

For each model (ResNet-50 classifier, batch 8, 224 px, generated images; RetinaNet R50-FPN
``configs/voc/retinanet_r50_fpn_1x_voc0712.py``, batch 2, generated VOC data resized to
320x320): one probe, then ``--budgets`` budgets evenly spaced between the predicted peak with
every unit ``'full'`` and the plain peak. At each budget the solver's plan is applied and
measured: the exact peak of live tensor storage of one step (``LiveTensorTracker``; CUDA:
``max_memory_allocated``) and the median time of ``--iters`` steps. Every combination of
per-stage ``with_cp`` flags is measured in the same run; the fastest that fits each budget is
the reference (``--iters 0``: times and per-stage peaks predicted, not measured). The
training run is built by ``ckptzoo.apis.build_training``.
"""
import argparse
import logging
import os.path as osp
import statistics
import sys
import tempfile
import time

sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
MIB = 2 ** 20


def _cfg(model):
    from mmengine.config import Config
    if model == 'resnet50':
        cfg = Config.fromfile(osp.join(ROOT, 'configs/classification/resnet50_imagefolder.py'))
        cfg.data.samples_per_gpu = 8
        cfg.data.workers_per_gpu = 0
        cfg.data.train = dict(type='SyntheticClassificationDataset', num_samples=16,
                              num_classes=10, img_size=224, seed=0)
        cfg.model.head.num_classes = 10
        cfg.model.head.topk = (1,)
        return cfg
    from ckptzoo.datasets import generate_voc
    from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
    cfg = Config.fromfile(osp.join(ROOT, 'configs/voc/retinanet_r50_fpn_1x_voc0712.py'))
    cfg.model.backbone.init_cfg = None
    cfg.model.backbone.pop('pretrained', None)
    cfg.model.pop('pretrained', None)
    devkit = generate_voc(osp.join(ROOT, 'data/benchmark_voc'), num_trainval=64, num_test=0,
                          img_size=256, seed=0)
    train = cfg.data.train
    while 'pipeline' not in train:
        train = train.dataset
    pipeline = [dict(t) for t in train.pipeline]
    for t in pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=(320, 320), keep_ratio=False)
            t.pop('ratio_range', None)
    cfg.data.train = dict(type='VOCDataset', classes=SYNTHETIC_CLASSES,
                          ann_file=osp.join(devkit, 'VOC2007/ImageSets/Main/trainval.txt'),
                          img_prefix=osp.join(devkit, 'VOC2007') + '/', pipeline=pipeline)
    cfg.model.bbox_head.num_classes = len(SYNTHETIC_CLASSES)
    cfg.data.samples_per_gpu = 2
    cfg.data.workers_per_gpu = 0
    return cfg


def _build(cfg):
    from ckptzoo.apis import build_training, set_random_seed
    set_random_seed(0)
    cfg.work_dir = tempfile.mkdtemp(prefix='ckptzoo_bench_plan_')
    cfg.checkpoint_config = cfg.log_config = cfg.lr_config = None
    cfg.custom_hooks = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    cfg.seed = 0
    return build_training(cfg, logger=logging.getLogger('ckptzoo.bench_plan'))


def _measure(run, batch, model, table, plan, iters):
    from ckptzoo.memory.planner import apply_plan
    from ckptzoo.memory.probe import measure_step, train_step
    apply_plan(model, table, plan)  # unit modes and segments
    peak, _ = measure_step(run, batch)
    if not iters:
        return peak, None
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        train_step(run, batch)
        times.append(time.perf_counter() - t0)
    return peak, statistics.median(times)


def bench(name, args, out):
    import torch
    from ckptzoo.memory import (kept_bytes, most_frugal, plan_modes, plan_segments,
                                predict_peak, predict_time, solve, uniform_plan)
    from ckptzoo.memory.planner import baseline_plans, probe_modes
    from ckptzoo.memory.probe import probe, probe_batch, train_step, worst_case_shape
    from ckptzoo.runner.hooks.optimizer import OptimizerHook
    cfg = _cfg(name)
    run = _build(cfg)
    model = getattr(run.runner.model, 'module', run.runner.model)
    next(h for h in run.runner.hooks if isinstance(h, OptimizerHook)).before_run(run.runner)
    batch = probe_batch(run, worst_case_shape(cfg))
    train_step(run, batch)  # warm-up: optimizer state exists as in every later step
    plain_times = []
    for _ in range(2):
        t0 = time.perf_counter()
        train_step(run, batch)
        plain_times.append(time.perf_counter() - t0)
    step = statistics.median(plain_times)
    t0 = time.perf_counter()
    table = probe(run, batch, modes=probe_modes(run))
    t_probe = time.perf_counter() - t0
    full = uniform_plan(table, 'full')
    low, high = predict_peak(table, full), predict_peak(table, uniform_plan(table, None))
    t0 = time.perf_counter()
    solve(table, (low + high) // 2)
    t_solve = time.perf_counter() - t0
    stages = {k: v for k, v in baseline_plans(table).items() if k.startswith('stages')}
    refs = {}  # per-stage flags: measured (peak, time), or predicted with --iters 0
    for key, plan in stages.items():
        if args.iters:
            refs[key] = _measure(run, batch, model, table, plan, args.iters)
        else:
            refs[key] = (predict_peak(table, plan), predict_time(table, plan))
        print(f'{name} {key}: {refs[key][0] / MIB:.1f} MiB {refs[key][1] * 1e3:.0f} ms',
              file=sys.stderr, flush=True)
    rows = []
    for k in range(args.budgets):
        budget = high - (high - low) * k // (args.budgets - 1)
        sol = solve(table, budget)
        peak, sec = _measure(run, batch, model, table, sol.plan, args.iters)
        fits = [(t, key) for key, (p, t) in refs.items() if p <= budget]
        ref = min(fits) if fits else None
        modes = plan_modes(table, sol.plan)
        counts = {m: sum(1 for v in modes.values() if v == m) for m in set(modes.values())}
        counts = dict(counts, **{'segments': len(plan_segments(table, sol.plan))})
        rows.append((budget, sol.peak, peak, sol.time, sec if args.iters else sol.time, ref,
                     counts))
        print(f'{name} budget {budget / MIB:.1f}: pred {sol.peak / MIB:.1f} meas '
              f'{peak / MIB:.1f} MiB', file=sys.stderr, flush=True)
    kept_plain = sum(u.kept[None] for u in table.units)
    frugal = most_frugal(table)
    frugal_meas = _measure(run, batch, model, table, frugal.plan, 0)[0]
    chen = baseline_plans(table).get('Chen sqrt(n)')
    chen_meas = _measure(run, batch, model, table, chen, 0)[0] if chen else None
    device = 'CUDA ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'
    what = 'measured' if args.iters else 'predicted'
    out += [f'### {name}', '',
            f'device: {device}; plain step (median of 2) {step * 1e3:.0f} ms; probe '
            f'{t_probe:.1f} s ({t_probe / step:.1f} steps), solve {t_solve * 1e3:.0f} ms; '
            f'bytes kept by the units: plain {kept_plain / MIB:.1f} MiB, most frugal plan '
            f'(fewest bytes kept within 1% of the smallest predicted peak) '
            f'{kept_bytes(table, frugal.plan) / MIB:.1f} MiB '
            f'({kept_bytes(table, frugal.plan) / kept_plain:.2f}×, '
            f'{len(plan_segments(table, frugal.plan))} segments; peak predicted '
            f'{frugal.peak / MIB:.1f}, measured {frugal_meas / MIB:.1f} MiB)' + (
                f'; Chen sqrt(n) ({len(plan_segments(table, chen))} segments): predicted '
                f'{predict_peak(table, chen) / MIB:.1f} MiB, measured {chen_meas / MIB:.1f} MiB'
                if chen else ''), '',
            '| budget (MiB) | predicted (MiB) | measured (MiB) | fits | pred − meas | '
            f'plan (units per mode) | ms / step ({what}) | best per-stage flags fitting '
            f'({what}): ms | planner / per-stage |',
            '| --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    last = None
    for budget, pred, meas, _, sec, ref, counts in rows:
        mono = '' if last is None or meas <= last else ' (rose)'
        last = meas
        plan = ', '.join(f'{v} {k}' for k, v in sorted(counts.items(), key=str))
        ref_cell = f'{ref[1][7:]}: {ref[0] * 1e3:.0f}' if ref else 'none fits'
        ratio = f'{sec / ref[0]:.2f}' if ref else ''
        out.append(f'| {budget / MIB:.1f} | {pred / MIB:.1f} | {meas / MIB:.1f}{mono} | '
                   f'{"yes" if meas <= budget else "NO"} | {(pred - meas) / meas:+.2%} | '
                   f'{plan} | {sec * 1e3:.0f} | {ref_cell} | {ratio} |')
    out.append('')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', nargs='+', default=['resnet50', 'retinanet'],
                        choices=['resnet50', 'retinanet'])
    parser.add_argument('--budgets', type=int, default=10)
    parser.add_argument('--iters', type=int, default=2,
                        help='timed steps per plan; 0: compare predicted times only')
    args = parser.parse_args(argv)
    if args.budgets < 2:
        parser.error(f'--budgets must be >= 2, got {args.budgets}')
    out = [f'command: `python tools/benchmark_planner.py {" ".join(argv or sys.argv[1:])}`', '']
    for name in args.models:
        bench(name, args, out)
    print('\n'.join(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
