"""Deformable RoI pooling equals a slow loop written from mmcv 1.x's CUDA kernel
(``deform_roi_pool_cuda_kernel.cuh`` with ``bilinear_interpolate``), with and without offsets,
for RoIs inside, on and across the border, adaptive and fixed sampling; gradients by gradcheck;
the Pack modules' keys and initial values as mmcv's."""
import math

import pytest
import torch

from ckptzoo.ops import (DeformRoIPool, DeformRoIPoolPack, ModulatedDeformRoIPoolPack,
                         deform_roi_pool)


def _bilinear(feat, y, x):
    """mmcv's ``bilinear_interpolate`` on one channel-vector at a time (``feat [C, H, W]``)."""
    _, height, width = feat.shape
    if y < -1.0 or y > height or x < -1.0 or x > width:
        return feat.new_zeros(feat.size(0))
    y = max(y, 0.0)
    x = max(x, 0.0)
    y_low, x_low = int(y), int(x)
    if y_low >= height - 1:
        y_high = y_low = height - 1
        y = float(y_low)
    else:
        y_high = y_low + 1
    if x_low >= width - 1:
        x_high = x_low = width - 1
        x = float(x_low)
    else:
        x_high = x_low + 1
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    return (hy * hx * feat[:, y_low, x_low] + hy * lx * feat[:, y_low, x_high]
            + ly * hx * feat[:, y_high, x_low] + ly * lx * feat[:, y_high, x_high])


def _reference(feat, rois, offset, out_size, scale, ratio, gamma):
    """The kernel, one output bin at a time."""
    out_h, out_w = out_size
    out = feat.new_zeros(rois.size(0), feat.size(1), out_h, out_w)
    for n in range(rois.size(0)):
        b, x1, y1, x2, y2 = rois[n].tolist()
        start_w, start_h = x1 * scale - 0.5, y1 * scale - 0.5
        roi_w, roi_h = (x2 * scale - 0.5) - start_w, (y2 * scale - 0.5) - start_h
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = ratio if ratio > 0 else int(math.ceil(roi_h / out_h))
        grid_w = ratio if ratio > 0 else int(math.ceil(roi_w / out_w))
        for ph in range(out_h):
            for pw in range(out_w):
                sw, sh = start_w, start_h
                if offset is not None:
                    sw += gamma * roi_w * float(offset[n, 0, ph, pw])
                    sh += gamma * roi_h * float(offset[n, 1, ph, pw])
                acc = feat.new_zeros(feat.size(1))
                for iy in range(grid_h):
                    y = sh + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                    for ix in range(grid_w):
                        x = sw + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                        acc = acc + _bilinear(feat[int(b)], y, x)
                out[n, :, ph, pw] = acc / max(grid_h * grid_w, 1)
    return out


def _rois(height, width, stride):
    """Boxes (image pixels) inside, touching and crossing the border, tiny and degenerate."""
    H, W = height * stride, width * stride
    return torch.tensor([[0, 3.0, 5.0, 40.0, 30.0], [1, 0.0, 0.0, W, H],
                         [0, -20.0, -10.0, 15.0, 12.0], [1, W - 10.0, H - 7.0, W + 25.0, H + 9.0],
                         [1, 17.3, 2.2, 18.1, 2.9], [0, 9.0, 9.0, 9.0, 9.0],
                         [0, 30.0, 20.0, 10.0, 40.0]], dtype=torch.float64)


@pytest.mark.parametrize('ratio', [0, 2])
@pytest.mark.parametrize('with_offset', [False, True])
def test_equals_the_kernel(ratio, with_offset):
    torch.manual_seed(0)
    stride = 4
    feat = torch.randn(2, 3, 9, 11, dtype=torch.float64)
    rois = _rois(9, 11, stride)
    offset = torch.randn(len(rois), 2, 3, 2, dtype=torch.float64) * 3 if with_offset else None
    ours = deform_roi_pool(feat, rois, offset, (3, 2), 1 / stride, ratio, 0.1)
    ref = _reference(feat, rois, offset, (3, 2), 1 / stride, ratio, 0.1)
    assert (ours - ref).abs().max() < 1e-12
    # the offsets move samples off the map, too
    assert ours.abs().sum() > 0


def test_wide_and_tall_rois_of_one_image():
    """Adaptive grids differ per RoI (8 x 1, 1 x 6, 3 x 3 samples): each gets its own."""
    torch.manual_seed(2)
    feat = torch.randn(1, 2, 40, 55, dtype=torch.float64)
    rois = torch.tensor([[0, 3.0, 1.0, 200.0, 12.0], [0, 5.0, 7.0, 17.0, 160.0],
                         [0, 100.0, 60.0, 170.0, 130.0]], dtype=torch.float64)
    offset = torch.randn(3, 2, 7, 7, dtype=torch.float64)
    ours = deform_roi_pool(feat, rois, offset, 7, 0.25, 0, 0.1)
    ref = _reference(feat, rois, offset, (7, 7), 0.25, 0, 0.1)
    assert (ours - ref).abs().max() < 1e-12


