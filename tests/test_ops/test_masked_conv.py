"""MaskedConv2d (mmcv 1.x's): the convolution where the mask is set, zero elsewhere (no
bias); a plain conv without a mask; one mask per image here (mmcv: one image)."""
import pytest
import torch
import torch.nn as nn

from ckptzoo.ops import MaskedConv2d


def test_masked_is_the_conv_where_set_and_zero_elsewhere():
    torch.manual_seed(0)
    conv = MaskedConv2d(3, 4, 3, padding=1)
    assert isinstance(conv, nn.Conv2d) and set(conv.state_dict()) == {'weight', 'bias'}
    x = torch.randn(2, 3, 5, 6)
    full = nn.functional.conv2d(x, conv.weight, conv.bias, padding=1)
    torch.testing.assert_close(conv(x), full)
    mask = torch.rand(2, 5, 6) > 0.5
    out = conv(x, mask)
    torch.testing.assert_close(out, full * mask[:, None])
    assert (out[~mask[:, None].expand_as(out)] == 0).all()
    # mmcv's one-image mask [1, H, W] (and [H, W]) is shared by the batch
    torch.testing.assert_close(conv(x, mask[:1]), full * mask[:1, None])
    torch.testing.assert_close(conv(x, mask[0]), full * mask[:1, None])
    out.sum().backward()  # differentiable (mmcv's masked op is not)
    assert conv.weight.grad is not None


def test_bad_masks_and_strides():
    conv = MaskedConv2d(3, 4, 1)
    x = torch.randn(2, 3, 5, 6)
    with pytest.raises(ValueError, match='mask must be'):
        conv(x, torch.ones(3, 5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match='mask must be'):
        conv(x, torch.ones(2, 4, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match='stride 1'):
        MaskedConv2d(3, 4, 1, stride=2)(x, torch.ones(1, 3, 3, dtype=torch.bool))
