"""SAConv2d (mmcv's switchable atrous conv, 'SAC'): keys, initialisation, the two branches and
their switch, the deformable path, the bias, bad arguments."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import ConvAWS2d, SAConv2d, build_conv_layer

KEYS = ['weight', 'weight_gamma', 'weight_beta', 'weight_diff', 'switch.weight', 'switch.bias',
        'pre_context.weight', 'pre_context.bias', 'post_context.weight', 'post_context.bias']
DEFORM = ['offset_s.weight', 'offset_s.bias', 'offset_l.weight', 'offset_l.bias']


def _sac(use_deform=False, **kwargs):
    torch.manual_seed(0)
    kw = dict(kernel_size=3, stride=1, padding=1, dilation=1, bias=False)
    kw.update(kwargs)
    return build_conv_layer(dict(type='SAC', use_deform=use_deform), 4, 6, **kw)


def _randomise(conv, offsets=True):
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in conv.named_parameters():
            if name.startswith('offset_') and not offsets:
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * (0.2 if name != 'weight' else 1))


@pytest.mark.parametrize('use_deform', [False, True])
def test_keys_and_initialisation_are_mmcvs(use_deform):
    conv = _sac(use_deform)
    assert isinstance(conv, SAConv2d) and isinstance(conv, ConvAWS2d)
    assert sorted(conv.state_dict()) == sorted(KEYS + (DEFORM if use_deform else []))
    assert conv.switch.weight.shape == (1, 4, 1, 1) and conv.weight_diff.shape == (6, 4, 3, 3)
    assert bool((conv.switch.bias == 1).all()) and not conv.switch.weight.any()
    for name, p in conv.named_parameters():
        if name.startswith(('weight_diff', 'pre_context', 'post_context', 'offset_')):
            assert not p.any(), name
    # at initialisation the switch picks the small branch: a ConvAWS conv
    aws = ConvAWS2d(4, 6, 3, padding=1, bias=False)
    aws.load_state_dict({k: v for k, v in conv.state_dict().items()
                         if k in aws.state_dict()})
    x = torch.randn(2, 4, 9, 9)
    torch.testing.assert_close(conv(x), aws(x), rtol=1e-5, atol=1e-5)


def test_switch_zero_gives_the_large_dilation_branch():
    conv = _sac(stride=2, padding=2, dilation=2)
    _randomise(conv)
    with torch.no_grad():
        conv.switch.weight.zero_()
        conv.switch.bias.zero_()
        conv.pre_context.weight.zero_()
        conv.pre_context.bias.zero_()
    x = torch.randn(2, 4, 13, 13)
    weight = conv._get_weight(conv.weight) + conv.weight_diff
    large = F.conv2d(x, weight, None, 2, 6, 6)
    expect = large + conv.post_context(F.adaptive_avg_pool2d(large, 1))
    torch.testing.assert_close(conv(x), expect, rtol=1e-5, atol=1e-5)
    assert conv(x).shape == (2, 6, 7, 7)


def test_zero_offsets_equal_the_plain_branches():
    """With offsets 0 the deformable convs are the plain ones (switch, contexts random)."""
    plain, deform = _sac(False, groups=2), _sac(True, groups=2)
    _randomise(plain)
    deform.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(2, 4, 8, 8)
    torch.testing.assert_close(deform(x), plain(x), rtol=1e-5, atol=1e-5)
    _randomise(deform)
    assert not torch.allclose(deform(x), plain(x), atol=1e-3)


@pytest.mark.parametrize('use_deform', [False, True])
def test_every_parameter_gets_a_gradient_and_the_bias_counts_once(use_deform):
    conv = _sac(use_deform, bias=True)
    _randomise(conv)
    x = torch.randn(2, 4, 8, 8, dtype=torch.float64)
    conv = conv.double()
    out = conv(x)
    (out * torch.randn_like(out)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in conv.parameters()), [n for n, p in conv.named_parameters()
                                              if p.grad is None or not p.grad.any()]
    # the bias is added once, to the mix (seen here with no post-context)
    with torch.no_grad():
        conv.post_context.weight.zero_()
        conv.post_context.bias.zero_()
        with_bias = conv(x)
        bias = conv.bias.clone()
        conv.bias.zero_()
        torch.testing.assert_close(with_bias, conv(x) + bias.view(1, -1, 1, 1))


def test_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match='use_deform needs a 3x3 kernel'):
        build_conv_layer(dict(type='SAC', use_deform=True), 4, 6, 1)
    with pytest.raises(ValueError, match='at least 3x3 pixels'):
        _sac()(torch.randn(1, 4, 2, 5))
