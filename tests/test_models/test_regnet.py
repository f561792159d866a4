"""RegNet: mmdet 2.28.2's width rule (stage widths / blocks / groups as mmdet computes them),
state-dict keys, shapes, every checkpoint mode exact, freezing, bad arguments."""
import copy

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils import checkpoint as torch_cp

from ckptzoo.models import RegNet
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

# widths 8, 16, 32, 64 in 1, 1, 2, 2 blocks; groups 1 (group_w capped at the width), 2, 4, 8
TINY = dict(w0=8, wa=10.0, wm=2.0, group_w=8, depth=6, bot_mul=1.0)


def test_regnetx_400mf_widths_as_mmdet_computes_them():
    """w0=24, wa=24.48, wm=2.54, depth=22: the linear widths 24 + 24.48 i snap to 24 * 2.54^k
    with k = 0, 1 (i = 1, 2), 2 (i = 3..9), 3 (i = 10..21), rounded to multiples of 8: 24, 64,
    152, 392. Rounding to multiples of group_w=16 (ties to even) gives 32 (1.5 -> 2), 64,
    160 (9.5 -> 10) and 384 (24.5 -> 24)."""
    model = RegNet('regnetx_400mf')
    widths, num_stages = model.generate_regnet(24, 24.48, 2.54, 22)
    assert widths == [24] + [64] * 2 + [152] * 7 + [392] * 12 and num_stages == 4
    assert model.get_stages_from_blocks(widths) == ([24, 64, 152, 392], [1, 2, 7, 12])
    assert model.stage_widths == [32, 64, 160, 384] and model.stage_blocks == [1, 2, 7, 12]
    assert model.group_widths == [16] * 4 and model.depth == 22 and model.feat_dim == 384
    assert [getattr(model, f'layer{i}')[0].conv2.groups for i in range(1, 5)] == [2, 4, 10, 24]
    assert RegNet.quantize_float(24, 16) == 32 and RegNet.quantize_float(392, 16) == 384


def test_regnetx_3_2gf_widths_as_mmdet_computes_them():
    """w0=88, wa=26.31, wm=2.25, depth=25: 88 * 2.25^k to multiples of 8 gives 88 (2 blocks),
    200 (6), 448 (15), 1000 (2, 1002.4 -> 1000); to multiples of group_w=48: 96 (1.83 -> 2),
    192, 432 (9.33 -> 9), 1008 (20.83 -> 21), mmdet's FPN in_channels for it."""
    model = RegNet('regnetx_3.2gf')
    assert model.get_stages_from_blocks(model.generate_regnet(88, 26.31, 2.25, 25)[0]) == \
        ([88, 200, 448, 1000], [2, 6, 15, 2])
    assert model.stage_widths == [96, 192, 432, 1008] and model.stage_blocks == [2, 6, 15, 2]
    assert [getattr(model, f'layer{i}')[0].conv2.groups for i in range(1, 5)] == [2, 4, 9, 21]
    assert model.adjust_width_group([88, 200, 448, 1000], [1.0] * 4, [48] * 4) == \
        ([96, 192, 432, 1008], [48] * 4)
    # a bottleneck ratio below 1, and a group width capped at the bottleneck width
    assert model.adjust_width_group([64, 24], [0.5, 1.0], [48, 16]) == ([64, 32], [32, 16])


def test_state_dict_keys_are_mmdets():
    model = RegNet('regnetx_400mf')
    keys = list(model.state_dict())
    assert keys[:6] == ['conv1.weight', 'bn1.weight', 'bn1.bias', 'bn1.running_mean',
                        'bn1.running_var', 'bn1.num_batches_tracked']
    assert keys[6:10] == ['layer1.0.conv1.weight', 'layer1.0.bn1.weight', 'layer1.0.bn1.bias',
                          'layer1.0.bn1.running_mean']
    assert 'layer1.0.downsample.0.weight' in keys and 'layer1.0.downsample.1.weight' in keys
    assert 'layer4.11.conv3.weight' in keys and 'layer4.12.conv1.weight' not in keys
    assert not any(k.startswith(('stem.', 'maxpool', 'fc.')) for k in keys)
    sd = model.state_dict()
    assert sd['conv1.weight'].shape == (32, 3, 3, 3)
    assert sd['layer1.0.conv2.weight'].shape == (32, 16, 3, 3)  # 2 groups of 16
    assert sd['layer3.0.conv3.weight'].shape == (160, 160, 1, 1)  # no expansion
    assert sd['layer3.0.downsample.0.weight'].shape == (160, 64, 1, 1)
    # zero_init_residual (mmdet's default) zeroes every norm3, init_cfg Kaiming the convs
    assert all(not b.norm3.weight.any() for b in model.layer2)
    assert float(RegNet('regnetx_400mf', zero_init_residual=False).layer2[0].norm3.weight
                 .detach().min()) == 1


