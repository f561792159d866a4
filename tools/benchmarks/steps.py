"""Peak memory and time per training step of the memory savers, in one command.

    python tools/benchmarks/steps.py [CONFIG] [--img-size W [H]] [--batch B] [--iters N]
                                     [--warmup W] [--peers] [--peer-plans NAME ...]
                                     [--rounds N] [--device cpu|cuda] [--out-dir DIR]
                                     [--data-root DIR]

Each variant of CONFIG (default: RetinaNet R50-FPN on VOC) runs in its own process: ``base``,
``fp16`` (``fp16 = dict(loss_scale=512.)``), ``accum2`` (``cumulative_iters=2`` at half the
batch, so one optimizer step sees the same images), ``with_cp`` (``backbone.with_cp=True``: the
backbone only), ``cp_fp16_accum2`` (those three), ``cp_full`` and ``cp_selective`` (every
checkpoint unit of the model, backbone, neck and head, in that mode:
``checkpoint_plan = {'*': mode}``), ``cp_full_seg`` (``cp_full`` with the FPN's top-down levels
as one segment, ``checkpoint_segments``) and ``frozen_bn`` (the backbone's BN frozen:
``norm_cfg=dict(type='BN', requires_grad=False)``, ``norm_eval=True``); on request
(``--variants``, as ``tools/benchmarks/cuda_check.py`` asks): ``cp_offload`` (every unit
``'offload'``) and ``bf16`` (``fp16 = dict(dtype='bfloat16')``).
The step is the real one: the model, optimizer and optimizer hook are built from the
modified config by ``ckptzoo.apis.build_training`` (as for ``tools/train.py``) and run by an
``IterBasedRunner`` (``train_step`` + the optimizer hook's ``after_train_iter``); the hooks of
``ckptzoo.memory.StepMeter`` time each iteration and read memory. Data: a generated VOC-format dataset (written once to
``--data-root``) through the config's own training pipeline, its ``Resize`` set to exactly
``--img-size``; no pretrained weights.

Per variant: ``--warmup`` optimizer steps, ``--iters`` timed steps, then one probe step.

* time: the median (min-max) per optimizer step of ``--batch`` images (for accumulation the sum
  of its ``k`` iterations), ``time.perf_counter`` around each iteration (``train_step`` and the
  optimizer hook; not data loading), with ``torch.cuda.synchronize`` on CUDA;
* memory on CUDA: ``max_memory_allocated`` / ``max_memory_reserved`` over the timed steps
  (statistics reset after the warm-up, ``cudnn.benchmark`` off); on CPU: the exact peak of live
  tensor storage during the probe step (``ckptzoo.memory.LiveTensorTracker``: parameters,
  buffers, gradients, optimizer state, the batch and every tensor the step makes);
* saved for backward: the bytes autograd keeps from the forward, parameters left out (they live
  anyway; ``SavedTensorCounter(include_params=False)``, during the probe step, the largest of its
  iterations). Selective checkpointing keeps its tensors outside those hooks, so for it read:
* held at forward end (CPU): the live tensor bytes when the forward pass ends, less those that
  existed before the step (parameters, gradients, optimizer state, batch): what the forward
  keeps for backward, whoever keeps it.

``--peers`` adds, on the same input: torchvision's RetinaNet built as the config (BatchNorm in
eval mode with trained affine parameters from layer2 on, conv1 + layer1 frozen, P6 from C5) and
as torchvision builds it by default (``FrozenBatchNorm2d``, P6 from P5), and ckptzoo's
ResNet-50 / DenseNet-121 / Swin-T plain, ``'full'`` (= ``with_cp``) and ``'selective'`` against
torchvision's (DenseNet's ``memory_efficient``, and its DenseNet wrapped whole in one selective
checkpoint with ckptzoo's policy) and timm's (``set_grad_checkpointing()``; timm is optional:
``pip install .[bench]``). ``--peer-plans`` adds ckptzoo rows for plans per
unit type (:data:`PEER_PLANS`, e.g. ``'full'`` on the blocks only, timm's units). Ratios are
measured in one run, side by side; on a shared machine ``--rounds N`` runs every job ``N``
times round-robin (A B C A B C ...): times then pool all steps of all rounds, and a ratio is the
median of per-step ratios taken within each round, so a slow spell weighs on both sides.

This file is the command line and the job processes; beside it in ``tools/benchmarks/``: the
variants' run (``variants``), the peers (``peers``), the tables and charts (``report``) and the
generated data and configs (``synthetic``).
"""
import argparse
import os
import os.path as osp
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.benchmarks import report  # noqa: E402
from tools.benchmarks.jobs import spawn, write_result  # noqa: E402
from tools.benchmarks.peers import import_timm, run_peer  # noqa: E402
from tools.benchmarks.variants import Variant, run_variant  # noqa: E402

