"""MobileNetV2: mmdet 2.28.2's widths, keys and shapes, every checkpoint mode exact, freezing,
bad arguments."""
import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ckptzoo.models import MobileNetV2
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)


def _tiny(**kwargs):
    torch.manual_seed(0)
    kwargs.setdefault('out_indices', (1, 3, 7))
    return randomise_bn(MobileNetV2(widen_factor=0.25, **kwargs)).double().train()


def test_keys_widths_and_shapes_as_mmdet():
    model = build_backbone(dict(type='MobileNetV2')).eval()
    keys = list(model.state_dict())
    assert keys[:2] == ['conv1.conv.weight', 'conv1.bn.weight']
    assert 'layer1.0.depthwise_conv.conv.weight' in keys and 'layer1.0.expand_conv.conv.weight' \
        not in keys  # expand ratio 1: no expand conv
    assert 'layer2.0.expand_conv.conv.weight' in keys and 'layer7.0.linear_conv.bn.bias' in keys
    assert keys[-1] == 'conv2.bn.num_batches_tracked'
    assert model.layer2[0].expand_conv.conv.out_channels == 96  # 16 * 6
    assert isinstance(model.conv1.activate, torch.nn.ReLU6)
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 64, 64))
    assert [tuple(o.shape[1:]) for o in outs] == [(24, 16, 16), (32, 8, 8), (96, 4, 4),
                                                  (1280, 2, 2)]
    # widths rounded to multiples of 8; conv2 widens only above 1.0
    assert MobileNetV2(widen_factor=0.5).layer7[0].linear_conv.conv.out_channels == 160
    assert MobileNetV2(widen_factor=0.5).conv2.conv.out_channels == 1280
    assert MobileNetV2(widen_factor=1.5).conv2.conv.out_channels == 1920
    assert MobileNetV2(widen_factor=1.5).conv1.conv.out_channels == 48


def test_units():
    model = _tiny(out_indices=(7, ))
    units = list(model.checkpoint_units())
    assert units[:4] == ['conv1', 'layer1.0', 'layer2.0', 'layer2.1'] and units[-1] == 'conv2'
    assert len(units) == 1 + 17 + 1
    assert not model.with_cp and _tiny(with_cp=True).with_cp
    assert _tiny(with_cp=True).layer3[1].with_cp


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('frozen_stages', [-1, 2])
def test_every_mode_equals_plain(monkeypatch, mode, frozen_stages):
    plain = _tiny(frozen_stages=frozen_stages)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert_mode_exact(plain, x, monkeypatch, mode=mode, min_calls=10)


@pytest.mark.parametrize('reentrant', [False, True])
def test_with_cp_equals_plain(monkeypatch, reentrant):
    plain = _tiny()
    model = _tiny(with_cp=True, cp_use_reentrant=reentrant)
    model.load_state_dict(plain.state_dict())
    assert set(model.checkpoint_plan().values()) == {'full'}
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    from tests.helpers.unit_modes import Counting, assert_same, train_run
    ref = train_run(plain, x)
    counting = Counting(monkeypatch)
    assert_same(ref, train_run(model, x))
    assert counting.calls >= 18


def test_segment_across_stages_equals_plain(monkeypatch):
    plain = _tiny()
    assert_mode_exact(plain, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                      segments=[['conv1', 'layer4.1'], ['layer5.0', 'conv2']], min_calls=2)


def test_layers_past_the_last_output_do_not_run():
    """mmdet runs them and discards their outputs; we leave them out (no gradient either
    way), listed as units of their own."""
    model = _tiny(out_indices=(2, 4, 6))
    before = model.conv2.bn.running_mean.clone()
    model(torch.randn(2, 3, 32, 32, dtype=torch.float64))
    assert torch.equal(model.conv2.bn.running_mean, before)
    assert model.checkpoint_chains()[0][-1] == 'layer7.0'


def test_frozen_stages_and_norm_eval():
    model = _tiny(frozen_stages=2)
    frozen = {n.split('.')[0] for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {'conv1', 'layer1', 'layer2'}
    # fix over mmdet: the frozen conv1's BN is in eval mode too
    assert not model.conv1.bn.training and not model.layer2[0].depthwise_conv.bn.training
    assert model.layer3[0].depthwise_conv.bn.training
    model = _tiny(norm_eval=True)
    assert not any(m.training for m in model.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(out_indices=(8, )), ValueError, r'out_indices must be stage indices in 0\.\.7'),
    (dict(frozen_stages=8), ValueError, r'frozen_stages must be an int in -1\.\.7'),
    (dict(with_cp=(True, False)), ValueError, 'with_cp must be a bool'),
    (dict(pretrained=3), TypeError, 'pretrained must be a str or None'),
    (dict(pretrained='a.pth', init_cfg=dict(type='Pretrained', checkpoint='b')), ValueError,
     'give pretrained or init_cfg, not both'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        MobileNetV2(**kwargs)
