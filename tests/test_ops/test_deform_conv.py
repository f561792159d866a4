"""mmcv 1.x's deformable convolutions on torchvision: zero offsets give the plain conv; a
non-zero offset samples as a hand-written bilinear reference (mmcv's offset layout, groups and
deform groups); gradients (float64 gradcheck); the packs' keys, zero-initialised offset conv,
mmcv's old offset keys, registry names."""
import math

import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import CONV_LAYERS, build_conv_layer
from ckptzoo.ops import (DeformConv2d, DeformConv2dPack, ModulatedDeformConv2d,
                         ModulatedDeformConv2dPack, upgrade_offset_keys)


def _bilinear(img, y, x):
    """``img[y, x]`` with zeros outside (the rule of mmcv's kernels)."""
    h, w = img.shape
    if y <= -1 or y >= h or x <= -1 or x >= w:
        return img.new_zeros(())
    y0, x0 = math.floor(y), math.floor(x)
    out = img.new_zeros(())
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                out = out + wy * wx * img[yy, xx]
    return out


def _reference(x, offset, weight, bias=None, mask=None, stride=1, padding=0, dilation=1,
               groups=1, deform_groups=1):
    """Loops over every output: offset channel ``g * 2K + 2k`` is y, ``+1`` x, of kernel
    point ``k`` (row-major) for deform group ``g``; mask channel ``g * K + k``."""
    b, c, _, _ = x.shape
    oc, cpg, kh, kw = weight.shape
    kk = kh * kw
    ho, wo = offset.shape[2:]
    out = x.new_zeros(b, oc, ho, wo)
    for n in range(b):
        for o in range(oc):
            g = o // (oc // groups)
            for i in range(ho):
                for j in range(wo):
                    acc = x.new_zeros(())
                    for ci in range(cpg):
                        ch = g * cpg + ci
                        dg = ch // (c // deform_groups)
                        for k in range(kk):
                            ki, kj = divmod(k, kw)
                            y = i * stride - padding + ki * dilation + \
                                offset[n, dg * 2 * kk + 2 * k, i, j].item()
                            xx = j * stride - padding + kj * dilation + \
                                offset[n, dg * 2 * kk + 2 * k + 1, i, j].item()
                            v = _bilinear(x[n, ch], y, xx)
                            if mask is not None:
                                v = v * mask[n, dg * kk + k, i, j]
                            acc = acc + weight[o, ci, ki, kj] * v
                    out[n, o, i, j] = acc + (0 if bias is None else bias[o])
    return out


def test_zero_offset_is_the_plain_conv_and_keys():
    torch.manual_seed(0)
    conv = DeformConv2d(3, 5, 3, padding=1)
    assert list(conv.state_dict()) == ['weight']
    x = torch.randn(2, 3, 6, 7)
    out = conv(x, torch.zeros(2, 18, 6, 7))
    torch.testing.assert_close(out, F.conv2d(x, conv.weight, padding=1))


@pytest.mark.parametrize('groups,deform_groups', [(1, 1), (2, 1), (1, 2), (2, 4)])
def test_zero_offset_unit_mask_is_the_plain_conv(groups, deform_groups):
    torch.manual_seed(0)
    conv = ModulatedDeformConv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=groups,
                                 deform_groups=deform_groups)
    assert list(conv.state_dict()) == ['weight', 'bias']
    conv.bias.data.normal_()
    x = torch.randn(2, 4, 7, 6)
    ho, wo = 4, 3
    out = conv(x, torch.zeros(2, deform_groups * 18, ho, wo),
               torch.ones(2, deform_groups * 9, ho, wo))
    ref = F.conv2d(x, conv.weight, conv.bias, stride=2, padding=2, dilation=2, groups=groups)
    torch.testing.assert_close(out, ref)


