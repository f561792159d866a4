"""DeformConv2d (mmcv 1.x) on torchvision: zero offsets give the plain conv; mmcv's padding of
an input smaller than the kernel."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.ops import DeformConv2d


def test_zero_offset_is_the_plain_conv_and_keys():
    torch.manual_seed(0)
    conv = DeformConv2d(3, 5, 3, padding=1)
    assert list(conv.state_dict()) == ['weight']
    x = torch.randn(2, 3, 6, 7)
    out = conv(x, torch.zeros(2, 18, 6, 7))
    torch.testing.assert_close(out, F.conv2d(x, conv.weight, padding=1))


def test_tiny_input_padded_like_mmcv():
    torch.manual_seed(0)
    conv = DeformConv2d(2, 4, 3, padding=1)
    x = torch.randn(1, 2, 1, 2)
    out = conv(x, torch.zeros(1, 18, 1, 2))
    assert out.shape == (1, 4, 1, 2)
    ref = F.conv2d(F.pad(x, (0, 1, 0, 2)), conv.weight, padding=1)[:, :, :1, :2]
    torch.testing.assert_close(out, ref)


def test_bias_rejected():
    with pytest.raises(ValueError, match='bias'):
        DeformConv2d(2, 2, 3, bias=True)