@pytest.mark.parametrize('arch,shapes', [
    ('regnetx_400mf', [(32, 8, 8), (64, 4, 4), (160, 2, 2), (384, 1, 1)]),
    (dict(w0=88, wa=26.31, wm=2.25, group_w=48, depth=25, bot_mul=1.0),  # mmdet's example
     [(96, 8, 8), (192, 4, 4), (432, 2, 2), (1008, 1, 1)]),
])
def test_output_shapes(arch, shapes):
    model = build_backbone(dict(type='RegNet', arch=arch)).eval()
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 32, 32))
    assert [tuple(o.shape[1:]) for o in outs] == shapes


def test_architecture_options():
    kw = dict(arch=TINY, stem_channels=6, norm_eval=False)
    x = torch.rand(2, 3, 32, 32)
    model = RegNet(**kw, strides=(1, 2, 1, 2), dilations=(1, 1, 2, 1), out_indices=(1, 3),
                   style='caffe', avg_down=True).eval()
    assert model.conv1.out_channels == 6 and model.layer1[0].conv1.in_channels == 6
    assert model.layer2[0].conv1.stride == (2, 2) and model.layer2[0].conv2.stride == (1, 1)
    assert isinstance(model.layer2[0].downsample[0], torch.nn.AvgPool2d)
    assert model.layer3[0].conv2.dilation == (2, 2)
    # mmdet's ResLayer puts the average pool in front even at stride 1 (a 1x1 pool), so the
    # downsample conv's key is ``downsample.1`` in every avg_down stage
    assert isinstance(model.layer3[0].downsample[0], torch.nn.AvgPool2d)
    assert model.layer3[0].downsample[0].kernel_size == 1
    with torch.no_grad():
        assert [tuple(o.shape[1:]) for o in model(x)] == [(16, 8, 8), (64, 4, 4)]
    # deep_stem and base_channels are kept and change nothing, as in mmdet
    a, b = RegNet(**kw, deep_stem=True, base_channels=8), RegNet(**kw)
    assert a.deep_stem and a.base_channels == 8
    assert {k: v.shape for k, v in a.state_dict().items()} == \
        {k: v.shape for k, v in b.state_dict().items()}


def test_frozen_stages_and_norm_eval():
    model = RegNet(TINY, frozen_stages=1, norm_eval=False).train()
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(('conv1.', 'bn1.', 'layer1.')) for n in frozen)
    assert all(p.requires_grad for n, p in model.named_parameters() if n.startswith('layer2.'))
    assert not model.bn1.training and not model.layer1[0].bn1.training
    assert model.layer2[0].bn1.training
    model = RegNet(TINY, norm_eval=True).train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


def _tiny(frozen_stages, **kwargs):
    torch.manual_seed(3)
    model = RegNet(TINY, frozen_stages=frozen_stages, norm_eval=False, zero_init_residual=False,
                   **kwargs).train()
    randomise_bn(model)
    return model


