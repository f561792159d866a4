"""One command for a CUDA GPU: its tests, the memory savers measured at full scale, the planner
held to budgets, written up with the GPU's name.

    python tools/benchmarks/cuda_check.py [--out-dir DIR] [--models retinanet mask_rcnn]
                                          [--img-size W H] [--batch B] [--iters N]
                                          [--warmup N] [--no-tests]

1. **The CUDA-only tests** (``pytest -m cuda``): checkpoint modes exact on the GPU, fp16 /
   bf16 steps, a planned run held to its budget as ``max_memory_allocated`` measures it.
2. **The memory table**: RetinaNet and Mask R-CNN R50-FPN (mmdet 2.x's COCO configs, 80
   classes, no pretrained weights) at exactly ``--img-size`` (1333x800), batch ``--batch``
   (2), on generated COCO data through the config's pipeline, each variant in its own process:
   plain, the backbone's ``with_cp``, every unit ``'full'``, every unit ``'offload'``, fp16
   (``loss_scale=512.``), bf16. Per variant: ``max_memory_allocated`` and
   ``max_memory_reserved`` over ``--iters`` timed steps after ``--warmup``, and the median
   step time (``tools/benchmarks/steps.py``'s job: the real runner and optimizer hook).
3. **The planner at 3 budgets**: a quarter, half and three quarters of the way from the
   predicted every-unit-``'full'`` peak to the plain one, on the planner's worst-case batch
   (the largest batch shape, the most boxes an image has, the RoI samplers at capacity: more
   than the table's steps hold). At each, ``train_model`` (the route
   of ``tools/train.py``) plans and trains one epoch of 8 images in both orientations
   (``keep_ratio`` resize to ``--img-size``: several batch shapes, the planner's buckets);
   every step is measured. Per bucket: predicted, the largest ``max_memory_allocated`` and
   ``max_memory_reserved`` of its steps, and whether they stayed within the budget.

Writes ``cuda_check.json`` (every figure, the GPU's name, torch / CUDA versions) and
``cuda_check.md`` (the tables for docs/benchmarks.md) into ``--out-dir``. Without CUDA it is a
dry run: the same code paths at 160x96 for one step, the parts that need a GPU skipped with
one line each; its figures are not a benchmark.
"""
import argparse
import datetime
import json
import os
import os.path as osp
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.benchmarks import synthetic  # noqa: E402
from tools.benchmarks.jobs import spawn, write_result  # noqa: E402

MIB = 2 ** 20
#: the memory table's rows: (variant of tools/benchmarks/steps.py, label)
ROWS = [('base', 'plain'), ('with_cp', 'backbone with_cp'), ('cp_full', "every unit 'full'"),
        ('cp_offload', "every unit 'offload'"), ('fp16', 'fp16 (loss_scale=512.)'),
        ('bf16', 'bf16')]
#: variants that mean nothing without a GPU (skipped in a dry run)
CUDA_ONLY = {'cp_offload': "'offload' moves saved tensors from GPU to CPU memory",
             'fp16': 'float16 convolutions have no fast CPU kernels'}
