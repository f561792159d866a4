import pytest
import torch
from torchvision.ops import roi_align

from ckptzoo.models.roi_heads import SingleRoIExtractor
from ckptzoo.ops import RoIAlign
from ckptzoo.registry import MODELS

STRIDES = [4, 8, 16, 32]


def _extractor(**kw):
    cfg = dict(type='SingleRoIExtractor',
               roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=0),
               out_channels=3, featmap_strides=STRIDES)
    cfg.update(kw)
    return MODELS.build(cfg)


def _square(side, img=0, x=0.):
    return [float(img), x, 0., x + side, side]


def test_level_mapping_boundaries():
    """finest_scale 56: sqrt(w * h) < 112 -> 0, < 224 -> 1, < 448 -> 2, else 3 (clamped)."""
    ext = _extractor()
    sides = [1., 111.9, 112., 223.9, 224., 447.9, 448., 2000.]
    rois = torch.tensor([_square(s) for s in sides])
    assert ext.map_roi_levels(rois, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert ext.map_roi_levels(rois, 2).tolist() == [0, 0, 1, 1, 1, 1, 1, 1]
    # a non-square box maps by its area: 56 x 224 has sqrt(w * h) = 112
    assert ext.map_roi_levels(torch.tensor([[0., 0., 0., 56., 224.]]), 4).tolist() == [1]
    assert _extractor(finest_scale=28).map_roi_levels(rois[:3], 4).tolist() == [0, 1, 2]


def test_roi_align_is_torchvisions_aligned_per_level():
    torch.manual_seed(0)
    feats = [torch.randn(2, 3, 256 // s, 256 // s) for s in STRIDES]
    rois = torch.tensor([_square(20, 0, 3.3), _square(150, 1, 7.), _square(300, 0, 1.),
                         _square(500, 1), _square(60, 1, 100.)])
    out = _extractor()(feats, rois)
    assert out.shape == (5, 3, 7, 7)
    for k, lvl in enumerate([0, 1, 2, 3, 0]):
        expected = roi_align(feats[lvl], rois[k:k + 1], (7, 7), 1 / STRIDES[lvl], 0, True)
        torch.testing.assert_close(out[k:k + 1], expected, rtol=0, atol=0)


def test_aligned_samples_pixel_centres_by_hand():
    """On f(y, x) = x (stride 1), the box [2, 2, 9, 9] has 7 bins of width 1 whose centres
    lie at x = 2.5 + j in image coordinates, i.e. 2 + j in pixel-centre coordinates."""
    feat = torch.arange(16.).repeat(16, 1)[None, None]
    layer = RoIAlign(7, spatial_scale=1.0)
    out = layer(feat, torch.tensor([[0., 2., 2., 9., 9.]]))
    torch.testing.assert_close(out[0, 0], (2. + torch.arange(7.)).repeat(7, 1))
    # mmcv's use_torchvision=True called torchvision without ``aligned``: half a pixel more
    legacy = RoIAlign(7, spatial_scale=1.0, use_torchvision=True)
    torch.testing.assert_close(legacy(feat, torch.tensor([[0., 2., 2., 9., 9.]]))[0, 0],
                               (2.5 + torch.arange(7.)).repeat(7, 1))


def test_empty_levels_stay_in_the_graph():
    """Every level gets a gradient (zeros where no RoI maps to it), so DDP sees every level
    used, as with mmdet's ``feats[i].sum() * 0``; no RoIs at all give an empty output."""
    feats = [torch.randn(1, 3, 64 // s, 64 // s, requires_grad=True) for s in STRIDES]
    out = _extractor()(feats, torch.tensor([_square(20)]))
    out.sum().backward()
    assert feats[0].grad.abs().sum() > 0
    for f in feats[1:]:
        assert f.grad is not None and (f.grad == 0).all()
    empty = _extractor()(feats, torch.zeros(0, 5))
    assert empty.shape == (0, 3, 7, 7)
    feats[1].grad = None
    empty.sum().backward()
    assert feats[1].grad is not None


@pytest.mark.parametrize('pack', ['DeformRoIPoolPack', 'ModulatedDeformRoIPoolPack'])
def test_deformable_roi_layers_learn_per_level(pack):
    """dcn's ``dpool`` configs: one pooling with its own offset MLP per level, at
    ``1 / stride``; levels no RoI maps to give their weights zero gradients (mmdet adds
    every parameter times 0), so DDP sees them used."""
    from ckptzoo.ops import deform_roi_pool
    ext = _extractor(roi_layer=dict(type=pack, output_size=7, output_channels=3,
                                    deform_fc_channels=8))
    assert [type(m).__name__ for m in ext.roi_layers] == [pack] * 4
    assert [m.spatial_scale for m in ext.roi_layers] == [1 / s for s in STRIDES]
    feats = [torch.randn(1, 3, 64 // s, 64 // s, requires_grad=True) for s in STRIDES]
    rois = torch.tensor([_square(20), _square(10, x=5.)])
    out = ext(feats, rois)
    plain = deform_roi_pool(feats[0], rois, None, 7, 0.25)  # zero-initialised offsets
    torch.testing.assert_close(out, plain * (0.5 if 'Modulated' in pack else 1.0))
    out.sum().backward()
    last = ('offset_fc.4.weight', 'offset_fc.4.bias', 'mask_fc.2.weight', 'mask_fc.2.bias')
    for name, p in ext.named_parameters():
        assert p.grad is not None, name
        if not name.startswith('roi_layers.0.'):
            assert (p.grad == 0).all(), name
        elif name.endswith(last):  # the first layers wait for the zero-initialised last one
            assert p.grad.abs().sum() > 0, name


def test_inf_in_an_unused_level_does_not_spread():
    feats = [torch.randn(1, 3, 64 // s, 64 // s) for s in STRIDES]
    feats[3][0, 0, 0, 0] = float('inf')
    assert torch.isfinite(_extractor()(feats, torch.tensor([_square(20)]))).all()


def test_roi_scale_factor_scales_about_the_centre_after_level_mapping():
    torch.manual_seed(0)
    feats = [torch.randn(1, 3, 256 // s, 256 // s) for s in STRIDES]
    rois = torch.tensor([[0., 10., 20., 110., 100.]])  # sqrt(100 * 80) ~ 89: level 0
    out = _extractor()(feats, rois, roi_scale_factor=2.0)
    scaled = torch.tensor([[0., -40., -20., 160., 140.]])  # 200 x 160, still level 0
    torch.testing.assert_close(out, roi_align(feats[0], scaled, (7, 7), 1 / 4, 0, True))
    # one level: mmdet ignored roi_scale_factor there; here it applies too
    one = _extractor(featmap_strides=[4])
    torch.testing.assert_close(one(feats[:1], rois, roi_scale_factor=2.0),
                               roi_align(feats[0], scaled, (7, 7), 1 / 4, 0, True))


def test_num_inputs_and_bad_configs():
    assert _extractor().num_inputs == 4
    with pytest.raises(NotImplementedError, match='RoIAlign'):
        _extractor(roi_layer=dict(type='RoIAlig', output_size=7))
    with pytest.raises(NotImplementedError, match='pool_mode'):
        _extractor(roi_layer=dict(type='RoIAlign', output_size=7, pool_mode='max'))
    with pytest.raises(ValueError, match='4 levels'):
        _extractor()([torch.zeros(1, 3, 8, 8)] * 5, torch.zeros(0, 5))
    assert isinstance(_extractor(), SingleRoIExtractor)
