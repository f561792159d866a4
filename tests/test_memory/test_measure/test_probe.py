"""The probe on a small RetinaNet (ResNet-18 with a frozen stage, FPN, RetinaHead) trained on
generated VOC data: the derived ``'full'`` keeps what a recorded ``'full'`` step keeps on every
unit, FPN levels included, and ``'selective'`` is priced by the recompute it runs."""
import logging
import os.path as osp

import random

import pytest
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.memory import Group, apply_plan, plan_modes, predict_peak, uniform_plan
from ckptzoo.memory.measure.probe import measure_step, probe, probe_batch, worst_case_shape
from ckptzoo.memory.model.solver import chen_sqrt_plan, minimum_peak
from tests.helpers.configs import tiny_voc_retinanet

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


@pytest.fixture(scope='module')
def detector_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('probe_detector')
    cfg = tiny_voc_retinanet(tmp)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_probe'))
    batch = probe_batch(run, worst_case_shape(cfg))
    return run, batch, probe(run, batch, modes=(None, 'full', 'selective'))


def test_derived_full_keeps_what_a_recorded_full_keeps(detector_run):
    """neck.level0 returns its merged lateral, which no other unit reads: alive in the plain
    step only because its own output conv saved it, so a 'full' checkpoint frees it."""
    run, batch, derived = detector_run
    recorded = probe(run, batch, modes=(None, 'full'), derive_full=False)
    assert [u.name for u in derived.units][-10:] == \
        [f'neck.level{i}' for i in (2, 1, 0, 3, 4)] + [f'bbox_head.level{i}' for i in range(5)]
    for d, r in zip(derived.units, recorded.units):
        assert d.kept['full'] == r.kept['full'], d.name
    level0 = derived.units[derived.names.index('neck.level0')]
    assert level0.kept['full'] < level0.kept[None]


def test_selective_is_priced_by_its_recompute(detector_run):
    """The frozen stem and stage 1 run plainly under any mode (nothing to differentiate), so
    their 'selective' costs nothing; every trainable unit's recompute was timed, as the unit's
    own: below ten of its forwards, or, on a machine busy enough to preempt the probe for tens
    of milliseconds, below a whole step (a time taken over several units would exceed it)."""
    _, _, table = detector_run
    for unit in table.units:
        seconds = unit.recompute_time['selective']
        if unit.name == 'backbone.stem' or unit.name.startswith('backbone.layer1.'):
            assert seconds == 1e-6, unit.name
        else:
            assert 1e-6 < seconds < max(10 * unit.fwd_time + 0.05, table.step_time), unit.name


def test_probe_patches_nothing(detector_run):
    """The probe watches the units through ``checkpointing.observe`` (beside another observer)
    and steps through ``OptimizerHook.backward_and_step``: no class attribute and no attribute
    of the optimizer hook is replaced while it runs."""
    from ckptzoo.models.checkpointing import CheckpointObserver, CheckpointUnit, observe
    from ckptzoo.models.checkpointing.functional import _Recompute
    from ckptzoo.runner.hooks.optimizer import OptimizerHook
    run, batch, _ = detector_run
    hook = next(h for h in run.runner.hooks if isinstance(h, OptimizerHook))
    classes = {cls: dict(vars(cls)) for cls in (CheckpointUnit, _Recompute, *type(hook).__mro__)}
    attributes = dict(vars(hook))
    checks = []

    def check(*_):
        checks.append(all(dict(vars(c)) == v for c, v in classes.items())
                      and vars(hook) == attributes)

    class Spy(CheckpointObserver):
        def unit_call(self, run_unit, *_):
            check()
            return run_unit()

    handle = run.runner.optimizer.register_step_pre_hook(check)
    try:
        with observe(Spy()):
            table = probe(run, batch, modes=(None, ))
    finally:
        handle.remove()
    assert len(checks) > len(table.units) and all(checks)


@pytest.mark.slow
@pytest.mark.subprocess
def test_ddp_bucket_bytes_are_the_reducers():
    """The bytes added for DDP's buckets are those torch's reducer reports (1-rank gloo in a
    subprocess); with gradient_as_bucket_view the buckets are the gradients: nothing added."""
    code = '''
import os, torch, torch.nn as nn, torch.distributed as dist
from ckptzoo.memory.measure.probe import ddp_bucket_bytes
os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=os.environ['PORT'])
dist.init_process_group('gloo', rank=0, world_size=1)
m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Conv2d(8, 4, 1))
m[0].requires_grad_(False)
d = nn.parallel.DistributedDataParallel(m)
d(torch.randn(2, 3, 8, 8)).sum().backward()
sizes = d._get_ddp_logging_data()['bucket_sizes']
print(ddp_bucket_bytes(d), sum(int(s) for s in sizes.split(',')),
      ddp_bucket_bytes(nn.parallel.DistributedDataParallel(m, gradient_as_bucket_view=True)),
      ddp_bucket_bytes(m))
'''
    import os
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=ROOT, PORT=str(port)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours, reducer, as_view, plain = map(int, proc.stdout.split())
    assert ours == reducer == (8 + 8 + 4 * 8 + 4) * 4  # BN and the 1x1 conv: not the frozen conv
    assert as_view == 0 and plain == 0


