"""RFP (DetectoRS's recursive feature pyramid) and its ASPP: mmdet 2.28.2's keys and shapes,
the fusion, units per level and step (every mode and segments exact, the step backbones'
units too), initialisation, loading the step backbones' weights, bad arguments."""
import copy
import hashlib

import pytest
import torch
import torch.nn as nn

from ckptzoo.models import ASPP, FPN, RFP, DetectoRS_ResNet, ResNet
from ckptzoo.registry import build_neck
from tests.helpers.checkpointing import assert_same_run, one_thread, randomise_bn, run_once

one_thread = pytest.fixture(autouse=True)(one_thread)

BACKBONE = dict(depth=50, base_channels=8, conv_cfg=dict(type='ConvAWS'),
                sac=dict(type='SAC', use_deform=True), stage_with_sac=(False, True, True, True),
                norm_eval=False, zero_init_residual=False)
NECK = dict(type='RFP', in_channels=[32, 64, 128, 256], out_channels=16, num_outs=5,
            rfp_steps=2, aspp_out_channels=4,
            rfp_backbone=dict(BACKBONE, type='DetectoRS_ResNet', rfp_inplanes=16,
                              frozen_stages=1))


def test_state_dict_is_mmdets():
    """Keys, order and shapes of mmdet 2.28.2's RFP (sha1 of ``key:shape`` lines from mmdet)."""
    backbone = dict(type='DetectoRS_ResNet', depth=50, conv_cfg=dict(type='ConvAWS'),
                    sac=dict(type='SAC', use_deform=True),
                    stage_with_sac=(False, True, True, True), rfp_inplanes=256)
    with torch.device('meta'):
        neck = build_neck(dict(type='RFP', in_channels=[256, 512, 1024, 2048], out_channels=256,
                               num_outs=5, rfp_steps=2, aspp_out_channels=64,
                               rfp_backbone=backbone))
    text = '\n'.join(f'{k}:{tuple(v.shape)}' for k, v in neck.state_dict().items())
    assert (len(neck.state_dict()), hashlib.sha1(text.encode()).hexdigest()) == \
        (599, '74bdba43bd312cc663225ee26637235345308f1b')
    assert neck.rfp_aspp.aspp[1].dilation == (3, 3) and neck.rfp_aspp.aspp[0].kernel_size == (1, 1)


class _Model(nn.Module):
    """Backbone (``output_img``) and RFP, as a detector runs them."""

    def __init__(self, **neck):
        super().__init__()
        torch.manual_seed(3)
        self.backbone = DetectoRS_ResNet(**BACKBONE, output_img=True)
        self.neck = build_neck(dict(NECK, **neck))
        randomise_bn(self)
        gen = torch.Generator().manual_seed(4)
        with torch.no_grad():  # the parts initialised to 0 made live
            for name, p in self.named_parameters():
                if any(k in name for k in ('switch', 'weight_diff', 'context', 'offset_', 'rfp_')):
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.05)

    def forward(self, x):
        return self.neck(self.backbone(x))


def test_one_step_is_fpn_and_two_steps_fuse():
    model = _Model(rfp_steps=1).eval()
    fpn = FPN([32, 64, 128, 256], 16, 5)
    fpn.load_state_dict({k: v for k, v in model.neck.state_dict().items()
                         if k in fpn.state_dict()})
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        feats = model.backbone(x)
        for a, b in zip(model.neck(feats), fpn(feats[1:])):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        # two steps: w * new + (1 - w) * old per level, w = sigmoid(rfp_weight(new))
        two = _Model().eval()
        two.load_state_dict(model.state_dict(), strict=False)
        neck = two.neck
        old = fpn(feats[1:])
        feedback = [old[0]] + [neck.rfp_aspp(old[i]) for i in (1, 2, 3)]
        new = fpn(neck.rfp_modules[0].rfp_forward(x, feedback))
        for got, a, b in zip(two(x), new, old):
            w = torch.sigmoid(neck.rfp_weight(a))
            torch.testing.assert_close(got, w * a + (1 - w) * b, rtol=0, atol=0)
    assert len(two(x)) == 5 and len(neck.rfp_modules) == 1


