"""MultiScaleDeformableAttention: mmcv's keys and init, the grid_sample sum against a direct
bilinear lookup, the 4-d (box) reference form, errors."""
import pytest
import torch

from ckptzoo.ops import MultiScaleDeformableAttention, multi_scale_deformable_attn_pytorch


def _bilinear(v, x, y):
    """v [c, h, w] at pixel coords (x, y) (align_corners=False: centres at +0.5), zeros out."""
    c, h, w = v.shape
    x, y = x - 0.5, y - 0.5
    x0, y0 = int(torch.floor(torch.tensor(x))), int(torch.floor(torch.tensor(y)))
    out = torch.zeros(c, dtype=v.dtype)
    for xi, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
        for yi, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
            if 0 <= xi < w and 0 <= yi < h:
                out += v[:, yi, xi] * wx * wy
    return out


def test_core_equals_direct_bilinear_sum():
    g = torch.Generator().manual_seed(0)
    shapes = torch.tensor([[3, 4], [2, 2]])
    bs, heads, dims, nq, levels, points = 1, 2, 3, 2, 2, 2
    value = torch.randn(bs, 16, heads, dims, generator=g, dtype=torch.float64)
    loc = torch.rand(bs, nq, heads, levels, points, 2, generator=g, dtype=torch.float64) * 1.2 - 0.1
    w = torch.rand(bs, nq, heads, levels, points, generator=g, dtype=torch.float64)
    out = multi_scale_deformable_attn_pytorch(value, shapes, loc, w)
    assert out.shape == (bs, nq, heads * dims)
    starts = [0, 12]
    for q in range(nq):
        for hd in range(heads):
            want = torch.zeros(dims, dtype=torch.float64)
            for lv, (h, wd) in enumerate(shapes.tolist()):
                v = value[0, starts[lv]:starts[lv] + h * wd, hd].t().reshape(dims, h, wd)
                for p in range(points):
                    x, y = loc[0, q, hd, lv, p].tolist()
                    want += w[0, q, hd, lv, p] * _bilinear(v, x * wd, y * h)
            torch.testing.assert_close(out[0, q, hd * dims:(hd + 1) * dims], want)


def test_keys_init_and_forward_shapes():
    attn = MultiScaleDeformableAttention(embed_dims=16, num_heads=2, num_levels=2,
                                         num_points=3)
    assert list(attn.state_dict()) == [
        'sampling_offsets.weight', 'sampling_offsets.bias', 'attention_weights.weight',
        'attention_weights.bias', 'value_proj.weight', 'value_proj.bias',
        'output_proj.weight', 'output_proj.bias']
    bias = attn.sampling_offsets.bias.view(2, 2, 3, 2)
    # head 0 points along +x at distances 1, 2, 3; head 1 along -x
    torch.testing.assert_close(bias[0, 1, :, 0], torch.tensor([1., 2., 3.]))
    torch.testing.assert_close(bias[1, 0, :, 0], torch.tensor([-1., -2., -3.]))
    assert attn.attention_weights.weight.abs().sum() == 0
    shapes = torch.tensor([[4, 5], [2, 3]])
    q, v = torch.randn(7, 2, 16), torch.randn(26, 2, 16)
    for ref in (torch.rand(2, 7, 2, 2), torch.rand(2, 7, 2, 4)):
        out = attn.eval()(q, value=v, reference_points=ref, spatial_shapes=shapes,
                          level_start_index=torch.tensor([0, 20]))
        assert out.shape == (7, 2, 16)
    with pytest.raises(ValueError, match='cover 26 keys, the value has 25'):
        attn(q, value=v[:25], reference_points=torch.rand(2, 7, 2, 2), spatial_shapes=shapes)
    with pytest.raises(ValueError, match='Last dim of reference_points must be 2 or 4'):
        attn(q, value=v, reference_points=torch.rand(2, 7, 2, 3), spatial_shapes=shapes)
    with pytest.raises(ValueError, match='divisible by num_heads'):
        MultiScaleDeformableAttention(embed_dims=16, num_heads=3)


def test_padding_mask_zeroes_values():
    torch.manual_seed(0)
    attn = MultiScaleDeformableAttention(embed_dims=8, num_heads=1, num_levels=1,
                                         num_points=1, dropout=0.0, batch_first=True)
    shapes = torch.tensor([[2, 2]])
    q, v = torch.randn(1, 1, 8), torch.randn(1, 4, 8)
    mask = torch.ones(1, 4, dtype=torch.bool)
    out = attn(q, value=v, reference_points=torch.rand(1, 1, 1, 2), spatial_shapes=shapes,
               key_padding_mask=mask)
    torch.testing.assert_close(out, q + attn.output_proj.bias)
