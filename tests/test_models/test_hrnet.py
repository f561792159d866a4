"""HRNet: mmdet 2.28.2's keys for the hrnetv2p configs, shapes, every checkpoint mode and
segment exact (outputs, every gradient, BN buffers), malformed ``extra`` refused by key."""
import copy

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import HRNet
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

#: the backbone of mmdet's hrnet/faster_rcnn_hrnetv2p_w18_1x_coco.py
W18 = dict(
    stage1=dict(num_modules=1, num_branches=1, block='BOTTLENECK', num_blocks=(4, ),
                num_channels=(64, )),
    stage2=dict(num_modules=1, num_branches=2, block='BASIC', num_blocks=(4, 4),
                num_channels=(18, 36)),
    stage3=dict(num_modules=4, num_branches=3, block='BASIC', num_blocks=(4, 4, 4),
                num_channels=(18, 36, 72)),
    stage4=dict(num_modules=3, num_branches=4, block='BASIC', num_blocks=(4, 4, 4, 4),
                num_channels=(18, 36, 72, 144)))

TINY = dict(
    stage1=dict(num_modules=1, num_branches=1, block='BOTTLENECK', num_blocks=(2, ),
                num_channels=(4, )),
    stage2=dict(num_modules=1, num_branches=2, block='BASIC', num_blocks=(1, 2),
                num_channels=(4, 8)),
    stage3=dict(num_modules=2, num_branches=3, block='BASIC', num_blocks=(1, 1, 1),
                num_channels=(4, 8, 8)),
    stage4=dict(num_modules=2, num_branches=4, block='BASIC', num_blocks=(1, 1, 1, 1),
                num_channels=(4, 8, 8, 16)))


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_w18_keys_and_shapes_as_mmdet(single_thread):
    model = build_backbone(dict(type='HRNet', extra=W18)).eval()
    state = model.state_dict()
    # mmdet 2.28.2's HRNet of this config: 1830 keys, 9,596,501 numbers
    assert len(state) == 1830
    assert sum(v.numel() for v in state.values()) == 9596501
    for key in ('conv1.weight', 'bn1.running_mean', 'conv2.weight', 'bn2.weight',
                'layer1.0.conv3.weight', 'layer1.0.downsample.1.weight',
                'transition1.0.0.weight', 'transition1.1.0.0.weight',
                'transition3.3.0.1.running_var', 'stage2.0.branches.1.3.bn2.weight',
                'stage4.2.branches.3.3.conv2.weight', 'stage2.0.fuse_layers.0.1.0.weight',
                'stage2.0.fuse_layers.1.0.0.1.weight', 'stage4.2.fuse_layers.3.0.2.0.weight'):
        assert key in state, key
    assert model.norm1 is model.bn1 and model.norm2 is model.bn2
    assert model.transition2[0] is None and model.stage4[2].fuse_layers[0][0] is None
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    assert [tuple(o.shape) for o in outs] == [(1, 18, 16, 16), (1, 36, 8, 8), (1, 72, 4, 4),
                                             (1, 144, 2, 2)]
    units = model.checkpoint_units()
    assert list(units)[:3] == ['stem', 'layer1.0', 'layer1.1']
    assert 'transition1' in units and 'stage2.0.fuse' in units and 'stage4.2.fuse' in units
    assert list(units)[-1] == 'stage4.2.fuse' and model.checkpoint_chains() == [list(units)]
    assert not model.with_cp


def test_multiscale_output_false_and_defaults(single_thread):
    model = HRNet(TINY, multiscale_output=False, in_channels=1).eval()
    assert len(model.stage4[-1].fuse_layers) == 1 and len(model.stage4[0].fuse_layers) == 4
    with torch.no_grad():
        outs = model(torch.randn(2, 1, 32, 32))
    assert [tuple(o.shape) for o in outs] == [(2, 4, 8, 8)]
    assert model.norm_eval and not model.zero_init_residual
    model.train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))
    # mmdet's default init: Kaiming (fan_out) convs, unit norms
    assert all(m.weight.eq(1).all() for m in model.modules() if isinstance(m, _BatchNorm))


