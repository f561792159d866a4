"""ResNet / ResNeXt / RegNet with deformable convs (mmdet 2.28.2's ``dcn`` / ``stage_with_dcn``):
which conv2 becomes a DCN, keys and shapes as mmdet's, the refusals, freezing, and every
checkpoint mode exact with the DCN inside the block's unit (offsets made non-zero)."""
import copy

import pytest
import torch
import torch.nn as nn
from torch.utils import checkpoint as torch_cp

from ckptzoo.models import RegNet
from ckptzoo.ops import DeformConv2dPack, ModulatedDeformConv2dPack
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

DCN = dict(type='DCN', deform_groups=1, fallback_on_stride=False)
DCNV2 = dict(type='DCNv2', deform_groups=1, fallback_on_stride=False)
C3_C5 = (False, True, True, True)
PACKS = (DeformConv2dPack, ModulatedDeformConv2dPack)
TINY_REGNET = dict(w0=8, wa=10.0, wm=2.0, group_w=8, depth=6, bot_mul=1.0)


def _dcn_names(model):
    return [n for n, m in model.named_modules() if isinstance(m, PACKS)]


@pytest.mark.parametrize('dcn,pack,offsets', [(DCN, DeformConv2dPack, 18),
                                              (DCNV2, ModulatedDeformConv2dPack, 27)])
def test_resnet50_conv2_of_the_marked_stages_keys_as_mmdet(dcn, pack, offsets):
    model = build_backbone(dict(type='ResNet', depth=50, dcn=dcn, stage_with_dcn=C3_C5))
    names = _dcn_names(model)
    assert len(names) == 4 + 6 + 3 and all(n.endswith('.conv2') for n in names)
    assert not any(n.startswith('layer1.') for n in names)
    assert all(type(model.get_submodule(n)) is pack for n in names)
    sd = model.state_dict()
    keys = [k for k in sd if k.startswith('layer2.0.conv2')]
    assert keys == ['layer2.0.conv2.weight', 'layer2.0.conv2.conv_offset.weight',
                    'layer2.0.conv2.conv_offset.bias']
    assert sd['layer2.0.conv2.weight'].shape == (128, 128, 3, 3)
    assert sd['layer3.2.conv2.conv_offset.weight'].shape == (offsets, 256, 3, 3)
    assert model.layer2[0].conv2.stride == (2, 2) and model.layer2[0].conv2.conv_offset.stride \
        == (2, 2)
    # the offset convs start at zero (ResNet's kaiming init leaves them), so the DCN starts
    # as the plain conv (v2: weighted 0.5)
    assert all(not sd[k].any() for k in sd if 'conv_offset' in k)
    plain = build_backbone(dict(type='ResNet', depth=50))
    assert [k for k in sd if 'conv_offset' not in k] == list(plain.state_dict())


def test_resnext_and_regnet_dcn_is_grouped_as_mmdet():
    model = build_backbone(dict(type='ResNeXt', depth=101, groups=32, base_width=4,
                                dcn=dict(DCN, deform_groups=2), stage_with_dcn=C3_C5))
    conv = model.layer3[5].conv2
    assert type(conv) is DeformConv2dPack and conv.groups == 32 and conv.deform_groups == 2
    assert conv.weight.shape == (512, 16, 3, 3) and conv.conv_offset.weight.shape == \
        (36, 512, 3, 3)
    assert len(_dcn_names(model)) == 4 + 23 + 3
    model = build_backbone(dict(type='RegNet', arch='regnetx_3.2gf', dcn=DCNV2,
                                stage_with_dcn=C3_C5))
    conv = model.layer2[0].conv2
    assert type(conv) is ModulatedDeformConv2dPack and conv.groups == 4
    assert conv.weight.shape == (192, 48, 3, 3) and conv.bias is None
    assert len(_dcn_names(model)) == 6 + 15 + 2


