"""SSDNeck: mmdet 2.28.2's extra layers, keys and shapes (SSD300 and SSDLite), the L2 norm
(float32, initialised to its scale), every checkpoint mode exact, bad arguments."""
import pytest
import torch

from ckptzoo.models import SSDNeck
from ckptzoo.models.utils import DepthwiseSeparableConvModule
from ckptzoo.registry import build_neck
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)

SSD300 = dict(type='SSDNeck', in_channels=(512, 1024),
              out_channels=(512, 1024, 512, 256, 256, 256), level_strides=(2, 2, 1, 1),
              level_paddings=(1, 1, 0, 0), l2_norm_scale=20)


def test_ssd300_neck_as_mmdet():
    neck = build_neck(SSD300).eval()
    keys = list(neck.state_dict())
    assert keys[:3] == ['l2_norm.weight', 'extra_layers.0.0.conv.weight',
                        'extra_layers.0.0.conv.bias']
    assert neck.l2_norm.weight.detach().eq(20).all()
    assert neck.extra_layers[0][0].conv.out_channels == 256  # half of 512
    with torch.no_grad():
        outs = neck([torch.rand(1, 512, 38, 38), torch.rand(1, 1024, 19, 19)])
    assert [tuple(o.shape[1:]) for o in outs] == [(512, 38, 38), (1024, 19, 19), (512, 10, 10),
                                                  (256, 5, 5), (256, 3, 3), (256, 1, 1)]
    x = torch.rand(1, 512, 2, 2)
    expected = 20 * x / (x.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
    torch.testing.assert_close(neck.l2_norm(x), expected)
    assert list(neck.checkpoint_units()) == ['level0', 'level2', 'level3', 'level4', 'level5']


def test_ssdlite_neck_as_mmdet():
    neck = build_neck(dict(
        type='SSDNeck', in_channels=(96, 1280), out_channels=(96, 1280, 512, 256, 256, 128),
        level_strides=(2, 2, 2, 2), level_paddings=(1, 1, 1, 1), l2_norm_scale=None,
        use_depthwise=True, norm_cfg=dict(type='BN', eps=0.001, momentum=0.03),
        act_cfg=dict(type='ReLU6'), init_cfg=dict(type='TruncNormal', layer='Conv2d',
                                                  std=0.03)))
    assert not hasattr(neck, 'l2_norm')
    assert isinstance(neck.extra_layers[0][1], DepthwiseSeparableConvModule)
    assert 'extra_layers.0.1.depthwise_conv.bn.weight' in neck.state_dict()
    # mmcv's TruncNormal: std 0.03, bounds a=-2, b=2 absolute (as mmcv's, not in stds)
    std = float(neck.extra_layers[0][0].conv.weight.detach().std())
    assert std == pytest.approx(0.03, rel=0.05)
    assert list(neck.checkpoint_units()) == ['level2', 'level3', 'level4', 'level5']


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('depthwise', [False, True])
def test_every_mode_equals_plain(monkeypatch, mode, depthwise):
    torch.manual_seed(0)
    neck = SSDNeck((8, 16), (8, 16, 16, 8), (2, 1), (1, 0), use_depthwise=depthwise,
                   norm_cfg=dict(type='BN') if depthwise else None)
    neck = randomise_bn(neck).double().train()
    feats = [torch.randn(2, 8, 16, 16, dtype=torch.float64),
             torch.randn(2, 16, 8, 8, dtype=torch.float64)]
    assert_mode_exact(neck, feats, monkeypatch, mode=mode, min_calls=3)
    if mode == 'full':
        assert_mode_exact(neck, feats, monkeypatch, segments=[['level2', 'level3']])


def test_with_cp():
    neck = SSDNeck((8, 16), (8, 16, 16), (2, ), (1, ), with_cp=True)
    assert set(neck.checkpoint_plan().values()) == {'full'}


@pytest.mark.parametrize('kwargs,match', [
    (dict(in_channels=(8, 16), out_channels=(8, 16), level_strides=(), level_paddings=()),
     'out_channels must start with in_channels'),
    (dict(in_channels=(8, 16), out_channels=(8, 32, 4), level_strides=(2, ),
          level_paddings=(1, )), 'out_channels must start with in_channels'),
    (dict(in_channels=(8, 16), out_channels=(8, 16, 4), level_strides=(2, 2),
          level_paddings=(1, )), 'level_strides and level_paddings need one entry per extra'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SSDNeck(**kwargs)
