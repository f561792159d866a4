import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils.transformer import PatchEmbed


@pytest.mark.parametrize('kernel, stride, size, pad', [(4, 4, (42, 58), (2, 2)),
                                                       (4, 4, (40, 56), (0, 0)),
                                                       (7, 4, (30, 33), (5, 6)),
                                                       (3, 2, (9, 8), (2, 1))])
def test_corner_padding_as_mmcv(kernel, stride, size, pad):
    """``'corner'``: pad bottom / right so the last window fits; the pads are those of mmcv's
    AdaptivePadding.get_pad_shape for these sizes."""
    embed = PatchEmbed(3, 8, kernel, stride, norm=False)
    x = torch.randn(1, 3, *size)
    want = embed.projection(F.pad(x, (0, pad[1], 0, pad[0]))).permute(0, 2, 3, 1)
    torch.testing.assert_close(embed(x), want, rtol=0, atol=0)


def test_conv_padding_norm_and_keys():
    embed = PatchEmbed(3, 8, 7, 4, padding=3, norm_eps=1e-6)
    assert set(embed.state_dict()) == {'projection.weight', 'projection.bias', 'norm.weight',
                                       'norm.bias'}
    assert embed.norm.eps == 1e-6 and embed.projection.padding == (3, 3)
    assert embed(torch.randn(1, 3, 30, 33)).shape == (1, 8, 9, 8)  # NHWC
    with pytest.raises(ValueError, match="padding must be an int, a pair of ints or 'corner'"):
        PatchEmbed(3, 8, 4, padding='same')
