"""Memory of the backbones small-GPU users train, under RetinaNet, measured on the CPU (the
exact peak of live tensor storage of one training step):

    python tools/benchmarks/backbones.py [--backbones regnetx-400mf ...] [--out FILE.json]

Each backbone replaces ResNet-50 in ``configs/voc/retinanet_r50_fpn_1x_voc0712.py`` (its FPN
fed the backbone's channels; generated VOC data resized to 320x320, batch 2, no pretrained
weights, as ``planner.py``'s RetinaNet). Rows: plain; the backbone's ``with_cp=True`` (the plan
the model is built with, where the backbone takes the key); every unit ``'full'``; and the
planner (``plan_memory``, the route of ``tools/train.py``) at the budget midway between the
predicted peaks of every unit ``'full'`` and of plain: its predicted and measured peaks. The
JSON file is what docs/benchmarks.md's table is checked against.
"""
import argparse
import copy
import json
import logging
import os.path as osp
import platform
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
sys.path.insert(0, ROOT)

from tools.benchmarks import synthetic  # noqa: E402

MIB = 2 ** 20

_BN = dict(type='BN', requires_grad=True)
#: backbone config and FPN arguments (``in_channels``, ``start_level``, ...) per name; the
#: anchor strides where the FPN's differ from RetinaNet's 8..128
BACKBONES = {
    'regnetx-400mf': (dict(type='RegNet', arch='regnetx_400mf', out_indices=(0, 1, 2, 3),
                           frozen_stages=1, norm_cfg=_BN, norm_eval=True, style='pytorch'),
                      dict(in_channels=[32, 64, 160, 384], start_level=1,
                           add_extra_convs='on_input'), None),
    'hrnetv2p-w18': (dict(type='HRNet', extra=dict(
        stage1=dict(num_modules=1, num_branches=1, block='BOTTLENECK', num_blocks=(4, ),
                    num_channels=(64, )),
        stage2=dict(num_modules=1, num_branches=2, block='BASIC', num_blocks=(4, 4),
                    num_channels=(18, 36)),
        stage3=dict(num_modules=4, num_branches=3, block='BASIC', num_blocks=(4, 4, 4),
                    num_channels=(18, 36, 72)),
        stage4=dict(num_modules=3, num_branches=4, block='BASIC', num_blocks=(4, 4, 4, 4),
                    num_channels=(18, 36, 72, 144)))),
                     dict(type='HRFPN', in_channels=[18, 36, 72, 144], out_channels=256,
                          stride=2, num_outs=5), [4, 8, 16, 32, 64]),
    'mobilenetv2': (dict(type='MobileNetV2', out_indices=(2, 4, 6), norm_cfg=_BN),
                    dict(in_channels=[32, 96, 320], start_level=0,
                         add_extra_convs='on_input'), None),
    'timm-convnext-t': (dict(type='mmcls.TIMMBackbone', model_name='convnext_tiny',
                             features_only=True, pretrained=False, out_indices=(1, 2, 3)),
                        dict(in_channels=[192, 384, 768], start_level=0,
                             add_extra_convs='on_input'), None),
}


def backbone_config(name):
    """``planner.py``'s RetinaNet config with backbone ``name``."""
    cfg = synthetic.planner_config('retinanet')
    backbone, neck, strides = BACKBONES[name]
    cfg.model.backbone = copy.deepcopy(backbone)
    if 'type' in neck:
        cfg.model.neck = copy.deepcopy(neck)
    else:
        cfg.model.neck.update(copy.deepcopy(neck))
    if strides:
        cfg.model.bbox_head.anchor_generator.strides = strides
    return cfg


def _with_cp_plan(cfg):
    """The plan ``with_cp=True`` in the backbone gives, or None where it takes no such key."""
    from ckptzoo.registry import MODELS, accepted_args, derives_units
    cls = MODELS.get(cfg.model.backbone['type'])
    allowed = accepted_args(cls)
    if not (allowed is None or 'with_cp' in allowed or derives_units(cls)):
        return None
    import torch
    from ckptzoo.registry import build_detector
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.backbone['with_cp'] = True
    with torch.device('meta'):
        model = build_detector(model_cfg)
    return {k: v for k, v in model.checkpoint_plan().items() if v is not None}


def measure(name):
    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.apis.plan import ProbeSession, plan_memory
    from ckptzoo.memory import predict_peak, uniform_plan
    from ckptzoo.memory.measure.step import probe_batch, train_step, worst_case_shape
    from ckptzoo.memory.measure.step_peak import measure_step
    cfg = backbone_config(name)
    synthetic.step_only(cfg, 'ckptzoo_bench_backbones_',
                        dict(type='IterBasedRunner', max_iters=1))
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('ckptzoo.bench_backbones'))
    model = run.runner.model
    batch = probe_batch(run, worst_case_shape(cfg))
    train_step(run, batch)  # optimizer state exists, as in every later step
    units = list(model.checkpoint_units())
    row = dict(backbone=name, type=cfg.model.backbone['type'], units=len(units),
               backbone_units=sum(u.startswith('backbone.') for u in units))
    for key, plan in (('plain', {}), ('with_cp', _with_cp_plan(cfg)),
                      ('full', {'*': 'full'})):
        if plan is None:
            row[key] = None
            continue
        model.replace_checkpoint_plan(plan)
        row[key] = measure_step(run, batch)[0]
    model.replace_checkpoint_plan({})
    with ProbeSession(run) as session:
        table = session.cost_table(batch)
    low = predict_peak(table, uniform_plan(table, 'full'))
    high = predict_peak(table, uniform_plan(table, None))
    budget = (low + high) // 2
    result, _ = plan_memory(run, cfg, budget)
    row.update(budget=budget, predicted=result.predicted_peak_bytes,
               measured=result.measured_peak_bytes,
               plan_full_units=sum(m is not None for m in result.plan.values()),
               segments=len(result.segments or []))
    return row


def markdown(rows):
    def mib(v):
        return 'n/a' if v is None else f'{v / MIB:.1f}'
    lines = ['| backbone (RetinaNet, 320x320, batch 2) | units (backbone) | plain MiB | '
             "backbone `with_cp` | every unit `'full'` | budget | planned: predicted / "
             'measured |', '| --- | --- | --- | --- | --- | --- | --- |']
    for r in rows:
        lines.append(f"| {r['backbone']} (`{r['type']}`) | {r['units']} ({r['backbone_units']})"
                     f" | {mib(r['plain'])} | {mib(r['with_cp'])} | {mib(r['full'])} | "
                     f"{mib(r['budget'])} | {mib(r['predicted'])} / {mib(r['measured'])} |")
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--backbones', nargs='+', default=list(BACKBONES),
                        choices=list(BACKBONES))
    parser.add_argument('--out', help='write the rows as JSON here')
    args = parser.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    rows = [measure(name) for name in args.backbones]
    text = markdown(rows)
    print(text)
    if args.out:
        import ckptzoo
        with open(args.out, 'w') as f:
            json.dump(dict(command='python tools/benchmarks/backbones.py '
                           + ' '.join(argv if argv is not None else sys.argv[1:]),
                           device='cpu', machine=platform.processor() or platform.machine(),
                           torch=torch.__version__, ckptzoo=ckptzoo.__version__, rows=rows),
                      f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