def _pair(**kwargs):
    torch.manual_seed(0)
    plain = HRNet(TINY, norm_eval=False, **kwargs).train()
    randomise_bn(plain)
    other = copy.deepcopy(plain)
    return plain, other


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('multiscale', [True, False])
def test_every_mode_is_exact(single_thread, mode, multiscale):
    plain, cp = _pair(multiscale_output=multiscale)
    cp.set_checkpoint_plan({'*': mode})
    assert cp.with_cp and all(m == mode for m in cp.checkpoint_plan().values())
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, 3), run_once(cp, x, 3), cp)


@pytest.mark.parametrize('frozen_stages', [-1, 0, 2])
def test_with_cp_and_segments_are_exact(single_thread, count_cp, frozen_stages):
    plain, cp = _pair(frozen_stages=frozen_stages)
    seg = copy.deepcopy(plain)
    cp.set_checkpoint_plan({'*': 'full'})
    x = torch.randn(2, 3, 32, 32)
    ref = run_once(plain, x, 3)
    assert count_cp['checkpoints'] == 0
    assert_same_run(ref, run_once(cp, x, 3), cp)
    assert count_cp['checkpoints'] > 0
    seg.set_checkpoint_segments([['stem', 'stage2.0.fuse'], ['stage3.0.branches.0.0',
                                                             'stage4.1.fuse']])
    assert_same_run(ref, run_once(seg, x, 3), seg)
    if frozen_stages >= 0:
        assert not any(p.requires_grad for p in plain.conv1.parameters())
        assert not plain.bn1.training


def test_with_cp_constructor_and_reentrant(single_thread):
    torch.manual_seed(0)
    plain = HRNet(TINY, norm_eval=False).double().train()
    randomise_bn(plain)
    cp = HRNet(TINY, norm_eval=False, with_cp=True, cp_use_reentrant=True).double().train()
    cp.load_state_dict(plain.state_dict())
    assert cp.with_cp and cp.layer1[0].with_cp and cp.stage3[1].fuse_unit.mode == 'full'
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64, requires_grad=True)
    assert_same_run(run_once(plain, x, 3), run_once(cp, x, 3), cp)


@pytest.mark.parametrize('change,key', [
    (lambda e: e.pop('stage3'), 'stage3'),
    (lambda e: e['stage2'].pop('num_modules'), 'num_modules'),
    (lambda e: e['stage4'].update(num_blocks=(1, 1)), "['stage4']['num_blocks']"),
    (lambda e: e['stage3'].update(num_channels=(4, 8)), "['stage3']['num_channels']"),
    (lambda e: e['stage2'].update(block='BASICS'), "['stage2']['block']"),
])
def test_bad_extra_is_refused_naming_the_key(change, key):
    extra = copy.deepcopy(TINY)
    change(extra)
    with pytest.raises(ValueError, match=key.replace('[', r'\[').replace(']', r'\]')):
        HRNet(extra)


def test_bad_arguments():
    with pytest.raises(TypeError, match='pretrained'):
        HRNet(TINY, pretrained=1)
    with pytest.raises(ValueError, match='pretrained or init_cfg'):
        HRNet(TINY, pretrained='a.pth', init_cfg=dict(type='Pretrained', checkpoint='b.pth'))
    with pytest.raises(NotImplementedError, match='conv_cfg'):
        HRNet(TINY, conv_cfg=dict(type='DCN'))
    with pytest.raises(ValueError, match='frozen_stages'):
        HRNet(TINY, frozen_stages=5)
    with pytest.raises(ValueError, match='NUM_BLOCKS'):
        from ckptzoo.models.backbones.hrnet import HRModule
        from ckptzoo.models.backbones.resnet import BasicBlock
        HRModule(2, BasicBlock, (1, ), [4, 8], (4, 8))
