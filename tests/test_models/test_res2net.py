"""Res2Net: mmdet 2.28.2's keys, shapes and multi-scale blocks ('stage' / 'normal'), Res2Layer's
downsample, every checkpoint mode exact, freezing, plugins at the block's width, bad arguments
(the stem / style mmdet silently forces refused when set otherwise), DCN in each slice's conv."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import Res2Net
from ckptzoo.models.backbones.res2net import Bottle2neck, Res2Layer
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

TINY = dict(depth=50, base_channels=8, scales=4, base_width=4)


def _bn_keys(prefix):
    return [f'{prefix}.{n}' for n in ('weight', 'bias', 'running_mean', 'running_var',
                                      'num_batches_tracked')]


# mmdet 2.28.2's Res2Net(depth=50, scales=4, base_width=26), block layer2.0, in order
MMDET_BLOCK_KEYS = (['conv1.weight'] + _bn_keys('bn1') + ['conv3.weight'] + _bn_keys('bn3')
                    + ['downsample.1.weight'] + _bn_keys('downsample.2')
                    + [f'convs.{i}.weight' for i in range(3)]
                    + sum((_bn_keys(f'bns.{i}') for i in range(3)), []))


def test_keys_and_shapes_are_mmdets():
    model = build_backbone(dict(type='Res2Net', depth=101, scales=4, base_width=26))
    sd = model.state_dict()
    assert list(sd)[:3] == ['stem.0.weight', 'stem.1.weight', 'stem.1.bias']
    assert [k[len('layer2.0.'):] for k in sd if k.startswith('layer2.0.')] == MMDET_BLOCK_KEYS
    assert sd['stem.6.weight'].shape == (64, 32, 3, 3)
    # width floor(128 * 26 / 64) = 52 per scale at layer2
    assert sd['layer2.0.conv1.weight'].shape == (208, 256, 1, 1)
    assert sd['layer2.0.convs.2.weight'].shape == (52, 52, 3, 3)
    assert sd['layer2.0.conv3.weight'].shape == (512, 208, 1, 1)
    assert sd['layer1.0.downsample.1.weight'].shape == (256, 64, 1, 1)
    assert len(model.layer3) == 23 and model.feat_dim == 2048
    assert all(not b.norm3.weight.any() for b in model.layer3)  # zero_init_residual
    # the first block of each stage is a 'stage' block; a strided one pools its last slice
    assert [model.layer2[0].stage_type, model.layer2[1].stage_type] == ['stage', 'normal']
    assert not hasattr(model.layer1[0], 'pool') and model.layer2[0].pool.stride == 2
    assert model.layer2[0].convs[0].stride == (2, 2)
    with torch.no_grad():
        outs = Res2Net(depth=50).eval()(torch.rand(1, 3, 32, 32))
    assert [tuple(o.shape[1:]) for o in outs] == [(256, 8, 8), (512, 4, 4), (1024, 2, 2),
                                                  (2048, 1, 1)]


def _reference(block, x):
    """The Res2Net block written out: slices, hierarchical 3x3 convs, last slice passed on."""
    out = F.relu(block.bn1(block.conv1(x)))
    spx = torch.split(out, block.width, 1)
    parts, sp = [], None
    for i in range(block.scales - 1):
        inp = spx[i] if sp is None or block.stage_type == 'stage' else sp + spx[i]
        sp = F.relu(block.bns[i](block.convs[i](inp)))
        parts.append(sp)
    last = spx[-1]
    if block.stage_type == 'stage' and block.conv2_stride != 1:
        last = F.avg_pool2d(last, 3, block.conv2_stride, 1)
    out = block.bn3(block.conv3(torch.cat(parts + [last], 1)))
    identity = x if block.downsample is None else block.downsample(x)
    return F.relu(out + identity)


@pytest.mark.parametrize('stride,stage_type', [(1, 'normal'), (1, 'stage'), (2, 'stage')])
def test_bottle2neck_as_written_out(stride, stage_type):
    torch.manual_seed(0)
    layer = Res2Layer(Bottle2neck, 32, 8, 2, stride=stride, scales=3, base_width=8,
                      base_channels=8)
    block = layer[0] if stage_type == 'stage' else layer[1]
    randomise_bn(layer)
    layer.eval()
    assert block.stage_type == stage_type and block.width == 8 and len(block.convs) == 2
    x = torch.randn(2, 32, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(block(x), _reference(block, x), rtol=0, atol=1e-6)
    # Res2Layer always pools before the downsample conv (a 1x1 pool at stride 1)
    assert layer[0].downsample is None if stride == 1 else \
        layer[0].downsample[0].kernel_size == stride
    assert Res2Layer(Bottle2neck, 16, 8, 1)[0].downsample[0].kernel_size == 1


def _tiny(frozen_stages, **kwargs):
    torch.manual_seed(3)
    model = Res2Net(**TINY, frozen_stages=frozen_stages, norm_eval=False,
                    zero_init_residual=False, **kwargs).train()
    randomise_bn(model)
    return model


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
def test_every_mode_equals_plain(mode, frozen_stages):
    plain = _tiny(frozen_stages)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert list(plan)[:3] == ['stem', 'layer1.0', 'layer1.1'] and len(plan) == 17
    assert model.with_cp
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


@pytest.mark.parametrize('reentrant,frozen_stages', [(False, -1), (True, -1), (False, 1)])
def test_with_cp_equals_plain(count_cp, reentrant, frozen_stages):
    """Float64 for the reentrant implementation (other backward kernels, see test_resnet.py)."""
    dtype = torch.float64 if reentrant else torch.float32
    plain = _tiny(frozen_stages).to(dtype)
    model = _tiny(frozen_stages, with_cp=True, cp_use_reentrant=reentrant).to(dtype)
    model.load_state_dict(plain.state_dict())
    assert model.with_cp and model.layer2[0].with_cp and not plain.with_cp
    x = torch.randn(2, 3, 32, 32, dtype=dtype, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    assert_same_run(ref, run_once(model, x, seed=5), model)
    assert count_cp['checkpoints'] >= 17 - (4 if frozen_stages == 1 else 0)


def test_segment_across_stages_equals_plain():
    plain = _tiny(-1, out_indices=(0, 3))
    model = copy.deepcopy(plain)
    model.set_checkpoint_segments([['stem', 'layer1.2'], ['layer2.0', 'layer4.2']])
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_frozen_stages_and_norm_eval():
    model = Res2Net(**TINY, frozen_stages=2, norm_eval=False).train()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(('stem.', 'layer1.', 'layer2.')) for n in frozen)
    assert 'layer2.3.bns.2.weight' in frozen
    assert all(p.requires_grad for n, p in model.named_parameters() if n.startswith('layer3.'))
    assert not model.layer2[0].bns[0].training and model.layer3[0].bns[0].training
    model = Res2Net(**TINY, norm_eval=True).train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


def test_plugins_see_the_block_width():
    model = Res2Net(**TINY, plugins=[
        dict(cfg=dict(type='ContextBlock', ratio=1. / 4), position='after_conv2'),
        dict(cfg=dict(type='NonLocal2d'), position='after_conv1',
             stages=(False, False, True, False))])
    block = model.layer3[0]
    assert block.nonlocal_block.in_channels == block.context_block.in_channels == 64
    assert not hasattr(model.layer2[0], 'nonlocal_block')
    # mmdet's state-dict order: the plugins come before pool / convs / bns
    keys = [k for k in block.state_dict() if not k.startswith(('conv1', 'bn1', 'conv3', 'bn3'))]
    assert keys[0].startswith('downsample.') and keys[-1].startswith('bns.2.')
    assert keys.index('context_block.conv_mask.weight') < keys.index('convs.0.weight')
    with torch.no_grad():
        assert [o.shape[1] for o in model.eval()(torch.rand(1, 3, 32, 32))] == [32, 64, 128, 256]


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=200), ValueError, 'invalid depth 200 for Res2Net: allowed are 50, 101, 152'),
    (dict(depth=50, scales=1), ValueError, 'Res2Net scales must be an int >= 2, got 1'),
    (dict(depth=50, base_width=0), ValueError, 'Res2Net base_width must be an int >= 1'),
    (dict(depth=50, style='caffe'), ValueError,
     "Res2Net is built with style='pytorch' only .mmdet ignores other values., got style='caffe'"),
    (dict(depth=50, deep_stem=False), ValueError, 'deep_stem=True only'),
    (dict(depth=50, avg_down=False), ValueError, 'avg_down=True only'),
    (dict(depth=50, out_indices=(5, )), ValueError, 'out_indices'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        Res2Net(**kwargs)
    with pytest.raises(ValueError, match="stage_type must be 'normal' or 'stage', got 'x'"):
        Bottle2neck(16, 4, stage_type='x')


@pytest.mark.parametrize('dcn', ['DCN', 'DCNv2'])
def test_dcn_in_every_slice_conv_is_exact(dcn):
    """mmdet's Res2Net builds each slice's 3x3 conv as the stage's DCN (VFNet's r2_101 configs;
    compared with mmdet 2.28.2 on the same weights: outputs and every gradient equal)."""
    kw = dict(depth=50, base_channels=8, scales=4, base_width=26, norm_eval=False,
              zero_init_residual=False,
              dcn=dict(type=dcn, deform_groups=1, fallback_on_stride=False),
              stage_with_dcn=(False, True, True, True))
    torch.manual_seed(0)
    plain = Res2Net(**kw)
    kind = 'DeformConv2dPack' if dcn == 'DCN' else 'ModulatedDeformConv2dPack'
    assert type(plain.layer1[0].convs[0]).__name__ == 'Conv2d'
    assert all(type(c).__name__ == kind for stage in (plain.layer2, plain.layer4)
               for block in stage for c in block.convs)
    keys = plain.state_dict().keys()
    assert 'layer2.0.convs.2.conv_offset.weight' in keys and 'layer2.0.conv2.weight' not in keys
    with torch.no_grad():  # offsets that move: a zero offset would hide a wrong sampling
        for name, p in plain.named_parameters():
            if 'conv_offset' in name:
                p.normal_(0, 0.05)
    model = copy.deepcopy(plain)
    model.set_checkpoint_plan({'*': 'full'})
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)