def test_zero_offset_is_roi_align():
    from torchvision.ops import roi_align
    torch.manual_seed(0)
    feat = torch.randn(2, 4, 9, 11, dtype=torch.float64)
    rois = _rois(9, 11, 4)[:4]
    ours = DeformRoIPool(7, 0.25, 0)(feat, rois)
    assert torch.allclose(ours, roi_align(feat, rois, 7, 0.25, 0, True), atol=1e-12)
    assert torch.equal(ours, DeformRoIPool(7, 0.25, 0)(feat, rois, torch.zeros(4, 2, 7, 7,
                                                                                 dtype=feat.dtype)))


def test_float32():
    torch.manual_seed(1)
    feat = torch.randn(2, 5, 12, 10)
    rois = _rois(12, 10, 8).float()
    offset = torch.randn(len(rois), 2, 7, 7)
    ours = deform_roi_pool(feat, rois, offset, 7, 1 / 8, 0, 0.1)
    ref = _reference(feat.double(), rois.double(), offset.double(), (7, 7), 1 / 8, 0, 0.1)
    assert ours.dtype == torch.float32 and (ours.double() - ref).abs().max() < 1e-5


def test_gradcheck():
    torch.manual_seed(0)
    feat = torch.randn(2, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1.0, 2.0, 13.0, 11.0], [1, -3.0, 4.0, 9.0, 25.0]],
                        dtype=torch.float64)
    offset = (torch.randn(2, 2, 2, 2, dtype=torch.float64) * 0.7).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda f, o: deform_roi_pool(f, rois, o, 2, 0.5, 2, 0.1), (feat, offset))
    assert torch.autograd.gradcheck(
        lambda f, o: deform_roi_pool(f, rois, o, 2, 0.5, 0, 0.1), (feat, offset))


def test_no_rois():
    feat = torch.randn(1, 3, 5, 5, requires_grad=True)
    out = DeformRoIPoolPack(7, 3, 16)(feat, feat.new_zeros(0, 5))
    assert out.shape == (0, 3, 7, 7)


# mmcv 1.7.2's state dicts (names and shapes) for output_size=7, output_channels=256,
# deform_fc_channels=1024 (read from mmcv's python module built with a stub op)
_PACK_KEYS = {'offset_fc.0.weight': (1024, 12544), 'offset_fc.0.bias': (1024, ),
              'offset_fc.2.weight': (1024, 1024), 'offset_fc.2.bias': (1024, ),
              'offset_fc.4.weight': (98, 1024), 'offset_fc.4.bias': (98, )}
_MDPACK_KEYS = dict(_PACK_KEYS, **{'mask_fc.0.weight': (1024, 12544),
                                   'mask_fc.0.bias': (1024, ),
                                   'mask_fc.2.weight': (49, 1024), 'mask_fc.2.bias': (49, )})


@pytest.mark.parametrize('cls, keys', [(DeformRoIPoolPack, _PACK_KEYS),
                                       (ModulatedDeformRoIPoolPack, _MDPACK_KEYS)])
def test_pack_keys_and_init(cls, keys):
    m = cls(output_size=7, output_channels=256)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == keys
    assert not m.offset_fc[4].weight.any() and not m.offset_fc[4].bias.any()
    if hasattr(m, 'mask_fc'):
        assert not m.mask_fc[2].weight.any() and isinstance(m.mask_fc[3], torch.nn.Sigmoid)
    # zero-initialised: the pack is plain pooling at first (times 0.5 for the mask)
    feat = torch.randn(1, 256, 8, 8)
    rois = torch.tensor([[0, 2.0, 3.0, 20.0, 25.0]])
    plain = DeformRoIPool(7, 0.25)(feat, rois)
    m.spatial_scale = 0.25
    expect = plain * 0.5 if hasattr(m, 'mask_fc') else plain
    assert torch.allclose(m(feat, rois), expect, atol=1e-6)


def test_pack_gradients_reach_the_offsets():
    torch.manual_seed(0)
    m = ModulatedDeformRoIPoolPack(3, 4, 8, spatial_scale=0.5).double()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.3)
    feat = torch.randn(1, 4, 6, 6, dtype=torch.float64, requires_grad=True)
    rois = torch.tensor([[0, 1.0, 1.0, 9.0, 8.0]], dtype=torch.float64)
    m(feat, rois).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


def test_bad_arguments():
    with pytest.raises(ValueError, match='sampling_ratio'):
        DeformRoIPool(7, sampling_ratio=-1)
    with pytest.raises(ValueError, match='output_channels'):
        DeformRoIPoolPack(7, 8, 16)(torch.randn(1, 4, 5, 5), torch.zeros(1, 5))
    with pytest.raises(ValueError, match='rois'):
        deform_roi_pool(torch.randn(1, 4, 5, 5), torch.zeros(1, 4), None, 7)
    with pytest.raises(ValueError, match='offset'):
        deform_roi_pool(torch.randn(1, 4, 5, 5), torch.zeros(1, 5), torch.zeros(1, 2, 3, 3), 7)
