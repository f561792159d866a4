"""ConvAWS2d (mmcv's adaptive weight standardisation, 'ConvAWS'): semantics, keys, and the
load of a plain conv's weights that derives ``weight_gamma`` / ``weight_beta``."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ckptzoo.models.utils import ConvAWS2d, ConvModule, build_conv_layer


def _reference(conv, x):
    w = conv.weight.flatten(1)
    std = torch.sqrt(w.var(1, keepdim=True) + 1e-5)
    w = ((w - w.mean(1, keepdim=True)) / std).view_as(conv.weight)
    return F.conv2d(x, conv.weight_gamma * w + conv.weight_beta, conv.bias, conv.stride,
                    conv.padding, conv.dilation, conv.groups)


def test_weight_is_standardised_then_scaled_by_the_buffers():
    torch.manual_seed(0)
    conv = build_conv_layer(dict(type='ConvAWS'), 4, 6, 3, padding=2, dilation=2, groups=2)
    assert isinstance(conv, ConvAWS2d)
    assert list(conv.state_dict()) == ['weight', 'bias', 'weight_gamma', 'weight_beta']
    assert conv.weight_gamma.shape == (6, 1, 1, 1) and bool((conv.weight_gamma == 1).all())
    assert not conv.weight_beta.any()
    with torch.no_grad():
        conv.weight_gamma.uniform_(0.5, 1.5)
        conv.weight_beta.normal_(0, 0.1)
    x = torch.randn(2, 4, 7, 7)
    torch.testing.assert_close(conv(x), _reference(conv, x), rtol=0, atol=1e-6)
    # the standardised weight does not depend on the weight's offset
    y = conv(x)
    with torch.no_grad():
        conv.weight.add_(0.5)
    torch.testing.assert_close(conv(x), y, rtol=1e-5, atol=1e-5)
    module = ConvModule(4, 8, 3, padding=1, conv_cfg=dict(type='ConvAWS'),
                        norm_cfg=dict(type='BN'))
    assert list(module.state_dict())[:4] == ['conv.weight', 'conv.weight_gamma',
                                             'conv.weight_beta', 'bn.weight']


def test_a_plain_convs_weights_load_as_that_conv():
    """A checkpoint without the buffers (torchvision's ResNet): gamma / beta become the
    loaded weight's std / mean, so the layer computes the plain conv; strict loading passes."""
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1, bias=False), nn.ReLU())
    aws = nn.Sequential(ConvAWS2d(4, 6, 3, padding=1, bias=False), nn.ReLU())
    result = aws.load_state_dict(plain.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    flat = plain[0].weight.detach().flatten(1)
    torch.testing.assert_close(aws[0].weight_beta.flatten(), flat.mean(1))
    torch.testing.assert_close(aws[0].weight_gamma.flatten(), torch.sqrt(flat.var(1) + 1e-5))
    x = torch.randn(2, 4, 5, 5)
    torch.testing.assert_close(aws(x), plain(x), rtol=1e-5, atol=1e-6)


def test_a_checkpoint_with_the_buffers_keeps_them():
    torch.manual_seed(0)
    src = ConvAWS2d(3, 5, 1)
    with torch.no_grad():
        src.weight_gamma.fill_(-0.5)  # a negative gamma is kept (mmcv would re-derive it)
        src.weight_beta.fill_(0.25)
    dst = ConvAWS2d(3, 5, 1)
    dst.load_state_dict(src.state_dict(), strict=True)
    assert bool((dst.weight_gamma == -0.5).all()) and bool((dst.weight_beta == 0.25).all())


def test_a_module_the_checkpoint_lacks_is_left_alone():
    torch.manual_seed(0)
    model = nn.ModuleDict(dict(a=ConvAWS2d(3, 5, 1), b=ConvAWS2d(3, 5, 1)))
    with torch.no_grad():
        model['b'].weight_gamma.fill_(2.0)
    partial = {k: v for k, v in model.state_dict().items() if k.startswith('a.')}
    result = model.load_state_dict(partial, strict=False)
    assert sorted(result.missing_keys) == ['b.bias', 'b.weight', 'b.weight_beta',
                                           'b.weight_gamma']
    assert bool((model['b'].weight_gamma == 2.0).all())
    with pytest.raises(RuntimeError, match='Missing key'):
        model.load_state_dict(partial, strict=True)