DEFAULT_CONFIG = 'configs/voc/retinanet_r50_fpn_1x_voc0712.py'

#: name -> changes to the config: fp16, cumulative_iters, backbone with_cp, a checkpoint plan
#: for every unit, frozen backbone BN
VARIANTS = {
    'base': Variant(),
    'fp16': Variant(options=dict(fp16=True)),
    'accum2': Variant(options=dict(cumulative_iters=2)),
    'with_cp': Variant(model={'backbone.with_cp': True}),
    'cp_fp16_accum2': Variant(options=dict(fp16=True, cumulative_iters=2),
                              model={'backbone.with_cp': True}),
    'cp_full': Variant(plan=dict(checkpoint_plan={'*': 'full'})),
    'cp_full_seg': Variant(plan=dict(checkpoint_plan={'*': 'full'},
                                     checkpoint_segments=[['neck.level2', 'neck.level0']])),
    'cp_selective': Variant(plan=dict(checkpoint_plan={'*': 'selective'})),
    'cp_offload': Variant(plan=dict(checkpoint_plan={'*': 'offload'})),
    'bf16': Variant(options=dict(fp16=True), fp16=dict(dtype='bfloat16')),
    'frozen_bn': Variant(model={'backbone.norm_cfg.requires_grad': False,
                                'backbone.norm_eval': True}),
}
#: run when --variants is not given (the rest are for a GPU: cuda_check.py)
DEFAULT_VARIANTS = [v for v in VARIANTS if v not in ('cp_offload', 'bf16')]
BACKBONES = ('resnet50', 'densenet121', 'swin_t')
#: peer jobs: (model, implementation, checkpointing: '' plain, 'cp' the implementation's own,
#: 'selective' ckptzoo's selective mode; torchvision's DenseNet also wrapped whole in one
#: selective checkpoint with ckptzoo's policy, the plain way to apply that policy)
PEERS = [('retinanet', 'torchvision', ''), ('retinanet', 'torchvision-default', '')] + [
    (arch, impl, cp) for arch in BACKBONES
    for impl, cps in (('ckptzoo', ('', 'cp', 'selective')),
                      ('torchvision', ('', 'cp', 'selective') if arch == 'densenet121'
                       else ('', )),
                      ('timm', ('', 'cp')))
    for cp in cps]