def test_dcn_flags():
    """``stage_with_dcn`` without ``dcn`` is ignored, as is ``dcn`` without a marked stage
    (mmdet); ``fallback_on_stride`` keeps the strided conv2s plain; caffe style puts the
    stride on conv1, so its conv2 stays deformable; ``deformable_groups`` is mmcv's alias."""
    cfg = dict(type='ResNet', depth=50)
    assert not _dcn_names(build_backbone(dict(cfg, stage_with_dcn=C3_C5)))
    assert not _dcn_names(build_backbone(dict(cfg, dcn=DCN)))
    model = build_backbone(dict(cfg, dcn=dict(DCN, fallback_on_stride=True),
                                stage_with_dcn=C3_C5))
    assert [type(getattr(model, f'layer{i}')[0].conv2) for i in (2, 3, 4)] == [nn.Conv2d] * 3
    assert len(_dcn_names(model)) == 10
    model = build_backbone(dict(cfg, style='caffe', dcn=dict(DCN, fallback_on_stride=True),
                                stage_with_dcn=C3_C5))
    assert len(_dcn_names(model)) == 13
    with pytest.warns(DeprecationWarning):
        model = build_backbone(dict(cfg, dcn=dict(type='DCNv2', deformable_groups=2),
                                    stage_with_dcn=C3_C5))
    assert model.layer4[0].conv2.deform_groups == 2


@pytest.mark.parametrize('cfg,error,match', [
    (dict(type='ResNet', depth=18, dcn=DCN, stage_with_dcn=C3_C5), NotImplementedError,
     r'dcn needs Bottleneck blocks .*BasicBlock \(ResNet-18/34\) refuses it'),
    (dict(type='ResNet', depth=50, dcn=DCN, stage_with_dcn=(True, True)), ValueError,
     r'stage_with_dcn needs 4 flags \(num_stages\) with dcn'),
    (dict(type='ResNet', depth=50, num_stages=3, out_indices=(0, 1, 2), dcn=DCN,
          stage_with_dcn=C3_C5), ValueError,
     'stage_with_dcn needs 3 flags'),
    (dict(type='ResNet', depth=50, conv_cfg=dict(type='ConvWS'), dcn=DCN,
          stage_with_dcn=C3_C5), ValueError, 'conv_cfg must be None for DCN'),
    (dict(type='ResNet', depth=50, dcn='DCN', stage_with_dcn=C3_C5), ValueError,
     'dcn must be None or a conv layer config dict'),
    (dict(type='ResNet', depth=50, dcn=dict(type='DCNv3'), stage_with_dcn=C3_C5),
     NotImplementedError, "conv layer type 'DCNv3' is not supported"),
    (dict(type='ResNeXt', depth=50, groups=32, dcn=DCN, stage_with_dcn=(True, )), ValueError,
     'stage_with_dcn needs 4 flags'),
    (dict(type='RegNet', arch='regnetx_400mf', dcn=DCN, stage_with_dcn=(False, True)),
     ValueError, 'stage_with_dcn needs 4 flags'),
])
def test_refused_as_mmdet_refuses(cfg, error, match):
    with pytest.raises(error, match=match):
        build_backbone(cfg)


def test_frozen_stages_freeze_the_offsets():
    model = build_backbone(dict(type='ResNet', depth=50, base_channels=4, dcn=DCNV2,
                                stage_with_dcn=(True, True, False, False), frozen_stages=1,
                                norm_eval=False)).train()
    assert not any(p.requires_grad for p in model.layer1.parameters())
    assert all(p.requires_grad for p in model.layer2[0].conv2.parameters())


def _offsets(model, seed=4):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, PACKS):
                m.conv_offset.weight.copy_(torch.randn(m.conv_offset.weight.shape,
                                                       generator=gen) * 0.1)
                m.conv_offset.bias.copy_(torch.randn(m.conv_offset.bias.shape,
                                                     generator=gen) * 0.3)
    return model


