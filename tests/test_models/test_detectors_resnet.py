"""DetectoRS_ResNet / DetectoRS_ResNeXt: mmdet 2.28.2's keys and shapes, SAC stages,
``output_img``, ``rfp_forward`` with its ``rfp_conv``, every checkpoint mode exact in both
passes, freezing, loading a plain ResNet's weights, bad arguments."""
import copy
import hashlib

import pytest
import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import DetectoRS_ResNet, DetectoRS_ResNeXt, ResNet
from ckptzoo.models.utils import ConvAWS2d, SAConv2d
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

SAC = dict(type='SAC', use_deform=True)
TINY = dict(depth=50, base_channels=8, conv_cfg=dict(type='ConvAWS'), sac=SAC,
            stage_with_sac=(False, True, True, True), norm_eval=False, zero_init_residual=False)
# the feedback RFP sends: one map per stage (the first unused), rfp_inplanes channels
FEED_SHAPES = [(16, 24, 24), (16, 12, 12), (16, 6, 6), (16, 3, 3)]


def _digest(model):
    text = '\n'.join(f'{k}:{tuple(v.shape)}' for k, v in model.state_dict().items())
    return len(model.state_dict()), hashlib.sha1(text.encode()).hexdigest()


@pytest.mark.parametrize('cfg,digest', [
    (dict(type='DetectoRS_ResNet'), (573, '980786321256c3dcac141d984da0eaf7f378571a')),
    (dict(type='DetectoRS_ResNeXt', groups=32, base_width=4),
     (573, '47ced6bd7e4a9cdde07146470f4eb089bceba886')),
])
def test_state_dict_is_mmdets(cfg, digest):
    """Keys, order and shapes equal mmdet 2.28.2's (sha1 of ``key:shape`` lines from mmdet's
    model): ConvAWS everywhere, SAC in stages 2-4, rfp_conv, avg_down at stride 2 only."""
    with torch.device('meta'):
        model = build_backbone(dict(cfg, depth=50, conv_cfg=dict(type='ConvAWS'), sac=SAC,
                                    stage_with_sac=(False, True, True, True), rfp_inplanes=256,
                                    avg_down=True))
    assert _digest(model) == digest
    keys = model.state_dict()
    assert 'layer2.0.rfp_conv.bias' in keys and 'layer2.1.rfp_conv.weight' not in keys
    assert 'layer1.0.rfp_conv.weight' not in keys and 'conv1.weight_gamma' in keys
    assert 'layer3.0.conv2.offset_l.weight' in keys and 'layer1.0.conv2.switch.weight' not in keys
    # mmdet's DetectoRS ResLayer pools only at stride 2: layer1's downsample conv is .0
    assert 'layer1.0.downsample.0.weight_gamma' in keys
    assert 'layer2.0.downsample.1.weight' in keys
    assert isinstance(model.layer2[0].conv2, SAConv2d) and model.layer2[0].conv2.stride == (2, 2)
    assert isinstance(model.layer1[0].conv2, ConvAWS2d) and not isinstance(
        model.layer1[0].conv2, SAConv2d)


def _tiny(frozen_stages=-1, rfp=False, **kwargs):
    torch.manual_seed(3)
    model = DetectoRS_ResNet(**dict(TINY, frozen_stages=frozen_stages, **kwargs),
                             rfp_inplanes=16 if rfp else None).train()
    randomise_bn(model)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():  # the parts initialised to 0 made live
        for name, p in model.named_parameters():
            if any(k in name for k in ('switch', 'weight_diff', 'context', 'offset_', 'rfp_')):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def test_outputs_init_and_output_img():
    model = DetectoRS_ResNet(**TINY, output_img=True).eval()
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        outs = model(x)
    assert outs[0] is x
    assert [tuple(o.shape[1:]) for o in outs[1:]] == [(32, 24, 24), (64, 12, 12),
                                                      (128, 6, 6), (256, 3, 3)]
    sac = model.layer3[2].conv2
    assert bool((sac.switch.bias == 1).all()) and not sac.weight_diff.any()
    assert not sac.offset_s.weight.any() and not sac.pre_context.weight.any()
    model = DetectoRS_ResNet(**TINY, rfp_inplanes=16)
    assert not model.layer4[0].rfp_conv.weight.any() and not model.layer4[0].rfp_conv.bias.any()
    assert model.layer4[0].rfp_conv.in_channels == 16 and not hasattr(model.layer1[0], 'rfp_conv')