#: where the budgets lie between the predicted 'full' and plain peaks
BUDGET_FRACTIONS = (0.25, 0.5, 0.75)
DRY_IMG_SIZE = (160, 96)
TITLES = {'retinanet': 'RetinaNet R50-FPN', 'mask_rcnn': 'Mask R-CNN R50-FPN',
          'mask_rcnn_swin-t': 'Mask R-CNN Swin-T FPN'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out-dir', default='work_dirs/cuda_check')
    parser.add_argument('--models', nargs='+', default=['retinanet', 'mask_rcnn'],
                        choices=list(synthetic.FULL_SCALE))
    parser.add_argument('--img-size', type=int, nargs=2, default=[1333, 800],
                        metavar=('W', 'H'))
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--iters', type=int, default=5, help='timed steps per variant')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps first')
    parser.add_argument('--variants', nargs='+', default=[v for v, _ in ROWS],
                        choices=[v for v, _ in ROWS], help='the memory table\'s rows')
    parser.add_argument('--no-tests', action='store_true', help='skip pytest -m cuda')
    parser.add_argument('--no-plans', action='store_true', help='skip the planner part')
    parser.add_argument('--device', choices=['cpu', 'cuda'], help=argparse.SUPPRESS)
    parser.add_argument('--job', help=argparse.SUPPRESS)      # internal: one job
    parser.add_argument('--result', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ('batch', 'iters'):
        if getattr(args, name) < 1:
            parser.error(f'--{name} must be >= 1, got {getattr(args, name)}')
    if args.warmup < 0 or min(args.img_size) < 32:
        parser.error(f'--warmup must be >= 0 and --img-size >= 32 px, got {args.warmup}, '
                     f'{args.img_size}')
    # what the variants' job (tools/benchmarks/variants.py) reads
    args.seed, args.data_root, args.threads = 0, None, None
    return args


# ------------------------------------------------------------------------------------------
# jobs, each in its own process (the allocator's statistics are the job's own)
# ------------------------------------------------------------------------------------------
def step_job(args, model, variant):
    from tools.benchmarks.steps import VARIANTS
    from tools.benchmarks.variants import run_variant
    cfg = synthetic.full_scale_config(model, args.img_size, fixed=True)
    return run_variant(args, VARIANTS[variant], cfg)


def _plan_cfg(args, model, device):
    cfg = synthetic.full_scale_config(model, args.img_size, fixed=False)
    synthetic.step_only(cfg, 'ckptzoo_cuda_check_plan_',
                        dict(type='EpochBasedRunner', max_epochs=1), args.seed)
    cfg.device = device
    cfg.data.samples_per_gpu = args.batch
    return cfg


def plan_budgets(args, model, device):
    """The budgets: :data:`BUDGET_FRACTIONS` of the way from the predicted peak of every unit
    ``'full'`` to the plain one, on the planner's own worst-case batch (the largest batch
    shape a group of the loader gives, the most boxes an image has, the RoI samplers at
    capacity), probed once."""
    import logging

    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.apis.plan import ProbeSession, batch_shapes
    from ckptzoo.memory import predict_peak, uniform_plan
    from ckptzoo.memory.measure.step import probe_batch
    cfg = _plan_cfg(args, model, device)
    set_random_seed(args.seed)
    run = build_training(cfg, logger=logging.getLogger('ckptzoo.cuda_check'))
    shapes = batch_shapes(run, cfg)
    with ProbeSession(run) as session:
        worst = max((g.worst for g in shapes.groups), key=lambda hw: hw[0] * hw[1])
        table = session.cost_table(probe_batch(run, worst, shapes.max_boxes_per_image or None))
    low, high = predict_peak(table, uniform_plan(table, 'full')), predict_peak(
        table, uniform_plan(table, None))
    return [int(low + (high - low) * f) for f in BUDGET_FRACTIONS], low, high


def plan_job(args, model):
    """``train_model`` under each budget, on batches of several shapes: per bucket the
    prediction and what its steps measured."""
    import logging

    import torch

    from ckptzoo.apis import build_train_datasets, build_train_model, set_random_seed
    from ckptzoo.apis.train import train_model
    from ckptzoo.memory import MemoryPlanHook
    from ckptzoo.memory.plan_file import read_plan_file
    from tools.benchmarks.variants import setup_job
    device = setup_job(args)
    budgets, low, high = plan_budgets(args, model, device)
    out = []
    for budget in budgets:
        cfg = _plan_cfg(args, model, device)
        cfg.memory_budget = budget
        set_random_seed(args.seed)
        if device == 'cuda':
            torch.cuda.empty_cache()
        start = time.perf_counter()
        runner = train_model(build_train_model(cfg), build_train_datasets(cfg), cfg,
                             logger=logging.getLogger('ckptzoo.cuda_check'))
        wall = time.perf_counter() - start
        hook = next(h for h in runner.hooks if isinstance(h, MemoryPlanHook))
        saved = read_plan_file(osp.join(cfg.work_dir, 'memory_plan.json'))
        buckets = []
        for b in hook.buckets:
            steps = [r for r in hook.records if r['bucket'] == b.shape]
            modes = {}
            for mode in b.plan.values():
                modes[str(mode)] = modes.get(str(mode), 0) + 1
            buckets.append(dict(
                shape=list(b.shape), predicted=b.predicted_peak_bytes, steps=len(steps),
                allocated=max((r['peak_bytes'] for r in steps), default=None),
                reserved=max((r['reserved_bytes'] or 0 for r in steps), default=None)
                if device == 'cuda' else None, modes=modes, segments=len(b.segments)))
        out.append(dict(budget=budget, buckets=buckets, over_budget=len(hook.over_budget),
                        fp16=saved.get('fp16'), samples_per_gpu=saved.get('samples_per_gpu'),
                        cumulative_iters=saved.get('cumulative_iters'), seconds=wall,
                        iters=runner.iter))
    return dict(runs=out, predicted_full=low, predicted_plain=high)


def run_job(args):
    kind, model, *rest = args.job.split(':')
    return write_result(args.result, lambda: step_job(args, model, rest[0]) if kind == 'step'
                        else plan_job(args, model))


def run_spawned(job, args):
    """``job`` in a process of its own (:mod:`tools.benchmarks.jobs`), its wall time added."""
    argv = ['--job', job, '--img-size', *map(str, args.img_size), '--batch', str(args.batch),
            '--iters', str(args.iters), '--warmup', str(args.warmup), '--device', args.device]
    start = time.perf_counter()
    result, proc = spawn(osp.abspath(__file__), argv, ROOT)
    result['wall'] = time.perf_counter() - start
    if not result['ok']:
        print(f'  {job}: FAILED: {result["error"]}', flush=True)
        print('\n'.join(proc.stderr.splitlines()[-15:]), file=sys.stderr, flush=True)
    return result


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def header(cuda):
    import torch
    gpu = torch.cuda.get_device_name(0) if cuda else None
    info = dict(date=datetime.date.today().isoformat(), torch=torch.__version__,
                cuda=torch.version.cuda, gpu=gpu, python=sys.version.split()[0],
                total_memory=torch.cuda.get_device_properties(0).total_memory if cuda
                else None)
    return info


def run_tests(cuda, out):
    if not cuda:
        print('CUDA-only tests: skipped (no CUDA GPU; pytest -m cuda skips them too)')
        return dict(skipped='no CUDA GPU')
    start = time.perf_counter()
    # a module whose optional package this machine lacks must not hide the CUDA tests of the
    # others: its collection error is counted in the summary line and kept in the log
    proc = subprocess.run([sys.executable, '-m', 'pytest', '-m', 'cuda', '-q', '-rs',
                           '--continue-on-collection-errors', osp.join(ROOT, 'tests')],
                          capture_output=True, text=True, cwd=ROOT)
    summary = (proc.stdout.strip().splitlines() or ['(no output)'])[-1]
    with open(osp.join(out, 'cuda_tests.log'), 'w', encoding='utf-8') as f:
        f.write(proc.stdout + proc.stderr)
    print(f'CUDA-only tests: {summary} ({time.perf_counter() - start:.0f} s)', flush=True)
    return dict(summary=summary, returncode=proc.returncode)


def main(argv=None):
    args = parse_args(argv)
    if args.job:
        return run_job(args)
    import torch
    cuda = torch.cuda.is_available()
    args.device = 'cuda' if cuda else 'cpu'
    if not cuda:
        print(f'No CUDA GPU: a dry run (the same code paths at {DRY_IMG_SIZE[0]}x'
              f'{DRY_IMG_SIZE[1]}, one step each; its figures are no benchmark)', flush=True)
        args.img_size, args.iters, args.warmup = list(DRY_IMG_SIZE), 1, 0
    os.makedirs(args.out_dir, exist_ok=True)
    results = dict(info=header(cuda), command='python tools/benchmarks/cuda_check.py ' +
                   ' '.join(sys.argv[1:] if argv is None else argv),
                   img_size=args.img_size, batch=args.batch, iters=args.iters,
                   warmup=args.warmup, models={})
    print(f"device: {results['info']['gpu'] or 'CPU'}, torch {results['info']['torch']}, "
          f"CUDA {results['info']['cuda']}", flush=True)
    results['tests'] = dict(skipped='--no-tests') if args.no_tests else run_tests(
        cuda, args.out_dir)
    _write(args.out_dir, results)
    for model in args.models:
        rows = {}
        for variant, label in ROWS:
            if variant not in args.variants:
                continue
            if not cuda and variant in CUDA_ONLY:
                print(f'{model} {label}: skipped without CUDA ({CUDA_ONLY[variant]})')
                continue
            rows[variant] = run_spawned(f'step:{model}:{variant}', args)
            r = rows[variant]
            if r['ok']:
                print(f'{model} {label}: {_mib(r.get("max_allocated") or r["peak_live"])} '
                      f'MiB allocated, {_mib(r.get("max_reserved"))} MiB reserved, '
                      f'{_median(r["times"]) * 1e3:.0f} ms/step ({r["wall"]:.0f} s)',
                      flush=True)
            results['models'][model] = dict(rows=rows)
            _write(args.out_dir, results)
        if args.no_plans:
            continue
        plans = run_spawned(f'plan:{model}', args)
        results['models'][model]['plans'] = plans
        if plans['ok']:
            for run in plans['runs']:
                print(f'{model} budget {_mib(run["budget"])} MiB: ' + '; '.join(
                    f'{b["shape"][1]}x{b["shape"][0]} predicted {_mib(b["predicted"])}, '
                    f'allocated {_mib(b["allocated"])}, reserved {_mib(b["reserved"])}'
                    for b in run['buckets']), flush=True)
        _write(args.out_dir, results)
    print(f'wrote {osp.join(args.out_dir, "cuda_check.json")} and cuda_check.md', flush=True)
    failed = [m for m, r in results['models'].items()
              if not all(x['ok'] for x in r['rows'].values())
              or not (args.no_plans or r.get('plans', {}).get('ok', False))]
    return 1 if failed or results['tests'].get('returncode') else 0


def _mib(n):
    return '-' if n is None else f'{n / MIB:.0f}' if n >= 100 * MIB else f'{n / MIB:.1f}'


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _write(out_dir, results):
    with open(osp.join(out_dir, 'cuda_check.json'), 'w', encoding='utf-8') as f:
        json.dump(results, f, indent=1)
    with open(osp.join(out_dir, 'cuda_check.md'), 'w', encoding='utf-8') as f:
        f.write(render(results))


def render(results):
    """The markdown tables of ``results``."""
    info = results['info']
    w, h = results['img_size']
    where = (f"{info['gpu']} ({info['total_memory'] / 2 ** 30:.0f} GiB), torch {info['torch']}, "
             f"CUDA {info['cuda']}" if info['gpu'] else
             f"no GPU: a dry run, torch {info['torch']} (no benchmark)")
    lines = [f"Measured {info['date']} on {where}: `{results['command']}`", '',
             f"CUDA-only tests: {results['tests'].get('summary') or results['tests'].get('skipped')}",
             '']
    for model, res in results['models'].items():
        rows = res['rows']
        base = rows.get('base', {})
        lines += [f'#### {TITLES[model]}, {w}x{h}, batch {results["batch"]}', '',
                  '| variant | max allocated (MiB) | × plain | max reserved (MiB) | '
                  'ms / step (median) | × plain |', '| --- | --- | --- | --- | --- | --- |']
        for variant, label in ROWS:
            r = rows.get(variant)
            if r is None:
                if not info['gpu']:
                    lines.append(f'| {label} | skipped without CUDA | | | | |')
                continue
            if not r['ok']:
                lines.append(f'| {label} | FAILED: {r["error"]} | | | | |')
                continue
            alloc = r.get('max_allocated') or r.get('peak_live')
            b_alloc = base.get('max_allocated') or base.get('peak_live')
            t, bt = _median(r['times']), _median(base['times']) if base.get('ok') else None
            lines.append(f'| {label} | {_mib(alloc)} | '
                         f'{alloc / b_alloc:.2f} | {_mib(r.get("max_reserved"))} | '
                         f'{t * 1e3:.0f} | {t / bt:.2f} |' if b_alloc and bt else
                         f'| {label} | {_mib(alloc)} | | {_mib(r.get("max_reserved"))} | '
                         f'{t * 1e3:.0f} | |')
        plans = res.get('plans')
        if plans is None:
            lines.append('')
            continue
        lines += ['', f'The planner ({model}, one epoch of 8 images, keep-ratio resize to '
                  f'{w}x{h}: one bucket per batch shape):', '']
        if not plans['ok']:
            lines += [f'FAILED: {plans["error"]}', '']
            continue
        lines += [f"Predicted worst-case peak: plain {_mib(plans['predicted_plain'])} MiB, "
                  f"every unit 'full' {_mib(plans['predicted_full'])} MiB; the budgets lie "
                  f"{', '.join(f'{f:.0%}' for f in BUDGET_FRACTIONS)} of the way between.", '']
        lines += ['| budget (MiB) | options | bucket (W×H) | plan (units per mode) | steps | '
                  'predicted (MiB) | max allocated (MiB) | max reserved (MiB) | '
                  'allocated within budget |', '| --- | --- | --- | --- | --- | --- | --- | '
                  '--- | --- |']
        for run in plans['runs']:
            opts = (f"batch {run['samples_per_gpu']}, fp16 {run['fp16']}, "
                    f"cumulative_iters {run['cumulative_iters']}")
            for b in run['buckets']:
                plan = ', '.join(f'{v} {k}' for k, v in sorted(b['modes'].items()))
                fits = ('-' if b['allocated'] is None else
                        'yes' if b['allocated'] <= run['budget'] else 'NO')
                lines.append(f"| {_mib(run['budget'])} | {opts} | {b['shape'][1]}×"
                             f"{b['shape'][0]} | {plan} | {b['steps']} | "
                             f"{_mib(b['predicted'])} | {_mib(b['allocated'])} | "
                             f"{_mib(b['reserved'])} | {fits} |")
        lines.append('')
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    sys.exit(main())
