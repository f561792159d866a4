import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import ConvModule


def test_keys_and_auto_bias():
    plain = ConvModule(3, 4, 1)
    assert list(plain.state_dict()) == ['conv.weight', 'conv.bias']
    bn = ConvModule(3, 4, 3, padding=1, norm_cfg=dict(type='BN'))
    assert [k for k in bn.state_dict() if not k.startswith('bn.running')
            and 'num_batches' not in k] == ['conv.weight', 'bn.weight', 'bn.bias']
    gn = ConvModule(3, 4, 3, norm_cfg=dict(type='GN', num_groups=2), bias=True)
    assert 'gn.weight' in gn.state_dict() and 'conv.bias' in gn.state_dict()
    assert ConvModule(3, 4, 1, act_cfg=None).with_activation is False


def test_forward_is_conv_norm_act():
    torch.manual_seed(0)
    m = ConvModule(3, 4, 3, padding=1, norm_cfg=dict(type='BN')).eval()
    x = torch.randn(2, 3, 5, 5)
    expected = F.relu(m.bn(F.conv2d(x, m.conv.weight, padding=1)))
    torch.testing.assert_close(m(x), expected)
    torch.testing.assert_close(m(x, activate=False), m.bn(m.conv(x)))


def test_order_norm_first_uses_input_channels():
    m = ConvModule(3, 4, 1, norm_cfg=dict(type='BN'), order=('norm', 'conv', 'act'))
    assert m.bn.num_features == 3


def test_unsupported():
    with pytest.raises(NotImplementedError, match='conv_cfg'):
        ConvModule(3, 4, 1, conv_cfg=dict(type='DCNv3'))
    with pytest.raises(ValueError, match='order'):
        ConvModule(3, 4, 1, order=('conv', 'act'))


def test_deformable_conv_cfg_as_mmcv():
    """mmcv's ``'DCN'`` / ``'DCNv2'`` (bias 'auto': none with a norm); DCNv2 keeps its own
    initialisation (mmcv's ConvModule leaves a conv with ``init_weights`` to it)."""
    m = ConvModule(4, 4, 3, padding=1, conv_cfg=dict(type='DCN'), norm_cfg=dict(type='BN'))
    assert list(m.state_dict())[:3] == ['conv.weight', 'conv.conv_offset.weight',
                                        'conv.conv_offset.bias']
    m = ConvModule(4, 4, 3, padding=1, conv_cfg=dict(type='DCNv2'))
    assert m.conv.bias is not None and not m.conv.bias.any()
    assert float(m.conv.weight.detach().abs().max()) <= 1 / 6  # mmcv's uniform(+-1/sqrt(4*9))
    assert m(torch.randn(1, 4, 5, 5)).shape == (1, 4, 5, 5)
