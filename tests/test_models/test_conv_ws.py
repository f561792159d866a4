"""ConvWS2d (mmcv's weight-standardised conv, 'ConvWS'): semantics, builders, keys."""
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import ConvModule, ConvWS2d, build_conv_layer, build_norm_layer


def test_weight_is_standardised_per_output_channel():
    torch.manual_seed(0)
    conv = build_conv_layer(dict(type='ConvWS', eps=1e-3), 4, 6, 3, padding=1, groups=2)
    assert isinstance(conv, ConvWS2d) and conv.eps == 1e-3
    assert list(conv.state_dict()) == ['weight', 'bias']
    x = torch.randn(2, 4, 7, 7)
    w = conv.weight.flatten(1)
    w = (w - w.mean(1, keepdim=True)) / (w.std(1, keepdim=True) + 1e-3)
    expect = F.conv2d(x, w.view_as(conv.weight), conv.bias, padding=1, groups=2)
    torch.testing.assert_close(conv(x), expect)


def test_conv_module_and_mmsyncbn():
    module = ConvModule(4, 8, 3, padding=1, conv_cfg=dict(type='ConvWS'),
                        norm_cfg=dict(type='MMSyncBN'))
    assert isinstance(module.conv, ConvWS2d) and module.norm_name == 'bn'
    assert list(module.state_dict())[:2] == ['conv.weight', 'bn.weight']
    name, bn = build_norm_layer(dict(type='MMSyncBN', stats_mode='default'), 8, postfix=3)
    assert name == 'bn3' and list(bn.state_dict()) == [
        'weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
    x = torch.randn(2, 8, 3, 3)
    ref = torch.nn.BatchNorm2d(8)
    torch.testing.assert_close(bn.train()(x), ref.train()(x), rtol=0, atol=0)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=0, atol=0)
