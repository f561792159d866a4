"""The numbers the docs quote from training runs, produced here and nowhere else.

    python tools/misc/doc_numbers.py [RUN ...] [--write] [--jobs 2]

Each RUN trains its config with ``tools/train.py`` exactly as the docs say (fresh work dir, the
config's own seed), reads the run's JSON log and prints the evaluations and the last training
loss the docs quote. ``--write`` stores them in ``docs/results/doc_numbers.json``; without it
they are compared with that file and the command exits 1 on any difference. The docs' numbers
are checked against the file by ``tests/test_docs_numbers.py``, so a number in the docs is one
this script printed. Training is deterministic: on the same torch build and CPU kind a run
gives these numbers to the last digit, whatever the load (the times are not: they are the
wall time of this run, and the machine's load average when it ended is stored beside them).
"""
import argparse
import datetime
import json
import os
import os.path as osp
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
RESULTS = osp.join(ROOT, 'docs', 'results', 'doc_numbers.json')

#: run name -> (config, the evaluation keys quoted, at which epochs)
RUNS = {
    'retinanet_cp': ('configs/retinanet_cp.py', ('mAP', ), (4, 8, 12)),
    'retinanet_r18_synthetic_coco': ('configs/coco/retinanet_r18_fpn_synthetic_coco_cp.py',
                                     ('bbox_mAP', ), (4, 8, 12)),
    'mask_rcnn_r18_synthetic_coco': ('configs/coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py',
                                     ('bbox_mAP', 'segm_mAP'), (4, 8, 12)),
    'cascade_mask_rcnn_r18_synthetic_coco': (
        'configs/coco/cascade_mask_rcnn_r18_fpn_synthetic_coco_cp.py',
        ('bbox_mAP', 'segm_mAP'), (4, 8, 12)),
    'fcos_r18_synthetic_coco': ('configs/coco/fcos_r18_fpn_synthetic_coco_cp.py',
                                ('bbox_mAP', ), (4, 8, 12)),
    'yolox_tiny_synthetic_coco': ('configs/coco/yolox_tiny_synthetic_coco_cp.py',
                                  ('bbox_mAP', ), (8, 16, 20, 24)),
    'panoptic_fpn_r18_synthetic_coco_panoptic': (
        'configs/coco/panoptic_fpn_r18_fpn_synthetic_coco_panoptic_cp.py',
        ('PQ', 'PQ_th', 'PQ_st'), (4, 8, 12)),
}


def read_log(path, keys, epochs):
    """``{'<key>@<epoch>': value}`` of the validation lines, the last training ``loss`` and
    the first one, from an mmcv JSON log."""
    out, losses = {}, []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get('mode') == 'val' and rec.get('epoch') in epochs:
                for key in keys:
                    if key in rec:
                        out[f'{key}@{rec["epoch"]}'] = rec[key]
            elif rec.get('mode') == 'train' and 'loss' in rec:
                losses.append(rec['loss'])
    missing = [f'{k}@{e}' for k in keys for e in epochs if f'{k}@{e}' not in out]
    if missing or not losses:
        raise ValueError(f'{path}: the log has no {missing or "training loss"}')
    out.update(first_loss=losses[0], last_loss=losses[-1])
    return out


def run(name):
    """Train RUNS[name] in a fresh work dir; (numbers, seconds, the 1-minute load average
    when it ended)."""
    config, keys, epochs = RUNS[name]
    work_dir = tempfile.mkdtemp(prefix=f'ckptzoo_doc_numbers_{name}_')
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, 'tools/train.py', config, '--work-dir', work_dir],
                          cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    load = os.getloadavg()[0]
    if proc.returncode:
        raise RuntimeError(f'{name}: tools/train.py {config} exited {proc.returncode}:\n'
                           f'{proc.stderr[-3000:]}')
    logs = sorted(f for f in os.listdir(work_dir) if f.endswith('.log.json'))
    if not logs:
        raise RuntimeError(f'{name}: no JSON log in {work_dir}')
    return read_log(osp.join(work_dir, logs[-1]), keys, epochs), seconds, load


def _cpu_name():
    try:
        with open('/proc/cpuinfo') as f:
            return next(line.split(':', 1)[1].strip() for line in f
                        if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('runs', nargs='*', metavar='RUN',
                        help=f'default: all of {", ".join(RUNS)}')
    parser.add_argument('--write', action='store_true',
                        help=f'store the numbers in {osp.relpath(RESULTS, ROOT)}')
    parser.add_argument('--jobs', type=int, default=1, help='runs trained at once')
    args = parser.parse_args(argv)
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown:
        parser.error(f'unknown run {", ".join(unknown)}: choose from {", ".join(RUNS)}')
    names = args.runs or list(RUNS)
    stored = json.load(open(RESULTS)) if osp.exists(RESULTS) else {}
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = dict(zip(names, pool.map(run, names)))
    drift = []
    for name, (numbers, seconds, load) in results.items():
        print(f'{name} ({RUNS[name][0]}, {seconds:.0f} s): ' +
              ', '.join(f'{k} {v}' for k, v in numbers.items()))
        old = stored.get(name, {}).get('numbers')
        if old != numbers:
            drift.append(f'{name}: stored {old}, now {numbers}')
        if args.write:
            stored[name] = dict(config=RUNS[name][0], numbers=numbers, seconds=round(seconds),
                                load_average=round(load, 1),
                                date=datetime.date.today().isoformat(),
                                machine=f'{_cpu_name()}, {os.cpu_count()} cores',
                                jobs_at_once=args.jobs)
    if args.write:
        with open(RESULTS, 'w') as f:
            json.dump(stored, f, indent=1, sort_keys=True)
            f.write('\n')
        print(f'written: {osp.relpath(RESULTS, ROOT)}')
        return 0
    for line in drift:
        print(f'DRIFT {line}')
    return 1 if drift else 0


if __name__ == '__main__':
    sys.exit(main())
