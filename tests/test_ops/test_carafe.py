"""CARAFE (``ckptzoo/ops/carafe.py``) equals a direct loop over mmcv's kernel definition, output
and both gradients; ``CARAFEPack`` has mmcv's keys, shapes and near-uniform initial kernels.
The audit against mmdet's FPN_CARAFE (mmcv's op replaced by such a loop) found them equal."""
import pytest
import torch

from ckptzoo.ops import CARAFEPack, carafe


def _loop(feat, mask, k, groups, s):
    """Output (y, x) of channel c sums feat[c] over the k x k window around (y // s, x // s)
    (zero outside), weighted by mask channel group * k * k + dy * k + dx at (y, x)."""
    n, c, h, w = feat.shape
    out = feat.new_zeros(n, c, h * s, w * s)
    r, per = (k - 1) // 2, c // groups
    for y in range(h * s):
        for x in range(w * s):
            for dy in range(k):
                for dx in range(k):
                    iy, ix = y // s + dy - r, x // s + dx - r
                    if not (0 <= iy < h and 0 <= ix < w):
                        continue
                    for g in range(groups):
                        m = mask[:, g * k * k + dy * k + dx, y, x][:, None]
                        out[:, g * per:(g + 1) * per, y, x] = \
                            out[:, g * per:(g + 1) * per, y, x] + \
                            feat[:, g * per:(g + 1) * per, iy, ix] * m
    return out


@pytest.mark.parametrize('k,groups,s', [(5, 1, 2), (3, 2, 2), (3, 1, 3), (1, 4, 1)])
def test_carafe_equals_the_definition(k, groups, s):
    gen = torch.Generator().manual_seed(0)
    feat = torch.randn(2, 8, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(2, groups * k * k, 4 * s, 5 * s, generator=gen, dtype=torch.float64,
                       requires_grad=True)
    got, ref = carafe(feat, mask, k, groups, s), _loop(feat, mask, k, groups, s)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)
    weight = torch.randn(got.shape, generator=gen, dtype=torch.float64)
    g_got = torch.autograd.grad((got * weight).sum(), (feat, mask))
    g_ref = torch.autograd.grad((ref * weight).sum(), (feat, mask))
    for a, b in zip(g_got, g_ref):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_carafe_pack_as_mmcv():
    pack = CARAFEPack(16, 2, compressed_channels=8)
    assert list(pack.state_dict()) == ['channel_compressor.weight', 'channel_compressor.bias',
                                       'content_encoder.weight', 'content_encoder.bias']
    assert tuple(pack.content_encoder.weight.shape) == (100, 8, 3, 3)
    assert pack.content_encoder.weight.std() < 0.002
    x = torch.randn(2, 16, 5, 6)
    with torch.no_grad():
        out = pack(x)
        # near-uniform kernels at init: close to the 5x5 window mean of the nearest pixel
        mask = pack.kernel_normalizer(pack.content_encoder(pack.channel_compressor(x)))
    assert tuple(out.shape) == (2, 16, 10, 12)
    torch.testing.assert_close(mask.view(2, 25, 10, 12).sum(1), torch.ones(2, 10, 12))


def test_bad_carafe_arguments():
    feat = torch.randn(1, 4, 3, 3)
    with pytest.raises(ValueError, match='masks must be of shape'):
        carafe(feat, torch.randn(1, 25, 3, 3), 5, 1, 2)
    with pytest.raises(ValueError, match='kernel_size'):
        carafe(feat, torch.randn(1, 16, 6, 6), 4, 1, 2)
    with pytest.raises(ValueError, match='group_size'):
        carafe(feat, torch.randn(1, 75, 6, 6), 5, 3, 2)