def _tiny(kind, frozen_stages, dtype=torch.float32, **kwargs):
    torch.manual_seed(3)
    common = dict(frozen_stages=frozen_stages, norm_eval=False, zero_init_residual=False,
                  stage_with_dcn=(True, True, False, True), **kwargs)
    if kind == 'resnet-dcn':
        cfg = dict(type='ResNet', depth=50, base_channels=4, dcn=DCN, **common)
    elif kind == 'resnext-dcnv2':
        cfg = dict(type='ResNeXt', depth=50, base_channels=4, groups=2, base_width=2,
                   dcn=dict(DCNV2, deform_groups=2), **common)
    else:
        cfg = dict(type='RegNet', arch=TINY_REGNET, dcn=DCNV2, **common)
    model = build_backbone(cfg).train()
    randomise_bn(model)
    return _offsets(model).to(dtype)


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
@pytest.mark.parametrize('kind', ['resnet-dcn', 'resnext-dcnv2', 'regnet-dcnv2'])
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 1])
def test_every_mode_equals_plain(monkeypatch, kind, mode, frozen_stages):
    """Outputs, input and every parameter gradient (offset convs included) within 1e-6, BN
    buffers bit-equal; the DCN runs inside its block's unit."""
    plain = _tiny(kind, frozen_stages)
    model = copy.deepcopy(plain)
    plan = model.set_checkpoint_plan({'*': mode})
    assert set(plan.values()) == {mode} and model.with_cp
    x = torch.randn(2, 3, 64, 64, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    assert any(ref[2][n + '.conv_offset.weight'].abs().sum() > 0 for n in _dcn_names(plain)
               if not n.startswith('layer1.') or frozen_stages < 1)
    calls = _counting(monkeypatch)
    got = run_once(model, x, seed=5)
    assert_same_run(ref, got, model)
    ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
    assert ran >= len(plan) - (1 + len(model.layer1) if frozen_stages >= 0 else 0), (ran, plan)


@pytest.mark.parametrize('kind', ['resnet-dcn', 'regnet-dcnv2'])
@pytest.mark.parametrize('reentrant', [False, True])
def test_with_cp_equals_plain(kind, reentrant):
    """mmdet's ``with_cp=True``, either torch implementation, float64."""
    plain = _tiny(kind, -1, torch.float64)
    model = _tiny(kind, -1, torch.float64, with_cp=True, cp_use_reentrant=reentrant)
    model.load_state_dict(plain.state_dict())
    assert model.with_cp and not plain.with_cp
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_regnet_dcn_is_a_regnet():
    model = RegNet(TINY_REGNET, dcn=DCN, stage_with_dcn=(False, False, True, True))
    assert model.dcn == DCN and model.stage_with_dcn == (False, False, True, True)
    assert [n.split('.')[0] for n in _dcn_names(model)] == ['layer3', 'layer3', 'layer4',
                                                            'layer4']


def test_optimizer_sees_the_packs_as_dcn():
    from ckptzoo.runner.optimizer_constructor import _is_dcn
    assert _is_dcn(DeformConv2dPack(4, 4, 3)) and _is_dcn(ModulatedDeformConv2dPack(4, 4, 3))


@pytest.mark.parametrize('mode,recomputed', [('full', 13), ('selective', 0)])
def test_selective_keeps_the_deformable_conv_outputs(mode, recomputed):
    """``'selective'`` keeps a DCN's output as a convolution's (torchvision's op is the most
    expensive of the block); ``'full'`` recomputes all 13."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.torchvision.deform_conv2d.default:
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    model = build_backbone(dict(type='ResNet', depth=50, base_channels=4, dcn=DCNV2,
                                stage_with_dcn=C3_C5, norm_eval=False)).train()
    model.set_checkpoint_plan({'*': mode})
    outs = model(torch.randn(2, 3, 64, 64))
    with Count():
        sum(o.sum() for o in outs).backward()
    assert Count.calls == recomputed