class _RFPPass(nn.Module):
    """``backbone.rfp_forward(x, feats)`` as a model, the feedback as parameters."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        gen = torch.Generator().manual_seed(6)
        feats = [torch.randn(2, *s, generator=gen) for s in FEED_SHAPES]
        self.register_buffer('unused', feats[0])  # stage 1 takes no feedback
        self.feats = nn.ParameterList(nn.Parameter(f) for f in feats[1:])

    def forward(self, x):
        return self.backbone.rfp_forward(x, [self.unused] + list(self.feats))


def test_rfp_forward_adds_the_feedback():
    model = _tiny(rfp=True).eval()
    x = torch.randn(2, 3, 96, 96)
    feats = [torch.randn(2, *s) for s in FEED_SHAPES]
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, 'rfp_conv'):
                m.rfp_conv.weight.zero_()
                m.rfp_conv.bias.zero_()
        plain = model(x)
        torch.testing.assert_close(model.rfp_forward(x, feats), plain, rtol=0, atol=0)
        model.layer3[0].rfp_conv.bias.fill_(0.5)
        got = model.rfp_forward(x, feats)
    torch.testing.assert_close(got[:2], plain[:2], rtol=0, atol=0)  # before layer3: the same
    assert not torch.allclose(got[2], plain[2])
    with pytest.raises(ValueError, match='one feature per stage'):
        model.rfp_forward(x, feats[:3])


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('rfp', [False, True])
def test_every_mode_equals_plain(mode, rfp):
    """Outputs, input, parameter and feedback gradients within 1e-6, BN buffers bit-equal, in
    ``forward`` and ``rfp_forward``; the stem and each block are units."""
    plain = _tiny(frozen_stages=1, rfp=rfp)
    plain = _RFPPass(plain) if rfp else plain
    model = copy.deepcopy(plain)
    backbone = model.backbone if rfp else model
    plan = backbone.set_checkpoint_plan({'*': mode})
    assert list(plan) == ['stem'] + [f'layer{i}.{j}' for i, n in enumerate((3, 4, 6, 3), 1)
                                     for j in range(n)]
    x = torch.randn(2, 3, 96, 96, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


@pytest.mark.parametrize('rfp', [False, True])
def test_segments_and_with_cp_equal_plain(rfp):
    plain = _tiny(rfp=rfp, out_indices=(1, 2, 3))
    plain = _RFPPass(plain) if rfp else plain
    model = copy.deepcopy(plain)
    backbone = model.backbone if rfp else model
    backbone.set_checkpoint_segments([['layer1.1', 'layer3.2'], ['layer3.4', 'layer4.1']])
    cp = _tiny(rfp=rfp, out_indices=(1, 2, 3), with_cp=True)
    assert cp.with_cp
    cp = _RFPPass(cp) if rfp else cp
    cp.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 96, 96, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    assert_same_run(ref, run_once(model, x, seed=5), model)
    assert_same_run(ref, run_once(cp, x, seed=5), cp)


def test_frozen_stages_and_norm_eval():
    model = DetectoRS_ResNet(**dict(TINY, frozen_stages=2), rfp_inplanes=16).train()
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert 'layer2.0.rfp_conv.weight' in frozen and 'layer2.1.conv2.switch.weight' in frozen
    assert all(n.startswith(('conv1.', 'bn1.', 'layer1.', 'layer2.')) for n in frozen)
    assert not model.layer2[0].bn1.training and model.layer3[0].bn1.training
    model = DetectoRS_ResNet(**dict(TINY, norm_eval=True)).train()
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


def test_a_plain_resnets_weights_give_that_resnet():
    """ConvAWS derives its buffers from a plain conv's weights: DetectoRS_ResNet (no SAC)
    loaded from a ResNet's state dict computes that ResNet."""
    torch.manual_seed(0)
    resnet = ResNet(50, base_channels=8, norm_eval=False).eval()
    randomise_bn(resnet)
    resnet.double()
    model = DetectoRS_ResNet(depth=50, base_channels=8, conv_cfg=dict(type='ConvAWS'))
    model.double().eval()
    result = model.load_state_dict(resnet.state_dict(), strict=True)
    assert not result.missing_keys
    x = torch.randn(1, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        for a, b in zip(model(x), resnet(x)):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def test_resnext_blocks():
    model = DetectoRS_ResNeXt(**TINY, groups=4, base_width=4, rfp_inplanes=16).eval()
    conv2 = model.layer2[0].conv2
    assert isinstance(conv2, SAConv2d) and conv2.groups == 4
    assert conv2.weight.shape == (32, 8, 3, 3) and conv2.weight_diff.shape == (32, 8, 3, 3)
    assert model.layer1[0].conv2.groups == 4 and model.layer1[0].conv1.out_channels == 16
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        outs = model(x)
        feedback = model.rfp_forward(x, [torch.randn(1, *s) for s in FEED_SHAPES])
    assert [o.shape for o in outs] == [f.shape for f in feedback]
    assert [o.shape[1] for o in outs] == [32, 64, 128, 256]
    # plugins see the grouped width (mmdet's block would give them ``planes``)
    plugin = dict(cfg=dict(type='ContextBlock', ratio=1. / 4), position='after_conv2')
    model = DetectoRS_ResNeXt(depth=50, base_channels=8, groups=4, base_width=8,
                              plugins=[plugin])
    assert model.layer1[0].context_block.conv_mask.in_channels == 32
    with torch.no_grad():
        model.eval()(torch.randn(1, 3, 32, 32))


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=18), ValueError, 'invalid depth 18'),
    (dict(depth=50, stage_with_sac=(True, )), ValueError, 'stage_with_sac needs one flag'),
    (dict(depth=50, sac='SAC'), ValueError, 'sac must be None or a conv config'),
    (dict(depth=50, rfp_inplanes=0), ValueError, 'rfp_inplanes must be None or a positive'),
    (dict(depth=50, init_cfg=dict(type='Kaiming')), ValueError, "init_cfg must be dict"),
    (dict(depth=50, sac=dict(type='Nope'), stage_with_sac=(True, ) * 4),
     NotImplementedError, "conv layer type 'Nope'"),
    (dict(depth=50, groups=0, type='X'), ValueError, 'groups must be a positive int'),
])
def test_bad_arguments(kwargs, error, match):
    kwargs = dict(kwargs)
    cls = DetectoRS_ResNeXt if kwargs.pop('type', None) else DetectoRS_ResNet
    with pytest.raises(error, match=match):
        cls(**kwargs)


