"""Checkpoint units and plans: names, run-time plans, every mode on every unit type equal to
plain (outputs, every gradient, BN buffers), bad input."""
import copy
import warnings

import pytest
import torch
from torch.utils import checkpoint as torch_cp

from ckptzoo.models import DenseNet, ResNet, SwinTransformer
from ckptzoo.models.backbones.densenet import DenseLayer
from ckptzoo.models.checkpointing import functional
from ckptzoo.registry import build_model

from tests.helpers.checkpointing import (TINY_DENSE, TINY_SWIN, assert_same_run, one_thread, plan_model,
                                         run_once)

one_thread = pytest.fixture(autouse=True)(one_thread)

def _count_modes(monkeypatch):
    calls = dict(checkpoint=0, selective=0, offload=0)
    real_cp, real_offload = torch_cp.checkpoint, torch.autograd.graph.save_on_cpu

    def counting_cp(fn, *args, **kwargs):
        calls['checkpoint'] += 1
        calls['selective'] += 'context_fn' in kwargs
        return real_cp(fn, *args, **kwargs)

    def counting_offload(*args, **kwargs):
        calls['offload'] += 1
        return real_offload(*args, **kwargs)

    monkeypatch.setattr(torch_cp, 'checkpoint', counting_cp)
    monkeypatch.setattr(torch.autograd.graph, 'save_on_cpu', counting_offload)
    return calls


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('kind,frozen_stages', [('resnet', -1), ('resnet', 1), ('densenet', -1),
                                                ('densenet', 1), ('swin', -1), ('swin', 1),
                                                ('detector', 1)])
def test_every_mode_equals_plain(monkeypatch, kind, frozen_stages, mode):
    """Outputs, input and parameter gradients within 1e-6, BN buffers bit-equal, with drop
    path / dropout under a seed and with frozen stages; every trainable unit runs the mode."""
    plain = plan_model(kind, frozen_stages)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert set(plan.values()) == {mode}
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    calls = _count_modes(monkeypatch)
    got = run_once(model, x, seed=5)
    assert_same_run(ref, got, model)
    # units whose modules are all frozen (eval) run plainly; the others ran the mode
    ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
    assert ran >= len(plan) - (5 if frozen_stages >= 0 else 0) - 4, (ran, len(plan))
    if mode == 'selective':
        # a trainable dense layer runs it as two 'full' checkpoints (DenseLayer.forward)
        two = 2 * sum(m.training for m in model.modules() if isinstance(m, DenseLayer))
        assert calls['selective'] == ran - two > 0, (calls, two)
    else:
        assert calls['selective'] == 0, calls