def _counting(monkeypatch):
    calls = dict(checkpoint=0, offload=0)
    real_cp, real_offload = torch_cp.checkpoint, torch.autograd.graph.save_on_cpu

    def counting_cp(fn, *args, **kwargs):
        calls['checkpoint'] += 1
        return real_cp(fn, *args, **kwargs)

    def counting_offload(*args, **kwargs):
        calls['offload'] += 1
        return real_offload(*args, **kwargs)

    monkeypatch.setattr(torch_cp, 'checkpoint', counting_cp)
    monkeypatch.setattr(torch.autograd.graph, 'save_on_cpu', counting_offload)
    return calls


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
def test_every_mode_equals_plain(monkeypatch, mode, frozen_stages):
    """Outputs, input and parameter gradients within 1e-6, BN buffers bit-equal; every
    trainable unit (stem, each block) runs the mode."""
    plain = _tiny(frozen_stages)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert list(plan) == ['stem', 'layer1.0', 'layer2.0', 'layer3.0', 'layer3.1', 'layer4.0',
                          'layer4.1']
    assert set(plan.values()) == {mode} and model.with_cp
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    calls = _counting(monkeypatch)
    got = run_once(model, x, seed=5)
    assert_same_run(ref, got, model)
    ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
    assert ran >= len(plan) - (2 if frozen_stages >= 0 else 0), (ran, plan)


@pytest.mark.parametrize('reentrant,frozen_stages', [(False, -1), (True, -1), (False, 1)])
def test_with_cp_equals_plain(monkeypatch, reentrant, frozen_stages):
    """mmdet's ``with_cp=True`` (per stage too), with either torch implementation; reentrant
    backward runs other kernels (~1e-6 relative, see test_resnet.py): compared in float64."""
    dtype = torch.float64 if reentrant else torch.float32
    plain = _tiny(frozen_stages).to(dtype)
    model = _tiny(frozen_stages, with_cp=True, cp_use_reentrant=reentrant).to(dtype)
    model.load_state_dict(plain.state_dict())
    assert model.with_cp and model.layer3[1].with_cp and not plain.with_cp
    x = torch.randn(2, 3, 32, 32, dtype=dtype, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    calls = _counting(monkeypatch)
    assert_same_run(ref, run_once(model, x, seed=5), model)
    assert calls['checkpoint'] >= 5
    per_stage = RegNet(TINY, with_cp=(False, True, False, True))
    assert per_stage.checkpoint_plan() == {
        'stem': None, 'layer1.0': None, 'layer2.0': 'full', 'layer3.0': None,
        'layer3.1': None, 'layer4.0': 'full', 'layer4.1': 'full'}


def test_segment_across_stages_equals_plain():
    plain = _tiny(-1, out_indices=(1, 2, 3))
    model = copy.deepcopy(plain)
    model.set_checkpoint_segments([['layer1.0', 'layer3.1']])
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(arch='regnetx_nope'), ValueError,
     "RegNet arch 'regnetx_nope' is not one of the arch_settings: regnetx_400mf, "),
    (dict(arch=5), ValueError, 'Expect "arch" to be either a string or a dict'),
    (dict(arch=dict(w0=8, wa=10.0, wm=2.0, depth=6)), ValueError, 'lacks group_w, bot_mul'),
    (dict(arch=dict(TINY, w0=12)), ValueError, 'w0 > 0 a multiple of 8'),
    (dict(arch=dict(TINY, wm=1.0)), ValueError, 'wm > 1'),
    (dict(arch=dict(TINY, wm=1.5, wa=8.0, w0=8, depth=8)), ValueError, 'gives 5 stages'),
    (dict(arch=TINY, strides=(2, 2, 2)), ValueError, 'strides and dilations need 4'),
    (dict(arch=TINY, out_indices=(4, )), ValueError, 'out_indices'),
    (dict(arch=TINY, style='tf'), ValueError, 'style'),
    (dict(arch=TINY, frozen_stages=5), ValueError, 'frozen_stages'),
    (dict(arch=TINY, dcn=dict(type='DCNv2'), stage_with_dcn=(True, )), ValueError,
     r'stage_with_dcn needs 4 flags \(num_stages\) with dcn'),
    (dict(arch=TINY, pretrained='a.pth', init_cfg=dict(type='Pretrained', checkpoint='b')),
     ValueError, 'give pretrained or init_cfg, not both'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        RegNet(**kwargs)


def test_pretrained_becomes_init_cfg():
    with pytest.warns(Warning):
        model = RegNet(TINY, pretrained='open-mmlab://regnetx_3.2gf')
    assert model.init_cfg == dict(type='Pretrained', checkpoint='open-mmlab://regnetx_3.2gf')