def test_units_and_initialisation():
    neck = build_neck(dict(NECK, rfp_steps=3))
    assert isinstance(neck, RFP) and len(neck.rfp_modules) == 2
    units = list(neck.checkpoint_units())
    step = lambda s: ([f'step{s}.aspp{i}' for i in (1, 2, 3)] +
                      [f'step{s}.level{i}' for i in (3, 2, 1, 0)] +
                      [f'step{s}.fuse{i}' for i in range(5)])
    backbone = lambda s: [f'rfp_modules.{s}.stem'] + [
        f'rfp_modules.{s}.layer{i}.{j}' for i, n in enumerate((3, 4, 6, 3), 1) for j in range(n)]
    assert units == [f'level{i}' for i in (3, 2, 1, 0)] + step(1) + step(2) + backbone(0) + \
        backbone(1)
    assert ['step1.level3', 'step1.level2', 'step1.level1', 'step1.level0'] in \
        neck.checkpoint_chains()
    assert not neck.rfp_weight.weight.any() and not neck.rfp_weight.bias.any()
    assert neck.init_cfg is None and not neck.rfp_aspp.aspp[0].bias.any()
    assert neck.lateral_convs[0].conv.weight.any()
    with_cp = build_neck(dict(NECK, with_cp=True))
    plan = with_cp.checkpoint_plan()
    assert all(plan[n] == 'full' for n in plan if not n.startswith('rfp_modules'))


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_equals_plain(mode):
    """Every unit of the neck (pyramid levels, ASPP, fusion, the step backbone's blocks) in
    ``mode``: outputs, input and parameter gradients within 1e-6, BN buffers bit-equal."""
    plain = _Model().train()
    model = copy.deepcopy(plain)
    plan = model.neck.set_checkpoint_plan({'*': mode})
    assert set(plan.values()) == {mode}
    x = torch.randn(2, 3, 96, 96, requires_grad=True)
    assert_same_run(run_once(plain, x, seed=5), run_once(model, x, seed=5), model)


def test_segments_and_with_cp_equal_plain():
    plain = _Model().train()
    model = copy.deepcopy(plain)
    model.neck.set_checkpoint_segments([
        ['level3', 'level0'], ['step1.level2', 'step1.level0'],
        ['rfp_modules.0.layer2.0', 'rfp_modules.0.layer4.2']])
    cp = _Model(with_cp=True).train()
    cp.load_state_dict(plain.state_dict())
    x = torch.randn(2, 3, 96, 96, requires_grad=True)
    ref = run_once(plain, x, seed=5)
    assert_same_run(ref, run_once(model, x, seed=5), model)
    assert_same_run(ref, run_once(cp, x, seed=5), cp)


@pytest.mark.filterwarnings('ignore:pretrained is deprecated')
@pytest.mark.filterwarnings('ignore:checkpoint .* does not match the model exactly')
def test_init_weights_loads_the_step_backbones(tmp_path):
    """The step backbone's ``pretrained`` (a plain ResNet's file): weights load, ConvAWS's
    buffers are derived (not reported missing), SAC's own parts and rfp_conv keep theirs."""
    torch.manual_seed(0)
    resnet = ResNet(50, base_channels=8)
    path = str(tmp_path / 'r50.pth')
    torch.save(resnet.state_dict(), path)
    neck = build_neck(dict(NECK, rfp_backbone=dict(NECK['rfp_backbone'], pretrained=path)))
    neck.init_weights()
    conv = neck.rfp_modules[0].layer3[0].conv1
    torch.testing.assert_close(conv.weight, resnet.layer3[0].conv1.weight)
    torch.testing.assert_close(conv.weight_gamma.flatten(),
                               torch.sqrt(conv.weight.flatten(1).var(1) + 1e-5))


def test_aspp():
    aspp = ASPP(8, 3, dilations=(1, 2, 1))
    out = aspp(torch.randn(2, 8, 5, 7))
    assert out.shape == (2, 9, 5, 7)
    # the last branch is the global one: constant over the map
    assert bool((out[:, 6:] == out[:, 6:, :1, :1]).all())


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(init_cfg=dict(type='Xavier')), ValueError, 'RFP init_cfg must be None'),
    (dict(rfp_steps=0), ValueError, 'rfp_steps must be a positive int'),
    (dict(aspp_dilations=(1, 3, 6)), ValueError, 'ASPP dilations must be'),
    (dict(aspp_out_channels=8), ValueError, 'rfp_inplanes must be aspp_out_channels'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_neck(dict(NECK, **kwargs))


def test_bad_inputs():
    neck = build_neck(NECK)
    with pytest.raises(ValueError, match='RFP expects the image and 4 features'):
        neck([torch.randn(1, c, 4, 4) for c in (32, 64, 128, 256)])