def test_probe_predicts_the_measured_peak(probed):
    _, run, batch, table = probed
    model = run.runner.model
    assert table.names[0] == 'backbone.stem' and len(table.units) == 9
    plain = sum(u.kept[None] for u in table.units)
    assert sum(u.kept['full'] for u in table.units) < 0.3 * plain
    rng = random.Random(0)
    plans = [uniform_plan(table, m) for m in (None, 'full', 'selective')] + [
        tuple(Group(i, i + 1, rng.choice(u.modes)) for i, u in enumerate(table.units))
        for _ in range(2)]
    peaks = set()
    for plan in plans:
        model.set_checkpoint_plan(plan_modes(table, plan))
        measured, _ = measure_step(run, batch)
        assert predict_peak(table, plan) == pytest.approx(measured, rel=0.005)
        peaks.add(measured)
    assert max(peaks) > 1.04 * min(peaks)  # the plans differ by far more than the tolerance
    model.set_checkpoint_plan({'*': None})


def test_segment_plans_predict_the_measured_peak(probed):
    """The model's chain (stem and every block) and its exits (stage outputs the head does
    not take are still returned: out_indices are all four stages) reach the table; segment
    plans, applied to the model, peak as predicted."""
    _, run, batch, table = probed
    model = run.runner.model
    assert table.chains == [(0, 9)] and table.exits == [2, 4, 6]
    n = len(table.units)
    plans = [chen_sqrt_plan(table), (Group(0, n, 'full'), ),
             (Group(0, 1, 'selective'), Group(1, 5, 'full'), Group(5, 6, None),
              Group(6, 8, 'full'), Group(8, 9, 'full')), minimum_peak(table).plan]
    assert all(any(g.stop - g.start > 1 for g in plan) for plan in plans)
    for plan in plans:
        apply_plan(model, table, plan)
        assert len(model.checkpoint_segments()) == sum(g.stop - g.start > 1 for g in plan)
        measured, _ = measure_step(run, batch)
        assert predict_peak(table, plan) == pytest.approx(measured, rel=0.002), plan
    apply_plan(model, table, uniform_plan(table, None))
    assert model.checkpoint_segments() == []


def test_full_derived_from_the_plain_step(probed):
    """'full' is derived from the plain step, not run: its kept bytes are those of a recorded
    'full' step, its transients bound the recorded ones from above and closely."""
    _, run, batch, table = probed
    recorded = probe(run, batch, modes=(None, 'full'), derive_full=False)
    for derived, real in zip(table.units, recorded.units):
        assert derived.kept['full'] == real.kept['full'], derived.name
        assert derived.kept['full'] < 0.5 * derived.kept[None]
        # the forward transient is bounded by the plain one (plus the spare BN counters)
        assert real.fwd_peak['full'] <= derived.fwd_peak['full'] <= \
            derived.fwd_peak[None] + 64, derived.name
        assert real.bwd_peak['full'] <= derived.bwd_peak['full'] <= \
            real.bwd_peak['full'] + 0.01 * real.bwd_peak['full'], derived.name


@pytest.mark.parametrize('resize,pad,expected', [
    (dict(img_scale=(1000, 600), keep_ratio=True), dict(size_divisor=32), (1024, 1024)),
    (dict(img_scale=(320, 256), keep_ratio=False), dict(size_divisor=32), (256, 320)),
    (dict(img_scale=[(1333, 640), (1333, 800)], keep_ratio=True), None, (1333, 1333)),
])
def test_worst_case_shape(resize, pad, expected):
    pipeline = [dict(type='LoadImageFromFile'), dict(type='Resize', **resize)]
    pipeline += [dict(type='Pad', **pad)] if pad else []
    cfg = Config(dict(data=dict(train=dict(type='RepeatDataset', times=2,
                                           dataset=dict(pipeline=pipeline)))))
    assert worst_case_shape(cfg) == expected


def test_units_a_configuration_never_runs_are_left_out(tmp_path):
    """A backbone returning an earlier stage than its last (MobileNetV2 with out_indices
    (2, 4, 6) never runs its ``conv2``) lists the unit; the probe leaves it out of the table,
    saying so, instead of failing."""
    cfg = tiny_voc_retinanet(tmp_path)
    cfg.model.backbone = dict(type='MobileNetV2', widen_factor=0.25, out_indices=(2, 4, 6))
    cfg.model.neck.update(in_channels=[8, 24, 80], start_level=0, add_extra_convs='on_input')
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_probe'))
    assert 'backbone.conv2' in run.runner.model.checkpoint_units()
    batch = probe_batch(run, worst_case_shape(cfg))
    with pytest.warns(UserWarning, match='backbone.conv2 do not run in the probe step'):
        table = probe(run, batch, modes=(None, 'full'))
    assert 'backbone.conv2' not in table.names and 'backbone.layer7.0' in table.names
