"""Checkpoint segments: several consecutive units under one checkpoint equal the plain run
(outputs, every gradient, BN buffers), keep less than per-unit checkpointing, and bad segments
name the problem."""
import copy

import pytest
import torch

from ckptzoo.models import ResNet
from ckptzoo.memory.measure.trackers import LiveTensorTracker

from tests.helpers.checkpointing import assert_same_run, one_thread, plan_model, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)


def _resnet(**kwargs):
    torch.manual_seed(0)
    kwargs = dict(dict(base_channels=4, norm_eval=False, zero_init_residual=False,
                       out_indices=(1, 3)), **kwargs)
    model = ResNet(50, **kwargs)
    randomise_bn(model)
    return model.train()


CASES = {
    # a segment through a stage output (layer2.3 leaves for out_indices=1) and one across stages
    'resnet': (lambda: _resnet(), 'full',
               [['layer1.1', 'layer3.0'], ['layer3.2', 'layer4.1']]),
    'resnet frozen_stages=1': (lambda: _resnet(frozen_stages=1), None,
                               [['stem', 'layer2.2'], ['layer3.0', 'layer4.2']]),
    'resnet norm_eval': (lambda: _resnet(norm_eval=True), 'selective',
                         [['stem', 'layer4.2']]),
    # (reentrant: no stage output taken inside, where its gradient would add up in another
    # order, a last-bit difference on this model's large gradients)
    'resnet reentrant': (lambda: _resnet(cp_use_reentrant=True, out_indices=(3, )), 'full',
                         [['stem', 'layer2.3'], ['layer3.0', 'layer4.2']]),
    'swin drop path': (lambda: plan_model('swin'), 'full',
                       [['patch_embed', 'stages.0.blocks.1'],
                        ['stages.0.downsample', 'stages.2.blocks.0']]),
    'densenet dropout': (lambda: plan_model('densenet'), 'selective',
                         [['stem', 'denseblock1.denselayer2'],
                          ['transition1', 'denseblock3.denselayer1']]),
    'detector frozen_stages=1': (lambda: plan_model('detector', 1), 'full',
                                 [['backbone.layer1.1', 'backbone.layer4.1'],
                                  ['neck.level2', 'neck.level0'], ['neck.level3', 'neck.level4']]),
}


@pytest.mark.parametrize('case', list(CASES))
def test_segments_equal_plain(case):
    """Outputs, input and parameter gradients within 1e-6 and BN buffers bit-equal, under a
    seed (drop path, dropout), with the units outside segments in another mode."""
    build, mode, segments = CASES[case]
    plain = build()
    model = copy.deepcopy(plain)
    model.set_checkpoint_plan({'*': mode})
    assert model.set_checkpoint_segments(segments) == segments
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    calls = []
    real = torch.utils.checkpoint.checkpoint
    torch.utils.checkpoint.checkpoint = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        got = run_once(model, x, seed=5)
    finally:
        torch.utils.checkpoint.checkpoint = real
    assert_same_run(run_once(plain, x, seed=5), got, model)
    assert len(calls) >= len(segments)


def test_chains_and_round_trip():
    model = plan_model('detector')
    chains = model.checkpoint_chains()
    assert chains[0][0] == 'backbone.stem' and chains[0][-1] == 'backbone.layer4.1'
    assert len(chains[0]) == 9  # stem and 8 blocks: one chain across the stages
    assert chains[1:] == [['neck.level2', 'neck.level1', 'neck.level0'],
                          ['neck.level3', 'neck.level4']]
    assert model.checkpoint_chain_exits() == [  # stage outputs, level outputs
        'backbone.layer1.1', 'backbone.layer2.1', 'backbone.layer3.1', 'neck.level2',
        'neck.level1', 'neck.level3']
    segments = [['neck.level3', 'neck.level4'], ['backbone.stem', 'backbone.layer2.0']]
    assert model.set_checkpoint_segments(segments) == segments[::-1]  # execution order
    other = plan_model('detector')
    other.set_checkpoint_segments(model.checkpoint_segments())
    assert other.checkpoint_segments() == model.checkpoint_segments()
    assert model.set_checkpoint_segments([]) == []
    assert [len(c) for c in plan_model('densenet').checkpoint_chains()] == [10]
    assert [len(c) for c in plan_model('swin').checkpoint_chains()] == [9]


def test_bad_segments_name_the_problem():
    model = plan_model('detector')
    before = model.set_checkpoint_segments([['neck.level2', 'neck.level0']])
    with pytest.raises(KeyError, match=r"'backbone\.layr2\.0'.*close matches: .*backbone\.layer2"):
        model.set_checkpoint_segments([['backbone.layr2.0', 'backbone.layer3.0']])
    with pytest.raises(ValueError, match=r'crosses a chain boundary.*chains: backbone\.stem\.\.'
                                         r'backbone\.layer4\.1 \(9 units\), neck\.level2'):
        model.set_checkpoint_segments([['backbone.layer4.0', 'neck.level2']])
    with pytest.raises(ValueError, match='first unit after its last'):
        model.set_checkpoint_segments([['backbone.layer3.0', 'backbone.layer2.0']])
    with pytest.raises(ValueError, match='one unit'):
        model.set_checkpoint_segments([['neck.level1', 'neck.level1']])
    with pytest.raises(ValueError, match=r"'bbox_head\.level0' is in no chain"):
        model.set_checkpoint_segments([['bbox_head.level0', 'bbox_head.level1']])
    with pytest.raises(ValueError, match='overlap'):
        model.set_checkpoint_segments([['backbone.stem', 'backbone.layer2.0'],
                                       ['backbone.layer1.1', 'backbone.layer3.0']])
    for bad in ('neck.level2', [('neck.level2', 'neck.level1', 'neck.level0')], [['a', 3]]):
        with pytest.raises(TypeError, match='pair'):
            model.set_checkpoint_segments(bad)
    assert model.checkpoint_segments() == before


def _held_at_forward_end(model, x):
    with LiveTensorTracker() as tracker:
        tracker.track(model, x)
        start = tracker.live_bytes
        outs = model(x)
        held = tracker.live_bytes - start
    del outs
    return held


def test_a_segment_keeps_only_its_inputs():
    """Per-unit 'full' keeps every unit's input; a segment over the whole backbone keeps its
    input and the stage outputs that leave it: exactly the block boundaries less."""
    model = _resnet()
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    bounds = []
    hooks = [m.register_forward_hook(lambda m, i, o: bounds.append(o.untyped_storage().nbytes()))
             for m in [model.maxpool] + [b for n in model.res_layers for b in getattr(model, n)]]
    model(x)
    for h in hooks:
        h.remove()
    leaving = {4 + 3 - 1, len(bounds) - 1}  # layer2's last block (out_indices 1), the last one
    model.set_checkpoint_plan({'*': 'full'})
    per_unit = _held_at_forward_end(model, x)
    model.set_checkpoint_segments([['stem', 'layer4.2']])
    segment = _held_at_forward_end(model, x)
    inner = sum(b for i, b in enumerate(bounds) if i not in leaving)
    assert 0 < segment < per_unit
    assert per_unit - segment == inner