def test_dcn_stages_and_sac_over_them():
    """``dcn`` in a stage without SAC gives ResNet's deformable conv2; SAC, where a stage has
    both, replaces it (as mmdet's Bottleneck builds conv2 again for ``sac``)."""
    from ckptzoo.ops import DeformConv2dPack
    kw = dict(type='DetectoRS_ResNet', depth=50, base_channels=8,
              dcn=dict(type='DCN', deform_groups=1, fallback_on_stride=False),
              stage_with_dcn=(False, True, True, True))
    model = build_backbone(kw)
    assert isinstance(model.layer2[0].conv2, DeformConv2dPack)
    assert not isinstance(model.layer1[0].conv2, DeformConv2dPack)
    both = build_backbone(dict(kw, sac=dict(type='SAC', use_deform=True),
                               stage_with_sac=(False, False, True, True)))
    assert isinstance(both.layer2[0].conv2, DeformConv2dPack)
    assert type(both.layer3[0].conv2).__name__ == 'SAConv2d'


def test_detectors_resnext_takes_dcn_in_grouped_stages():
    from ckptzoo.ops import DeformConv2dPack
    model = build_backbone(dict(type='DetectoRS_ResNeXt', depth=50, groups=4, base_width=4,
                                base_channels=16,
                                dcn=dict(type='DCN', deform_groups=1, fallback_on_stride=False),
                                stage_with_dcn=(False, True, True, True)))
    conv2 = model.layer2[0].conv2
    assert isinstance(conv2, DeformConv2dPack) and conv2.groups == 4
    assert not isinstance(model.layer1[0].conv2, DeformConv2dPack)
