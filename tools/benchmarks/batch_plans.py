"""Plans that follow the batch, measured on every step of an epoch of mixed-shape data.

    python tools/benchmarks/batch_plans.py [--variants fixed range] [--budgets 5] [--rounds 1]

Data shaped like users': a generated COCO-format set of 16 images in landscape, portrait, wide
and square sizes with 1-8 boxes each and one crowded image of 150 boxes. Model: mmdet 2.x's
``configs/coco/retinanet_r50_fpn_1x_coco.py`` at reduced scale (``img_scale=(512, 320)``,
``'fixed'``; or ``multiscale_mode='range'`` over short sides 256-320, ``'range'``), batch 2,
SGD, ``GroupSampler`` as in training. The epoch's batches are drawn once from the run's own
loader and replayed for every variant.

Per variant: the exact peak of live tensor storage (``LiveTensorTracker``) of a plain and of an
all-``'full'`` step on every batch; 5 budgets evenly spaced strictly between the all-``'full'``
and the plain peak of the largest batch. Per budget: the planner (``plan_checkpoints``: probe,
buckets, solve, validation) timed against plain steps; every batch's step measured with the
plan of its bucket (must be <= the budget); each bucket's predicted peak against a step on a
batch padded to exactly the bucket's shape with the worst-case box count; and the epoch's time
with the per-batch plans, with one plan for the largest real batch (the same cost model, solved
at that batch's shape and box count) and plain, taken step by step in turn (ABCABC...) from
the same weights, summed over the epoch.
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
#: (height, width) of the generated images, used in turn: both orientations, wide, square
class _Steps:
    """Steps of the run from one saved start (weights, optimizer state), so that every
    variant computes the same step on the same batch."""

    def __init__(self, run):
        import copy

        from ckptzoo.utils.model_wrapper import unwrap_model
        self.run, self.model = run, unwrap_model(run.runner.model)
        self.state = copy.deepcopy(self.model.state_dict())
        self.opt = copy.deepcopy(run.runner.optimizer.state_dict())

    def set(self, modes, segments=()):
        self.model.load_state_dict(self.state)
        self.run.runner.optimizer.load_state_dict(self.opt)
        self.model.replace_checkpoint_plan(modes, segments)

    def peak(self, batch, modes, segments=()):
        from ckptzoo.memory.measure.step_peak import measure_step
        self.set(modes, segments)
        return measure_step(self.run, batch)[0]

    def seconds(self, batch, modes, segments=()):
        from ckptzoo.memory.measure.step import train_step
        self.set(modes, segments)
        t0 = time.perf_counter()
        train_step(self.run, batch)
        return time.perf_counter() - t0


def bench(variant, args, out):
    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.apis.plan import ProbeSession, plan_checkpoints
    from ckptzoo.memory.model.buckets import bucket_for, solve_buckets
    from ckptzoo.memory.plan_hook import batch_boxes, batch_shape
    from ckptzoo.memory.model.shape_model import ShapeCostModel
    from ckptzoo.memory.measure.step import probe_batch, train_step
    from ckptzoo.runner.utils import get_model_device, move_to_device

    cfg = synthetic.mixed_coco_config(variant)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('ckptzoo.bench_batch_plans'))
    device = get_model_device(run.runner.model)
    batches = [move_to_device(b, device) for b in run.data_loaders[0]]
    with ProbeSession(run):
        train_step(run, batches[0])  # the optimizer state exists as in every later step
        steps = _Steps(run)
        plain = {'*': None}
        full = {'*': 'full'}
        peaks = [(steps.peak(b, plain), steps.peak(b, full)) for b in batches]
        largest = max(range(len(batches)), key=lambda i: peaks[i][0])
        high, low = peaks[largest]
        budgets = [low + (high - low) * k // (args.budgets + 1)
                   for k in range(1, args.budgets + 1)]
        step = statistics.median(steps.seconds(batches[largest], plain) for _ in range(3))
        shapes = sorted({batch_shape(b) for b in batches}, key=lambda s: s[0] * s[1])
        out += [f'### {variant}: {len(batches)} batches of 2, shapes ' +
                ', '.join(f'{h}x{w}' for h, w in shapes) +
                f'; boxes per image up to {max(batch_boxes(b) for b in batches)}', '',
                f'plain peaks {min(p for p, _ in peaks) / MIB:.1f}-{high / MIB:.1f} MiB, '
                f'all-full {min(f for _, f in peaks) / MIB:.1f}-'
                f'{max(f for _, f in peaks) / MIB:.1f} MiB; largest batch '
                f'{batch_shape(batches[largest])[0]}x{batch_shape(batches[largest])[1]}: plain '
                f'{high / MIB:.1f}, all-full {low / MIB:.1f} MiB; its plain step '
                f'{step * 1e3:.0f} ms (median of 3)', '',
                '| budget (MiB) | buckets | plan + solve (steps) | epoch max measured (MiB) | '
                'all steps fit | pred − meas per bucket (at its shape) | epoch time: '
                'per-batch / plain | one plan for the largest / plain | per-batch / one plan '
                '| all-full / plain (first budget\'s epoch) |',
                '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
        full_ratio = None  # all-'full' / plain: timed with the first budget's steps
        for budget in budgets:
            t0 = time.perf_counter()
            result = plan_checkpoints(run, cfg, budget)
            t_plan = time.perf_counter() - t0
            buckets = result.buckets
            model = ShapeCostModel.from_dict(result.cost_model)
            big = batches[largest]
            single = solve_buckets(model, [batch_shape(big)],
                                   int(budget * (1 - result.margin)))[0]
            measured = []
            for b in batches:
                bucket = bucket_for(buckets, batch_shape(b))
                if bucket is None:
                    raise RuntimeError(f'no bucket dominates the batch shape {batch_shape(b)}')
                measured.append(steps.peak(b, bucket.plan, bucket.segments))
            errors = []
            for bucket in buckets:
                batch = probe_batch(run, bucket.shape, result.boxes_per_image)
                meas = steps.peak(batch, bucket.plan, bucket.segments)
                errors.append(f'{bucket.shape[0]}x{bucket.shape[1]}: '
                              f'{(bucket.predicted_peak_bytes - meas) / meas:+.2%}')
            times = {'per-batch': 0.0, 'single': 0.0, 'plain': 0.0, 'full': 0.0}
            for r in range(args.rounds):
                for i, b in enumerate(batches):
                    bucket = bucket_for(buckets, batch_shape(b))
                    variants = [('per-batch', bucket.plan, bucket.segments),
                                ('single', single.plan, single.segments),
                                ('plain', plain, ())] + ([('full', full, ())] if full_ratio
                                                         is None else [])
                    k = (i + r) % len(variants)
                    for name, modes, segments in variants[k:] + variants[:k]:
                        times[name] += steps.seconds(b, modes, segments)
            if full_ratio is None:
                full_ratio = times['full'] / times['plain']
            out.append(
                f'| {budget / MIB:.1f} | {len(buckets)} | {t_plan / step:.1f} | '
                f'{max(measured) / MIB:.1f} | '
                f'{"yes" if max(measured) <= budget else "NO"} | {"; ".join(errors)} | '
                f'{times["per-batch"] / times["plain"]:.3f} | '
                f'{times["single"] / times["plain"]:.3f} | '
                f'{times["per-batch"] / times["single"]:.3f} | '
                f'{full_ratio:.3f} |')
            print(out[-1], file=sys.stderr, flush=True)
    out.append('')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--variants', nargs='+', default=['fixed', 'range'],
                        choices=['fixed', 'range'])
    parser.add_argument('--budgets', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=1,
                        help='timed passes over the epoch (steps interleaved ABCD...)')
    args = parser.parse_args(argv)
    if args.budgets < 1 or args.rounds < 1:
        parser.error('--budgets and --rounds must be >= 1')
    import torch
    device = 'CUDA ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'
    out = [f'command: `python tools/benchmarks/batch_plans.py {" ".join(argv or sys.argv[1:])}`'
           f'; device: {device}', '']
    for variant in args.variants:
        bench(variant, args, out)
    print('\n'.join(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