def test_units_are_named_in_execution_order():
    model = build_model(dict(
        type='RetinaNet',
        backbone=dict(type='ResNet', depth=18, base_channels=4, out_indices=(1, 2, 3)),
        neck=dict(type='FPN', in_channels=[8, 16, 32], out_channels=8, start_level=0,
                  add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(type='RetinaHead', num_classes=3, in_channels=8, feat_channels=8)))
    names = list(model.checkpoint_units())
    assert names == (['backbone.stem'] +
                     [f'backbone.layer{i}.{j}' for i in range(1, 5) for j in range(2)] +
                     [f'neck.level{i}' for i in (2, 1, 0, 3, 4)] +
                     [f'bbox_head.level{i}' for i in range(5)])
    assert list(DenseNet(TINY_DENSE).checkpoint_units()) == [
        'stem', 'denseblock1.denselayer1', 'denseblock1.denselayer2', 'transition1',
        'denseblock2.denselayer1', 'denseblock2.denselayer2', 'transition2',
        'denseblock3.denselayer1', 'denseblock3.denselayer2', 'norm4']
    swin = SwinTransformer(TINY_SWIN, window_size=2, out_indices=(2, ))
    assert list(swin.checkpoint_units()) == [
        'patch_embed', 'stages.0.blocks.0', 'stages.0.blocks.1', 'stages.0.downsample',
        'stages.1.blocks.0', 'stages.1.blocks.1', 'stages.1.downsample',
        'stages.2.blocks.0', 'stages.2.blocks.1']


def test_config_keys_feed_the_plan():
    model = build_model(dict(
        type='RetinaNet',
        backbone=dict(type='ResNet', depth=18, base_channels=4, out_indices=(1, 2, 3),
                      with_cp=(False, True, False, False)),
        neck=dict(type='FPN', in_channels=[8, 16, 32], out_channels=8, num_outs=5,
                  add_extra_convs='on_input', with_cp=True),
        bbox_head=dict(type='RetinaHead', num_classes=3, in_channels=8, feat_channels=8)))
    plan = model.checkpoint_plan()
    assert [n for n, m in plan.items() if m == 'full'] == \
        ['backbone.layer2.0', 'backbone.layer2.1'] + [f'neck.level{i}' for i in (2, 1, 0, 3, 4)]
    assert set(plan.values()) == {None, 'full'}
    # mmdet 2.x configs (no with_cp in FPN / RetinaHead) checkpoint nothing there
    assert not model.bbox_head.level_units[0].mode


def test_backbone_with_cp_reads_the_plan_in_force():
    """mmdet's ``with_cp`` attribute follows ``set_checkpoint_plan`` instead of keeping the
    constructor's value: True when every unit of the backbone is checkpointed (as a block's
    ``with_cp`` reads its unit); it cannot be set."""
    for model in (ResNet(18, base_channels=4, with_cp=True),
                  DenseNet(TINY_DENSE, with_cp=True),
                  SwinTransformer(TINY_SWIN, window_size=2, out_indices=(2, ), with_cp=True)):
        assert model.with_cp is True
        model.set_checkpoint_plan({'*': None})
        assert model.with_cp is False
        model.set_checkpoint_plan({'*': 'selective'})
        assert model.with_cp is True
        model.set_checkpoint_plan({next(iter(model.checkpoint_units())): None})
        assert model.with_cp is False
        with pytest.raises(AttributeError, match=r"with_cp reads the checkpoint units' modes "
                                                 r'and cannot be set .*set_checkpoint_plan'):
            model.with_cp = True
    assert ResNet(18, base_channels=4, with_cp=(True, False, True, True)).with_cp is False


def test_set_plan_at_run_time_keeps_weights_and_modules():
    model = plan_model('detector')
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modules = list(model.modules())
    plan = model.set_checkpoint_plan({'*': 'full', 'backbone.layer1': None,
                                      'bbox_head.level*': 'selective',
                                      'neck.level3': 'offload'})
    assert plan['backbone.stem'] == 'full' and plan['backbone.layer1.1'] is None
    assert plan['bbox_head.level4'] == 'selective' and plan['neck.level3'] == 'offload'
    assert model.checkpoint_plan() == plan
    # the plan round-trips and None switches units off
    other = copy.deepcopy(model)
    other.set_checkpoint_plan({'*': None})
    assert set(other.checkpoint_plan().values()) == {None}
    assert other.set_checkpoint_plan(dict(plan)) == plan
    assert list(model.modules()) == modules
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_bad_plans_name_the_problem():
    model = plan_model('detector')
    before = model.checkpoint_plan()
    with pytest.raises(KeyError, match=r"'backbone.layr3' matches no checkpoint unit; close "
                                       r'matches: backbone.layer3'):
        model.set_checkpoint_plan({'backbone.stem': 'full', 'backbone.layr3': 'full'})
    with pytest.raises(KeyError, match=r"'neck.lvl\*' matches no checkpoint unit"):
        model.set_checkpoint_plan({'neck.lvl*': 'full'})
    with pytest.raises(ValueError, match=r"unknown checkpoint mode for 'neck' 'fulll': allowed "
                                         r"are None, 'full', 'selective', 'offload'"):
        model.set_checkpoint_plan({'neck': 'fulll'})
    with pytest.raises(TypeError, match='a checkpoint plan is a dict'):
        model.set_checkpoint_plan(['full'])
    assert model.checkpoint_plan() == before  # nothing changed
    reentrant = ResNet(18, base_channels=4, cp_use_reentrant=True)
    with pytest.raises(ValueError, match=r"'selective' needs the non-reentrant implementation: "
                                         r'set cp_use_reentrant=False'):
        reentrant.set_checkpoint_plan({'layer1': 'selective'})


def test_offload_with_nothing_to_offload_warns_once(monkeypatch):
    monkeypatch.setattr(functional, '_warned', set())
    model = ResNet(18, base_channels=4).train()
    model.set_checkpoint_plan({'*': 'offload'})
    x = torch.randn(1, 3, 32, 32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(2):
            sum(o.sum() for o in model(x)).backward()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "'offload'" in messages[0] and 'nothing to offload' in messages[0]


def test_selective_keeps_conv_outputs_only():
    """What selective holds: conv outputs stay, the BN / ReLU outputs are dropped."""
    from ckptzoo.memory.measure.trackers import LiveTensorTracker
    held = {}
    for mode in (None, 'full', 'selective'):
        model = ResNet(50, base_channels=4, out_indices=(3, )).train()
        model.set_checkpoint_plan({'*': mode})
        x = torch.randn(2, 3, 64, 64)
        with LiveTensorTracker() as tracker:
            tracker.track(model, x)
            out = model(x)
            held[mode] = tracker.live_bytes - tracker.baseline_bytes
        del out
    assert held['full'] < held['selective'] < held[None], held


def test_config_checkpoint_plan_and_ddp_reentrant_check():
    from mmengine.config import Config

    from ckptzoo.apis import apply_checkpoint_plan
    model = plan_model('detector')
    apply_checkpoint_plan(model, Config(dict(checkpoint_plan={'neck': 'full'})))
    assert {n for n, m in model.checkpoint_plan().items() if m} == \
        {f'neck.level{i}' for i in range(5)}
    reentrant = ResNet(18, base_channels=4, with_cp=True, cp_use_reentrant=True)
    cfg = Config(dict(find_unused_parameters=True))
    apply_checkpoint_plan(reentrant, cfg, distributed=False)  # no DDP, no problem
    with pytest.raises(ValueError, match=r'find_unused_parameters=True cannot be combined with '
                                         r'cp_use_reentrant=True under DDP .*stem.* Fix: set '
                                         r'cp_use_reentrant=False'):
        apply_checkpoint_plan(reentrant, cfg, distributed=True)
    reentrant.set_checkpoint_plan({'*': None})  # nothing checkpointed: nothing to refuse
    apply_checkpoint_plan(reentrant, cfg, distributed=True)


def _ddp_worker(rank, world_size, init_file):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=rank,
                            world_size=world_size)
    try:
        x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(rank))
        runs = {}
        warnings.simplefilter('ignore')  # DDP's broadcast_buffers deprecation notice
        for mode in (None, 'full', 'selective', 'offload'):
            model = plan_model('swin' if mode == 'selective' else 'resnet', frozen_stages=1)
            model.set_checkpoint_plan({'*': mode})
            ddp = DDP(model, broadcast_buffers=False)
            runs[mode] = (run_once(ddp, x, seed=rank), ddp)
        for mode in ('full', 'offload'):
            assert_same_run(runs[None][0], *runs[mode])
        plain = DDP(plan_model('swin', frozen_stages=1), broadcast_buffers=False)
        assert_same_run(run_once(plain, x, seed=rank), *runs['selective'])
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.subprocess
def test_modes_equal_plain_under_two_rank_gloo_ddp(tmp_path):
    """Gradients are all-reduced across ranks with different inputs: each mode's equal plain's."""
    import torch.multiprocessing as mp
    mp.spawn(_ddp_worker, args=(2, str(tmp_path / 'init')), nprocs=2, join=True)