def test_tiny_input_padded_like_mmcv():
    torch.manual_seed(0)
    conv = DeformConv2d(2, 4, 3, padding=1)
    x = torch.randn(1, 2, 1, 2)
    out = conv(x, torch.zeros(1, 18, 1, 2))
    assert out.shape == (1, 4, 1, 2)
    ref = F.conv2d(F.pad(x, (0, 1, 0, 2)), conv.weight, padding=1)[:, :, :1, :2]
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize('groups,deform_groups,stride', [(1, 1, 1), (2, 2, 1), (1, 2, 2)])
def test_offsets_sample_bilinearly_as_the_reference(groups, deform_groups, stride):
    torch.manual_seed(1)
    x = torch.randn(1, 4, 4, 5, dtype=torch.float64)
    conv = DeformConv2d(4, 2, 3, stride=stride, padding=1, groups=groups,
                        deform_groups=deform_groups).double()
    ho, wo = (4 + 2 - 3) // stride + 1, (5 + 2 - 3) // stride + 1
    offset = torch.randn(1, deform_groups * 18, ho, wo, dtype=torch.float64) * 1.5
    ref = _reference(x, offset, conv.weight.detach(), stride=stride, padding=1, groups=groups,
                     deform_groups=deform_groups)
    torch.testing.assert_close(conv(x, offset), ref, atol=1e-12, rtol=1e-12)


def test_modulated_samples_as_the_reference():
    torch.manual_seed(2)
    x = torch.randn(1, 4, 4, 4, dtype=torch.float64)
    conv = ModulatedDeformConv2d(4, 4, 3, padding=1, groups=2, deform_groups=2).double()
    conv.bias.data.normal_()
    offset = torch.randn(1, 36, 4, 4, dtype=torch.float64) * 2
    mask = torch.rand(1, 18, 4, 4, dtype=torch.float64)
    ref = _reference(x, offset, conv.weight.detach(), conv.bias.detach(), mask, padding=1,
                     groups=2, deform_groups=2)
    torch.testing.assert_close(conv(x, offset, mask), ref, atol=1e-12, rtol=1e-12)


def test_gradcheck_float64():
    torch.manual_seed(3)
    x = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    # offsets away from integers: the bilinear weights have kinks there
    offset = (torch.rand(1, 18, 3, 3, dtype=torch.float64) * 0.8 + 0.1).requires_grad_()
    mask = torch.rand(1, 9, 3, 3, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, dtype=torch.float64, requires_grad=True)
    conv = ModulatedDeformConv2d(2, 2, 3, padding=1).double()
    v1 = DeformConv2d(2, 2, 3, padding=1).double()

    def f(x, offset, mask, weight, bias):
        conv.weight, conv.bias = weight, bias
        return conv._conv(x, offset, mask, bias)

    def g(x, offset, weight):
        v1.weight = weight
        return v1._conv(x, offset)

    del conv.weight, conv.bias, v1.weight  # plain tensors in their place
    assert torch.autograd.gradcheck(f, (x, offset, mask, weight, bias))
    assert torch.autograd.gradcheck(g, (x, offset, weight))


def test_packs_keys_init_and_registry_names():
    assert CONV_LAYERS['DCN'] is DeformConv2dPack
    assert CONV_LAYERS['DCNv2'] is ModulatedDeformConv2dPack
    dcn = build_conv_layer(dict(type='DCN', deform_groups=2), 4, 8, 3, padding=1, bias=False)
    assert list(dcn.state_dict()) == ['weight', 'conv_offset.weight', 'conv_offset.bias']
    assert dcn.conv_offset.weight.shape == (36, 4, 3, 3)
    dcn2 = build_conv_layer(dict(type='DCNv2', deform_groups=1), 4, 8, 3, stride=2, padding=1,
                            groups=2, bias=False)
    assert list(dcn2.state_dict()) == ['weight', 'conv_offset.weight', 'conv_offset.bias']
    assert dcn2.weight.shape == (8, 2, 3, 3) and dcn2.conv_offset.weight.shape == (27, 4, 3, 3)
    assert dcn2.conv_offset.stride == (2, 2)
    for m in (dcn, dcn2):
        assert not m.conv_offset.weight.any() and not m.conv_offset.bias.any()
    x = torch.randn(2, 4, 5, 5)
    # zero offsets: v1 is the plain conv, v2 the plain conv with every point weighted 0.5
    torch.testing.assert_close(dcn(x), F.conv2d(x, dcn.weight, padding=1))
    torch.testing.assert_close(dcn2(x), F.conv2d(x, dcn2.weight, stride=2, padding=1,
                                                  groups=2) * 0.5)