#: ckptzoo plans per unit type for --peer-plans: name -> (label, {backbone: plan}); a plan
#: starts from every unit plain; "blocks" are ResNet / Swin blocks and DenseNet dense layers.
#: Beside with_cp's ('full' on every unit: also the stem and the DenseNet transitions / Swin
#: patch embedding and merging) and 'selective' on every unit.
PEER_PLANS = {
    'full_blocks': ("'full' on {blocks} only (timm's units)", {
        'resnet50': {'layer*': 'full'}, 'swin_t': {'stages.*.blocks.*': 'full'},
        'densenet121': {'denseblock*': 'full'}}),
    'selective_blocks': ("'selective' on {blocks} only", {
        'resnet50': {'layer*': 'selective'}, 'swin_t': {'stages.*.blocks.*': 'selective'},
        'densenet121': {'denseblock*': 'selective'}}),
    'selective_blocks_full_rest': ("'selective' on {blocks}, 'full' on the rest", {
        arch: {'*': 'full', blocks: 'selective'} for arch, blocks in (
            ('resnet50', 'layer*'), ('swin_t', 'stages.*.blocks.*'),
            ('densenet121', 'denseblock*'))}),
    # the dense layers that hold most (early, large resolution) 'selective', the rest 'full'
    'selective_early_blocks': ("'selective' on dense blocks 1-2, 'full' on 3-4 (dense layers "
                               "only)", {'densenet121': {'denseblock[12].*': 'selective',
                                                         'denseblock[34].*': 'full'}}),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('config', nargs='?', default=DEFAULT_CONFIG,
                        help=f'detector config (default {DEFAULT_CONFIG})')
    parser.add_argument('--img-size', type=int, nargs='+', default=[320],
                        help='training image size: W [H] (Resize to exactly this; default 320)')
    parser.add_argument('--batch', type=int, default=2, help='images per optimizer step')
    parser.add_argument('--iters', type=int, default=5, help='timed optimizer steps')
    parser.add_argument('--warmup', type=int, default=2, help='untimed steps first')
    parser.add_argument('--variants', nargs='+', default=DEFAULT_VARIANTS,
                        choices=list(VARIANTS))
    parser.add_argument('--peers', action='store_true',
                        help='add torchvision / timm on the same workloads')
    parser.add_argument('--peer-only', nargs='+', choices=('retinanet',) + BACKBONES,
                        help='with --peers: only these models')
    parser.add_argument('--peer-plans', nargs='+', default=[], choices=list(PEER_PLANS),
                        help='with --peers: ckptzoo rows for these per-unit-type plans too')
    parser.add_argument('--rounds', type=int, default=1,
                        help='run every job this many times, round-robin (A B C A B C ...); '
                        'times pool all rounds, ratios pair the steps of each round')
    parser.add_argument('--peer-batch', type=int, default=4, help='batch of the backbone peers')
    parser.add_argument('--peer-img-size', type=int, default=224,
                        help='square input of the backbone peers')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default=None,
                        help='default: cuda when available')
    parser.add_argument('--data-root', default='data/benchmark_voc',
                        help='where the generated VOC-format data is cached')
    parser.add_argument('--out-dir', default='work_dirs/benchmark',
                        help='the markdown table and the PNG charts go here')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--threads', type=int, default=None,
                        help='torch.set_num_threads in every job (default: torch\'s choice)')
    parser.add_argument('--job', help=argparse.SUPPRESS)      # internal: one variant / peer
    parser.add_argument('--result', help=argparse.SUPPRESS)   # internal: its JSON result file
    args = parser.parse_args(argv)
    if len(args.img_size) not in (1, 2) or min(args.img_size) < 32:
        parser.error(f'--img-size takes W or W H, each >= 32, got {args.img_size}')
    for name in ('batch', 'iters', 'peer_batch', 'peer_img_size', 'rounds'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    if not osp.exists(args.config) and osp.exists(osp.join(ROOT, args.config)):
        args.config = osp.join(ROOT, args.config)  # the default, from another directory
    if args.warmup < 0:
        parser.error(f'--warmup must be >= 0, got {args.warmup}')
    return args


# ------------------------------------------------------------------------------------------
# a job (in its own process)
# ------------------------------------------------------------------------------------------
def run_job(args):
    """The internal ``--job`` entry: run one variant or peer, write its JSON result."""
    def job():
        if args.threads:
            import torch
            torch.set_num_threads(args.threads)
        if args.job == os.environ.get('CKPTZOO_BENCH_FAIL'):  # tests of the failure path
            raise RuntimeError('injected failure (CKPTZOO_BENCH_FAIL)')
        if args.job.startswith('peer:'):
            arch, impl, cp = args.job.split(':')[1:]
            plan = PEER_PLANS[cp[5:]][1][arch] if cp.startswith('plan=') else None
            return run_peer(args, arch, impl, cp, plan)
        return run_variant(args, VARIANTS[args.job])
    return write_result(args.result, job)


# ------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------
def _child_args(args):
    """The arguments every job process gets (the job itself is added by ``_spawn``)."""
    out = [args.config, '--img-size', *map(str, args.img_size), '--batch', str(args.batch),
           '--iters', str(args.iters), '--warmup', str(args.warmup),
           '--peer-batch', str(args.peer_batch), '--peer-img-size', str(args.peer_img_size),
           '--data-root', args.data_root, '--seed', str(args.seed)]
    out += ['--threads', str(args.threads)] if args.threads else []
    return out + (['--device', args.device] if args.device else [])


def _spawn(job, argv, label, index, total):
    print(f'[{index}/{total}] {label} ...', file=sys.stderr, flush=True)
    start = time.perf_counter()
    result, proc = spawn(osp.abspath(__file__), argv + ['--job', job], ROOT)
    wall = time.perf_counter() - start
    if result['ok']:
        print(f'[{index}/{total}] {label}: {report.ms(result["times"])} ms/step, '
              f'{report.memory_line(result)} ({wall:.0f} s)', file=sys.stderr, flush=True)
    else:
        print(f'[{index}/{total}] {label}: FAILED: {result["error"]}', file=sys.stderr,
              flush=True)
        if os.environ.get('CKPTZOO_BENCH_VERBOSE'):
            print(proc.stderr, file=sys.stderr)
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.job:
        return run_job(args)
    from ckptzoo.apis import resolve_device
    cuda = resolve_device(dict(device=args.device)) == 'cuda'
    child = _child_args(args)
    head = report.header(args, argv, cuda)
    print(head[0], flush=True)

    peers = []
    for p in PEERS if args.peers else ():
        if not args.peer_only or p[0] in args.peer_only:
            peers.append(p)
            if p[1:] == ('ckptzoo', 'selective'):
                peers += [(p[0], 'ckptzoo', f'plan={name}') for name in args.peer_plans
                          if p[0] in PEER_PLANS[name][1]]
    have_timm = import_timm() is not None
    runs, peer_results = [(name, name, name) for name in args.variants], {}
    for arch, impl, cp in peers:
        if impl == 'timm' and not have_timm:
            peer_results[(arch, impl, cp)] = dict(
                ok=False, error='timm is not installed: pip install timm==1.0.31 (or .[bench])')
            continue
        label = f'{arch} {impl}' + (f' {report.cp_name(impl, cp, arch, PEER_PLANS)}'
                                    if cp else '')
        runs.append(((arch, impl, cp), f'peer:{arch}:{impl}:{cp}', label))
    # round-robin: every job once per round, so slow spells of a shared machine spread over all
    results, index, total = {key: [] for key, _, _ in runs}, 0, len(runs) * args.rounds
    for k in range(args.rounds):
        for key, job, label in runs:
            index += 1
            suffix = f' (round {k + 1}/{args.rounds})' if args.rounds > 1 else ''
            results[key].append(_spawn(job, child, label + suffix, index, total))
    variants = {name: report.merge_rounds(results[name]) for name in args.variants}
    peer_results = {p: peer_results.get(p) or report.merge_rounds(results[p]) for p in peers}

    text = report.render(args, head, variants, peer_results, cuda, PEER_PLANS)
    print(text, flush=True)
    with open(osp.join(args.out_dir, 'benchmark.md'), 'w', encoding='utf-8') as f:
        f.write(head[0] + '\n\n' + text + '\n')
    if 'base' in variants:
        return 0 if variants['base']['ok'] else 1
    return 0 if any(r['ok'] for r in variants.values()) else 1


if __name__ == '__main__':
    sys.exit(main())