@pytest.mark.cuda
@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('kind', ['resnet', 'densenet', 'swin'])
def test_every_mode_exact_on_cuda_and_each_keeps_less_on_the_device(kind, monkeypatch):
    """On the GPU (cuDNN deterministic; dropout drawn from the CUDA generator, which a
    recompute must replay), every mode equals plain, and keeps less device memory from the
    forward than plain ('offload' moves what it saves to CPU memory)."""
    monkeypatch.setattr(torch.backends.cudnn, 'deterministic', True)
    monkeypatch.setattr(torch.backends.cudnn, 'benchmark', False)
    model = plan_model(kind).cuda()
    x = torch.randn(2, 3, 64, 64, device='cuda', requires_grad=True)
    kept, start = {}, copy.deepcopy(model.state_dict())
    for mode in (None, 'full', 'selective', 'offload'):
        model.load_state_dict(start)  # BN statistics as at the start, for each mode
        model.set_checkpoint_plan({'*': mode})
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.manual_seed(3)
        outs = model(x)
        kept[mode] = torch.cuda.memory_allocated() - before - sum(
            o.untyped_storage().nbytes() for o in outs)
        del outs
        model.load_state_dict(start)
        got = run_once(model, x, seed=3)
        if mode is None:
            ref = got
        else:
            assert_same_run(ref, got, model)
    assert kept['full'] < kept[None] and kept['offload'] < kept[None], kept
