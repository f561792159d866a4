"""ContextBlock (mmcv's GCNet block): keys, init, pooling and fusion semantics, plugin name."""
import pytest
import torch

from ckptzoo.models.utils import ContextBlock, build_plugin_layer


def test_keys_init_and_plugin_name():
    name, block = build_plugin_layer(dict(type='ContextBlock', ratio=1. / 4), in_channels=16,
                                     postfix=2)
    assert name == 'context_block2' and block.planes == 4
    assert list(block.state_dict()) == [
        'conv_mask.weight', 'conv_mask.bias', 'channel_add_conv.0.weight',
        'channel_add_conv.0.bias', 'channel_add_conv.1.weight', 'channel_add_conv.1.bias',
        'channel_add_conv.3.weight', 'channel_add_conv.3.bias']
    x = torch.randn(2, 16, 5, 6)
    assert torch.equal(block(x), x)  # the last conv starts at zero: the identity


@pytest.mark.parametrize('pooling_type', ['att', 'avg'])
def test_semantics(pooling_type):
    torch.manual_seed(0)
    block = ContextBlock(8, 0.5, pooling_type, ('channel_add', 'channel_mul'))
    for p in block.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(2, 8, 4, 3)
    if pooling_type == 'att':
        w = torch.softmax(block.conv_mask(x).flatten(2), dim=2)  # [N, 1, HW]
        context = (x.flatten(2) * w).sum(2)[..., None, None]
    else:
        context = x.mean((2, 3), keepdim=True)
    expect = x * torch.sigmoid(block.channel_mul_conv(context)) + block.channel_add_conv(context)
    torch.testing.assert_close(block(x), expect)


@pytest.mark.parametrize('kwargs,match', [
    (dict(pooling_type='max'), "pooling_type must be 'att' or 'avg'"),
    (dict(fusion_types=()), 'fusion_types must be a non-empty'),
    (dict(fusion_types=('channel_cat', )), 'fusion_types must be a non-empty'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ContextBlock(8, 0.25, **kwargs)