def test_v2_pack_splits_offset_and_mask_as_mmcv():
    torch.manual_seed(4)
    m = ModulatedDeformConv2dPack(2, 3, 3, padding=1, deform_groups=2).double()
    m.conv_offset.weight.data.normal_(0, 0.3)
    m.conv_offset.bias.data.normal_()
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    o = m.conv_offset(x)  # 54 channels: o1 (18), o2 (18), mask (18)
    offset, mask = torch.cat((o[:, :18], o[:, 18:36]), 1), o[:, 36:].sigmoid()
    ref = _reference(x, offset, m.weight.detach(), m.bias.detach(), mask, padding=1,
                     deform_groups=2)
    torch.testing.assert_close(m(x), ref, atol=1e-12, rtol=1e-12)


def test_old_offset_keys_load_as_mmcv():
    """A version-1 state dict (no metadata) keeps ``<name>_offset.*`` beside the layer;
    ckptzoo's checkpoint loader renames them as mmcv's packs do."""
    from ckptzoo.runner.checkpoint_match import load_state_dict
    net = torch.nn.Module()
    net.conv2 = ModulatedDeformConv2dPack(2, 2, 3, padding=1)
    sd = {'conv2.weight': torch.ones(2, 2, 3, 3), 'conv2.bias': torch.ones(2),
          'conv2_offset.weight': torch.full((27, 2, 3, 3), 2.), 'conv2_offset.bias':
          torch.full((27, ), 3.)}
    up = upgrade_offset_keys(net, sd)
    assert sorted(up) == sorted(net.state_dict()) and 'conv2_offset.weight' in sd
    load_state_dict(net, sd, 'old.pth', strict=True)
    assert (net.conv2.conv_offset.weight == 2).all() and (net.conv2.conv_offset.bias == 3).all()
    new = net.state_dict()  # version 2 (metadata): left as it is
    assert upgrade_offset_keys(net, new) is new
    net.conv2._load_from_state_dict(dict(sd), 'conv2.', {}, True, [], [], [])  # whole dict
    fresh = DeformConv2dPack(2, 2, 3)
    DeformConv2dPack(2, 2, 3).load_state_dict(fresh.state_dict(), strict=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match='bias'):
        DeformConv2d(2, 2, 3, bias=True)
    with pytest.raises(ValueError, match='groups 3'):
        DeformConv2dPack(4, 4, 3, groups=3)
    with pytest.raises(ValueError, match='deform_groups 3'):
        ModulatedDeformConv2dPack(4, 4, 3, deform_groups=3)
    with pytest.raises(TypeError):
        ModulatedDeformConv2d(4, 4, 3, im2col_step=32)  # mmcv's v2 has no im2col_step
    conv = DeformConv2d(2, 2, 3, deform_groups=2)
    with pytest.raises(ValueError, match='offset must be B x 36'):
        conv(torch.randn(1, 2, 5, 5), torch.zeros(1, 18, 3, 3))


def test_deformable_groups_is_mmcvs_deprecated_alias():
    with pytest.warns(DeprecationWarning):
        m = ModulatedDeformConv2dPack(4, 4, 3, deformable_groups=2)
    assert m.deform_groups == 2 and m.conv_offset.out_channels == 54
    with pytest.warns(DeprecationWarning):
        assert DeformConv2dPack(4, 4, 3, deformable_groups=4).deform_groups == 4
