"""The results of the jobs as markdown tables, PNG charts and the text around them.

A result is a job's dict (``ok``, ``times``, the memory keys of
:meth:`ckptzoo.memory.StepMeter.result`, or ``error``); :func:`merge_rounds` pools one job's
rounds. Ratios are measured side by side: a time ratio pairs the steps of each round.
"""
import os
import os.path as osp
import platform
import statistics

MIB = 2 ** 20
#: the config's own variants in the RetinaNet rows of the peers table: variant -> checkpointing
RETINANET_ROWS = {'base': '—', 'with_cp': 'with_cp (backbone)', 'cp_full': "'full' (all units)",
                  'cp_full_seg': "'full' (all units, FPN top-down one segment)",
                  'cp_selective': "'selective' (all units)", 'frozen_bn': 'frozen BN'}
#: the checkpointing of each implementation, by its own name
CP_NAMES = {'ckptzoo': "'full' (with_cp)", 'torchvision': 'memory_efficient',
            'timm': 'set_grad_checkpointing'}
COLOURS = {'ckptzoo': 'tab:blue', 'ckptzoo-config': 'tab:blue', 'torchvision': 'tab:orange',
           'torchvision-default': 'tab:red', 'timm': 'tab:green'}


# ------------------------------------------------------------------------------------------
# results and cells
# ------------------------------------------------------------------------------------------
def merge_rounds(rounds):
    """One job's results over its rounds: memory from the first (it is deterministic), the
    times of every step of every round, and per round (for paired ratios)."""
    failed = [r for r in rounds if not r['ok']]
    if failed:
        return failed[0]
    return dict(rounds[0], times=[t for r in rounds for t in r['times']],
                round_times=[r['times'] for r in rounds])


def time_ratio(r, ref):
    """The median of per-step ratios, step ``i`` of round ``k`` against the reference's step
    ``i`` of round ``k`` (jobs of one round ran one after the other); with steps that do not
    pair up, the ratio of the medians."""
    if not (r and r.get('ok') and ref and ref.get('ok')):
        return ''
    a, b = r.get('round_times'), ref.get('round_times')
    if a and b and [len(x) for x in a] == [len(x) for x in b]:
        return f'{statistics.median(x / y for ra, rb in zip(a, b) for x, y in zip(ra, rb)):.2f}×'
    return _ratio(_med(r), _med(ref))


def ms(times):
    return f'{statistics.median(times) * 1e3:.0f}'


def memory_line(r):
    if r.get('max_allocated') is not None:
        return (f'max allocated {r["max_allocated"] / MIB:.0f} MiB, '
                f'max reserved {r["max_reserved"] / MIB:.0f} MiB')
    return f'peak live tensors {r["peak_live"] / MIB:.0f} MiB'


def _ratio(value, ref):
    if value is None or not ref:
        return ''
    return f'{value / ref:.2f}×'


def _time_cell(r):
    t = r['times']
    return f'{statistics.median(t) * 1e3:.0f} ({min(t) * 1e3:.0f}–{max(t) * 1e3:.0f})'


def _med(r):
    return statistics.median(r['times']) if r.get('ok') else None


def _mem_keys(cuda):
    """(result key, column title) of the memory columns."""
    if cuda:
        return [('max_allocated', 'max allocated'), ('max_reserved', 'max reserved'),
                ('saved', 'saved for backward')]
    return [('peak_live', 'peak live tensors'), ('saved', 'saved for backward'),
            ('held', 'held at forward end')]


def _mib(value):
    return '' if value is None else f'{value / MIB:.1f}'


def cp_name(impl, cp, arch, plans):
    """The checkpointing column of a peer row; ``plans`` names the ``'plan=NAME'`` ones:
    ``{NAME: (label, ...)}``."""
    if impl == 'ckptzoo-config':
        return cp
    if cp.startswith('plan='):
        return plans[cp[5:]][0].format(
            blocks='dense layers' if arch == 'densenet121' else 'blocks')
    if impl == 'torchvision' and cp == 'selective':
        return "'selective' policy, whole model in one checkpoint"
    return {'': '—', 'selective': "'selective'"}.get(cp) or CP_NAMES[impl]


