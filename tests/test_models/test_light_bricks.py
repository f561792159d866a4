"""The bricks of the light backbones: make_divisible, DropPath, Conv2dAdaptivePadding,
DepthwiseSeparableConvModule, SELayer, CSPLayer (mmcv's / mmdet's semantics and keys)."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import (Conv2dAdaptivePadding, ConvModule, CSPLayer,
                                  DepthwiseSeparableConvModule, DropPath, SELayer,
                                  make_divisible)


def test_make_divisible():
    assert make_divisible(32 * 0.25, 8) == 8 and make_divisible(16 * 0.35, 8) == 8
    assert make_divisible(20, 8) == 24 and make_divisible(36, 8) == 40
    assert make_divisible(11, 8) == 16  # 8 would lose more than 10%
    assert make_divisible(3, 8, min_value=4) == 4  # the floor wins over the divisor


def test_drop_path_as_mmcv():
    layer = DropPath(0.5).train()
    x = torch.ones(1000, 2)
    torch.manual_seed(0)
    out = layer(x)
    torch.manual_seed(0)
    mask = (0.5 + torch.rand(1000, 1)).floor()
    assert torch.equal(out, x / 0.5 * mask) and 400 < int(mask.sum()) < 600
    assert torch.equal(layer.eval()(x), x)
    with pytest.raises(ValueError, match=r'drop_prob must be in \[0, 1\)'):
        DropPath(1.0)


@pytest.mark.parametrize('size,stride,kernel', [(7, 2, 3), (8, 2, 3), (9, 2, 5), (5, 1, 3)])
def test_conv2d_adaptive_padding_is_tf_same(size, stride, kernel):
    conv = Conv2dAdaptivePadding(2, 3, kernel, stride=stride, padding=7)
    assert conv.padding == (0, 0)
    x = torch.randn(1, 2, size, size)
    out = conv(x)
    assert out.shape[-1] == -(-size // stride)
    pad = max((out.shape[-1] - 1) * stride + kernel - size, 0)
    ref = F.conv2d(F.pad(x, [pad // 2, pad - pad // 2] * 2), conv.weight, conv.bias, stride)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert isinstance(ConvModule(2, 3, 3, conv_cfg=dict(type='Conv2dAdaptivePadding')).conv,
                      Conv2dAdaptivePadding)


def test_depthwise_separable_conv_module():
    m = DepthwiseSeparableConvModule(4, 8, 3, padding=1, norm_cfg=dict(type='BN'),
                                     pw_act_cfg=None)
    assert m.depthwise_conv.conv.groups == 4 and m.pointwise_conv.conv.kernel_size == (1, 1)
    assert m.depthwise_conv.with_activation and not m.pointwise_conv.with_activation
    assert list(m.state_dict())[0] == 'depthwise_conv.conv.weight'
    assert m(torch.rand(1, 4, 5, 5)).shape == (1, 8, 5, 5)
    with pytest.raises(ValueError, match='takes no groups'):
        DepthwiseSeparableConvModule(4, 8, 3, groups=2)


def test_se_layer():
    se = SELayer(16, ratio=4, act_cfg=(dict(type='Swish'), dict(type='Sigmoid')))
    assert se.conv1.conv.out_channels == 4 and se.conv1.conv.bias is not None
    x = torch.rand(2, 16, 3, 3)
    gate = torch.sigmoid(se.conv2.conv(F.silu(se.conv1.conv(x.mean((2, 3), keepdim=True)))))
    torch.testing.assert_close(se(x), x * gate)
    with pytest.raises(ValueError, match='SELayer act_cfg must be a dict or two dicts'):
        SELayer(16, act_cfg=(dict(type='ReLU'), ))


def test_csp_layer():
    layer = CSPLayer(8, 16, num_blocks=2, add_identity=True)
    assert layer.main_conv.conv.out_channels == 8 and layer.final_conv.conv.in_channels == 16
    assert layer.blocks[0].add_identity and layer.blocks[0].conv1.conv.out_channels == 8
    assert layer.main_conv.bn.momentum == 0.03 and layer.main_conv.bn.eps == 1e-3
    assert list(layer.state_dict())[0] == 'main_conv.conv.weight'
    assert layer(torch.rand(1, 8, 4, 4)).shape == (1, 16, 4, 4)
    assert isinstance(CSPLayer(8, 8, use_depthwise=True).blocks[0].conv2,
                      DepthwiseSeparableConvModule)
