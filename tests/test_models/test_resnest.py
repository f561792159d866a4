"""ResNeSt: mmdet 2.28.2's keys, shapes and split attention, every checkpoint mode exact,
freezing, plugins at the grouped width, bad arguments (DCN refused by name)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import ResNeSt
from ckptzoo.models.backbones.resnest import RSoftmax, SplitAttentionConv2d
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

TINY = dict(depth=50, base_channels=8, stem_channels=8)
GCB = dict(type='ContextBlock', ratio=1. / 4)

# mmdet 2.28.2's ResNeSt(depth=50, stem_channels=64).state_dict(), block layer2.0, in order
MMDET_BLOCK_KEYS = [
    'conv1.weight', 'bn1.weight', 'bn1.bias', 'bn1.running_mean', 'bn1.running_var',
    'bn1.num_batches_tracked', 'conv2.conv.weight', 'conv2.bn0.weight', 'conv2.bn0.bias',
    'conv2.bn0.running_mean', 'conv2.bn0.running_var', 'conv2.bn0.num_batches_tracked',
    'conv2.fc1.weight', 'conv2.fc1.bias', 'conv2.bn1.weight', 'conv2.bn1.bias',
    'conv2.bn1.running_mean', 'conv2.bn1.running_var', 'conv2.bn1.num_batches_tracked',
    'conv2.fc2.weight', 'conv2.fc2.bias', 'conv3.weight', 'bn3.weight', 'bn3.bias',
    'bn3.running_mean', 'bn3.running_var', 'bn3.num_batches_tracked', 'downsample.1.weight',
    'downsample.2.weight', 'downsample.2.bias', 'downsample.2.running_mean',
    'downsample.2.running_var', 'downsample.2.num_batches_tracked']


def test_keys_and_shapes_are_mmdets():
    model = build_backbone(dict(type='ResNeSt', depth=50, stem_channels=64, radix=2,
                                reduction_factor=4))
    sd = model.state_dict()
    assert list(sd)[:3] == ['stem.0.weight', 'stem.1.weight', 'stem.1.bias']
    assert [k[len('layer2.0.'):] for k in sd if k.startswith('layer2.0.')] == MMDET_BLOCK_KEYS
    assert sd['stem.0.weight'].shape == (32, 3, 3, 3) and sd['stem.6.weight'].shape == (64, 32, 3, 3)
    # width 128 at layer2, radix 2: a 2-group conv to 256, attention 128 -> 64 -> 256
    assert sd['layer2.0.conv2.conv.weight'].shape == (256, 64, 3, 3)
    assert sd['layer2.0.conv2.fc1.weight'].shape == (64, 128, 1, 1)
    assert sd['layer2.0.conv2.fc2.weight'].shape == (256, 64, 1, 1)
    # the hidden width is at least 32: layer1's 64 * 2 // 4 = 32
    assert sd['layer1.0.conv2.fc1.weight'].shape == (32, 64, 1, 1)
    assert sd['layer1.0.downsample.1.weight'].shape == (256, 64, 1, 1)
    assert not any(k.endswith('bn2.weight') for k in sd)
    assert len([k for k in sd if k.endswith('conv3.weight')]) == 16
    # strided blocks pool after a stride-1 split-attention conv (avg_down_stride)
    block = model.layer2[0]
    assert block.conv2.conv.stride == (1, 1) and block.avd_layer.stride == 2
    assert not hasattr(model.layer2[1], 'avd_layer') and not hasattr(model.layer1[0], 'avd_layer')
    assert all(not b.norm3.weight.any() for b in model.layer3)  # zero_init_residual
    with torch.no_grad():
        outs = model.eval()(torch.rand(1, 3, 64, 64))
    assert [tuple(o.shape[1:]) for o in outs] == [(256, 16, 16), (512, 8, 8), (1024, 4, 4),
                                                  (2048, 2, 2)]


def test_depths_groups_and_stride_options():
    assert [len(getattr(ResNeSt(depth=200, base_channels=4, stem_channels=4), f'layer{i}'))
            for i in range(1, 5)] == [3, 24, 36, 3]
    model = ResNeSt(**TINY, groups=2, base_width=8, radix=4, reduction_factor=2)
    conv2 = model.layer3[0].conv2
    # width floor(32 * 8 / 8) * 2 = 64; 2 * 4 groups; hidden max(64 * 4 // 2, 32) = 128
    assert conv2.conv.groups == 8 and conv2.conv.out_channels == 256
    assert conv2.fc1.groups == 2 and conv2.fc1.out_channels == 128
    model = ResNeSt(**TINY, avg_down_stride=False, style='caffe')
    assert not hasattr(model.layer2[0], 'avd_layer')
    assert model.layer2[0].conv1.stride == (2, 2) and model.layer2[0].conv2.conv.stride == (1, 1)
    model = ResNeSt(**TINY, avg_down_stride=False)
    assert model.layer2[0].conv2.conv.stride == (2, 2)


def test_split_attention_is_a_softmax_over_radix():
    torch.manual_seed(0)
    r = RSoftmax(radix=3, groups=2)
    x = torch.randn(2, 2 * 3 * 5, 1, 1)
    y = r(x).view(2, 3, 2, 5)  # laid out (radix, group, c) after the transpose
    torch.testing.assert_close(y.sum(dim=1), torch.ones(2, 2, 5))
    torch.testing.assert_close(RSoftmax(1, 2)(x), torch.sigmoid(x))
    sa = SplitAttentionConv2d(4, 4, 3, padding=1, radix=2).eval()
    with torch.no_grad():
        for m in sa.modules():
            if isinstance(m, _BatchNorm):
                m.running_mean.uniform_(-.5, .5)
        inp = torch.randn(2, 4, 6, 6)
        feats = F.relu(sa.norm0(sa.conv(inp))).view(2, 2, 4, 6, 6)
        gap = F.relu(sa.norm1(sa.fc1(feats.sum(1).mean((2, 3), keepdim=True))))
        att = F.softmax(sa.fc2(gap).view(2, 2, 4, 1, 1), dim=1)
        torch.testing.assert_close(sa(inp), (att * feats).sum(1))


def _tiny(frozen_stages, **kwargs):
    torch.manual_seed(3)
    model = ResNeSt(**TINY, frozen_stages=frozen_stages, norm_eval=False,
                    zero_init_residual=False, **kwargs).train()
    randomise_bn(model)
    return model


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
def test_every_mode_equals_plain(mode, frozen_stages):
    plain = _tiny(frozen_stages, groups=2, base_width=4)
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
    plain = _tiny(-1, out_indices=(1, 2, 3))
    model = copy.deepcopy(plain)
    model.set_checkpoint_segments([['stem', 'layer2.1'], ['layer3.0', 'layer4.2']])
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_frozen_stages_and_norm_eval():
    model = ResNeSt(**TINY, frozen_stages=1, norm_eval=False).train()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(('stem.', 'layer1.')) for n in frozen)
    assert any(n.startswith('layer1.0.conv2.fc1') for n in frozen)
    assert all(p.requires_grad for n, p in model.named_parameters() if n.startswith('layer2.'))
    assert not model.stem[1].training and not model.layer1[0].conv2.bn0.training
    assert model.layer2[0].conv2.bn1.training
    model = ResNeSt(**TINY, norm_eval=True).train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


def test_plugins_see_the_split_attention_width():
    model = ResNeSt(**TINY, groups=2, base_width=8,
                    plugins=[dict(cfg=dict(type='NonLocal2d'), position='after_conv2'),
                             dict(cfg=GCB, position='after_conv3', stages=(False, True, True, True))])
    block = model.layer3[0]
    assert block.nonlocal_block.in_channels == block.conv2.channels == 64
    assert block.context_block.in_channels == 128 and not hasattr(model.layer1[0], 'context_block')
    assert 'layer2.0.context_block.conv_mask.weight' in model.state_dict()
    with torch.no_grad():
        assert [o.shape[1] for o in model.eval()(torch.rand(1, 3, 32, 32))] == [32, 64, 128, 256]


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=34), ValueError, 'invalid depth 34 for ResNeSt: allowed are 50, 101, 152, 200'),
    (dict(depth=50, radix=0), ValueError, 'ResNeSt radix must be an int >= 1, got 0'),
    (dict(depth=50, groups=1.5), ValueError, 'ResNeSt groups must be an int'),
    (dict(depth=50, reduction_factor=True), ValueError, 'ResNeSt reduction_factor'),
    (dict(depth=50, dcn=dict(type='DCN', deform_groups=1, fallback_on_stride=False)),
     NotImplementedError, 'ResNeSt dcn .deformable convs. is not supported'),
    (dict(depth=50, stage_with_dcn=(False, True, True, True)), NotImplementedError,
     'ResNeSt dcn'),
    (dict(depth=50, deep_stem=False), TypeError, 'deep_stem'),
    (dict(depth=50, out_indices=(4, )), ValueError, 'out_indices'),
    (dict(depth=50, frozen_stages=5), ValueError, 'frozen_stages'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        ResNeSt(**kwargs)
    with pytest.raises(NotImplementedError, match='SplitAttentionConv2d dcn'):
        SplitAttentionConv2d(4, 4, 3, dcn=dict(type='DCNv2'))