# ------------------------------------------------------------------------------------------
# tables
# ------------------------------------------------------------------------------------------
def variant_table(results, cuda):
    keys = _mem_keys(cuda)
    head = '| variant | ' + ''.join(f'{title} (MiB) | × base | ' for _, title in keys) + \
        'ms / step, median (min–max) | × base |'
    lines = [head, '|' + ' --- |' * (head.count('|') - 1)]
    base = results.get('base') if results.get('base', {}).get('ok') else None
    for name, r in results.items():
        if not r['ok']:
            lines.append(f'| {name} | FAILED: {r["error"]} |' + ' |' * (head.count('|') - 3))
            continue
        cells = [name]
        for key, _ in keys:
            cells += [_mib(r.get(key)), _ratio(r.get(key), base and base.get(key))]
        cells += [_time_cell(r), time_ratio(r, base)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def peer_rows(variants, peers):
    """``(model, implementation, checkpointing, result)`` rows, the config's own RetinaNet
    variants first, grouped by model."""
    rows = []
    if any(arch == 'retinanet' for arch, _, _ in peers):
        rows += [('retinanet', 'ckptzoo-config', label, variants[name])
                 for name, label in RETINANET_ROWS.items() if name in variants]
    rows += [(arch, impl, cp, r) for (arch, impl, cp), r in peers.items()]
    order = ['retinanet'] + [arch for arch, _, _ in peers]
    rows.sort(key=lambda row: order.index(row[0]))
    return rows


def peer_table(variants, peers, cuda, plans):
    keys = [k for k in _mem_keys(cuda) if k[0] != 'max_reserved']
    head = '| model | implementation | checkpointing | ' + \
        ''.join(f'{title} (MiB) | × own plain | ' for _, title in keys) + \
        'ms / step, median (min–max) | × own plain | × torchvision plain |'
    lines = [head, '|' + ' --- |' * (head.count('|') - 1)]
    rows = peer_rows(variants, peers)

    def find(arch, impl, cp):
        for a, i, c, r in rows:
            if (a, i, c) == (arch, impl, cp) and r.get('ok'):
                return r
        return None

    for arch, impl, cp, r in rows:
        label = 'RetinaNet R50-FPN' if arch == 'retinanet' else arch
        impl_name = 'ckptzoo' if impl == 'ckptzoo-config' else impl
        if not r.get('ok'):
            lines.append(f'| {label} | {impl_name} | {cp_name(impl, cp, arch, plans)} | '
                         f'FAILED: {r["error"]} |' + ' |' * (head.count('|') - 5))
            continue
        plain = find(arch, impl, '—' if impl == 'ckptzoo-config' else '')
        tv = find(arch, 'torchvision', '')
        cells = [label, impl_name, cp_name(impl, cp, arch, plans)]
        for key, _ in keys:
            cells += [_mib(r.get(key)), _ratio(r.get(key), plain and plain.get(key))]
        cells += [_time_cell(r), time_ratio(r, plain), time_ratio(r, tv)]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


# ------------------------------------------------------------------------------------------
# charts
# ------------------------------------------------------------------------------------------
def chart(path, title, labels, memory, mem_label, times, colours=None, groups=None):
    """Two bar charts (memory, time); ``groups`` (one per bar) leave a gap between models."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    xs, x = [], 0.0
    for i in range(len(labels)):
        if i and groups and groups[i] != groups[i - 1]:
            x += 0.8
        xs.append(x)
        x += 1.0
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.55 * len(labels) + 4), 5))
    for ax, values, ylabel in ((axes[0], memory, f'{mem_label} (MiB)'),
                               (axes[1], times, 'ms / step (median)')):
        ax.bar(xs, [v if v is not None else 0 for v in values],
               color=colours or 'tab:blue')
        for x, v in zip(xs, values):
            ax.text(x, v or 0, 'FAILED' if v is None else f'{v:.0f}', ha='center',
                    va='bottom', fontsize=7)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=60, ha='right', fontsize=7)
        ax.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def peers_chart(path, variants, peers, mem_key, mem_label, plans):
    """ckptzoo's bars (blue) next to torchvision's and timm's, grouped by model."""
    rows = peer_rows(variants, peers)
    labels = [f'{arch} {"ckptzoo" if impl == "ckptzoo-config" else impl} '
              f'{cp_name(impl, cp, arch, plans)}'.replace(' —', '')
              for arch, impl, cp, _ in rows]
    chart(path, 'ckptzoo (blue) and its peers', labels,
          [r[mem_key] / MIB if r.get('ok') else None for *_, r in rows], mem_label,
          [_med(r) * 1e3 if r.get('ok') else None for *_, r in rows],
          colours=[COLOURS[impl] for _, impl, _, _ in rows], groups=[a for a, *_ in rows])


# ------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------
def _device_name(cuda, threads=None):
    import torch
    if cuda:
        return f'GPU: {torch.cuda.get_device_name(0)}'
    name = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    name = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    return f'CPU: {name}, {os.cpu_count()} logical cores, ' \
        f'{threads or torch.get_num_threads()} torch threads'


def image_size(args):
    """``--img-size`` as ``'WxH'``."""
    return 'x'.join(map(str, args.img_size if len(args.img_size) == 2 else args.img_size * 2))


def header(args, argv, cuda):
    """The command line, then what was run on what and how it was measured."""
    import torch
    return [f'command: `{"python tools/benchmarks/steps.py " + " ".join(argv)}`', '',
            f'device: {_device_name(cuda, args.threads)}; torch {torch.__version__}', '',
            f'config `{args.config}`, generated VOC data resized to {image_size(args)} (W×H), '
            f'batch {args.batch} images per optimizer step, {args.warmup} warm-up + '
            f'{args.iters} timed steps, then one probe step' +
            (f', every job {args.rounds} times round-robin (times: all steps of all rounds; '
             '× ratios: median of per-step ratios within each round)' if args.rounds > 1
             else '') + '. Memory: ' +
            ('`torch.cuda.max_memory_allocated` / `max_memory_reserved` over the timed steps'
             if cuda else 'exact peak of live tensor storage (parameters, gradients, '
             'optimizer state, batch, activations; `LiveTensorTracker`) in the probe step') +
            '; saved for backward: bytes autograd keeps from the forward '
            '(`SavedTensorCounter`, parameters left out)' +
            ('' if cuda else '; held at forward end: live tensor bytes when the forward ends, '
             'less those that existed before the step (the measure for selective '
             'checkpointing, which keeps its tensors outside saved-tensor hooks)') + '.', '']


def render(args, head, variants, peers, cuda, plans):
    """The text after the command line: ``head``'s, the tables, the charts' paths; the charts
    (``benchmark.png``, ``benchmark_peers.png``) are written under ``--out-dir``."""
    os.makedirs(args.out_dir, exist_ok=True)
    text = head[1:] + ['## Variants', '', variant_table(variants, cuda), '']
    mem_key = 'max_allocated' if cuda else 'peak_live'
    mem_label = 'max allocated' if cuda else 'peak live tensors'
    charts = [osp.join(args.out_dir, 'benchmark.png')]
    chart(charts[0], f'{osp.basename(args.config)} ({image_size(args)}, batch {args.batch})',
          list(variants), [r[mem_key] / MIB if r['ok'] else None for r in variants.values()],
          mem_label, [_med(r) * 1e3 if r['ok'] else None for r in variants.values()])
    if peers:
        text += ['## Peers', '',
                 f'RetinaNet: the same batches as above. Backbones: random input of '
                 f'{args.peer_batch}×3×{args.peer_img_size}×{args.peer_img_size}, loss = mean '
                 'of the last feature map, SGD step; ImageNet-style init, no pretrained weights. '
                 'RetinaNet implementations: ckptzoo = the config and its variants above; '
                 'torchvision = built as the config (BatchNorm in eval mode with trained affine '
                 'parameters from layer2 on, conv1 + layer1 frozen, P6 from C5); '
                 'torchvision-default = as `retinanet_resnet50_fpn` builds it '
                 '(FrozenBatchNorm2d, P6 from P5), to set beside ckptzoo\'s frozen_bn.',
                 '', peer_table(variants, peers, cuda, plans), '']
        charts.append(osp.join(args.out_dir, 'benchmark_peers.png'))
        peers_chart(charts[1], variants, peers, mem_key, mem_label, plans)
    text += [f'charts: {", ".join(charts)}']
    return '\n'.join(text)
