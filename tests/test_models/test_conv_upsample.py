"""ConvUpsample (mmdet 2.x models/utils/conv_upsample.py): mmdet's keys, a 2x bilinear
upsample after each of the first ``num_upsample`` convs, bad arguments named."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import ConvUpsample


def test_keys_and_forward():
    torch.manual_seed(0)
    m = ConvUpsample(4, 6, num_layers=3, num_upsample=2,
                     norm_cfg=dict(type='GN', num_groups=2, requires_grad=True))
    assert list(m.state_dict()) == [f'conv.{i}.{k}' for i in range(3)
                                    for k in ('conv.weight', 'gn.weight', 'gn.bias')]
    x = torch.randn(1, 4, 5, 5)
    ref = x
    for i, conv in enumerate(m.conv):
        ref = conv(ref)
        if i < 2:
            ref = F.interpolate(ref, scale_factor=2, mode='bilinear', align_corners=False)
    out = m(x)
    assert out.shape == (1, 6, 20, 20)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert ConvUpsample(4, 6, num_layers=2).num_upsample == 2


def test_bad_arguments():
    with pytest.raises(ValueError, match='num_upsample'):
        ConvUpsample(4, 6, num_layers=1, num_upsample=2)
    with pytest.raises(ValueError, match='num_layers'):
        ConvUpsample(4, 6, num_layers=-1)
