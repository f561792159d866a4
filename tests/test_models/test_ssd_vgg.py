"""SSDVGG: mmdet 2.28.2's layers (VGG16 without the last pool, pool5 3x3/1, fc6 dilated, fc7),
keys and shapes, the deprecated ``input_size`` / ``l2_norm_scale`` (warn, change nothing),
every checkpoint mode exact, bad arguments."""
import pytest
import torch
import torch.nn as nn

from ckptzoo.models import SSDVGG
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact

one_thread = pytest.fixture(autouse=True)(one_thread)


def test_ssd300_backbone_as_mmdet():
    model = build_backbone(dict(type='SSDVGG', depth=16, with_last_pool=False, ceil_mode=True,
                                out_indices=(3, 4), out_feature_indices=(22, 34))).eval()
    f = model.features
    assert len(f) == 35 and isinstance(f[30], nn.MaxPool2d) and f[30].stride == 1
    assert f[31].dilation == (6, 6) and f[31].out_channels == 1024 and f[33].kernel_size == (1, 1)
    assert f[4].ceil_mode and model.range_sub_modules[-1] == [24, 30]
    assert list(model.state_dict())[:2] == ['features.0.weight', 'features.0.bias']
    assert 'features.33.weight' in model.state_dict()
    with torch.no_grad():
        outs = model(torch.rand(1, 3, 75, 75))  # ceil mode: 75 -> 38 -> 19 -> 10
    assert [tuple(o.shape[1:]) for o in outs] == [(512, 10, 10), (1024, 5, 5)]
    assert list(model.checkpoint_units())[:4] == ['features.0', 'features.2', 'features.5',
                                                  'features.7']
    assert 'features.23' in model.checkpoint_units()  # the unit after an output


def test_deprecated_arguments_warn_and_change_nothing():
    with pytest.warns(UserWarning, match='input_size is deprecated'):
        a = SSDVGG(16, input_size=300)
    with pytest.warns(UserWarning, match='l2_norm_scale in VGG is deprecated'):
        b = SSDVGG(16, l2_norm_scale=20.)
    assert {k: v.shape for k, v in a.state_dict().items()} == \
        {k: v.shape for k, v in b.state_dict().items()}
    assert not hasattr(b, 'l2_norm')


def test_a_single_output_is_returned_bare():
    model = SSDVGG(11, out_feature_indices=(19, ))
    with torch.no_grad():
        assert isinstance(model(torch.rand(1, 3, 32, 32)), torch.Tensor)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_equals_plain(monkeypatch, mode):
    torch.manual_seed(0)
    plain = SSDVGG(11, out_feature_indices=(14, 24)).double().train()  # conv4_2's ReLU, fc7's
    assert_mode_exact(plain, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                      mode=mode, min_calls=10)
    if mode == 'full':
        assert_mode_exact(plain, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                          segments=[['features.0', 'features.13'],
                                    ['features.15', 'features.23']])


def test_with_cp():
    model = SSDVGG(16, with_cp=True)
    assert model.with_cp and set(model.checkpoint_plan().values()) == {'full'}


@pytest.mark.parametrize('kwargs,error,match', [
    (dict(depth=18), ValueError, 'invalid depth 18 for vgg: allowed are 11, 13, 16, 19'),
    (dict(depth=16, out_feature_indices=(35, )), ValueError,
     r'out_feature_indices must be indices into features \(0\.\.34\)'),
    (dict(depth=16, pretrained='a', init_cfg=dict(type='Pretrained', checkpoint='b')),
     ValueError, 'init_cfg and pretrained cannot be specified at the same time'),
    (dict(depth=16, pretrained=1), TypeError, 'pretrained must be a str or None'),
])
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SSDVGG(**kwargs)
