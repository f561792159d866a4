import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_neck

IN_CHANNELS = [4, 8, 16, 32]


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(1, c, 32 // 2**i, 32 // 2**i) for i, c in enumerate(IN_CHANNELS)]


def _fpn(**kw):
    cfg = dict(type='FPN', in_channels=IN_CHANNELS, out_channels=6, start_level=1,
               add_extra_convs='on_input', num_outs=5)
    cfg.update(kw)
    torch.manual_seed(1)
    return build_neck(cfg)


@pytest.mark.parametrize('mode', [False, True, 'on_input', 'on_lateral', 'on_output'])
def test_output_shapes(mode):
    fpn = _fpn(add_extra_convs=mode)
    outs = fpn(_inputs())
    assert [tuple(o.shape) for o in outs] == [(1, 6, 16, 16), (1, 6, 8, 8), (1, 6, 4, 4),
                                              (1, 6, 2, 2), (1, 6, 1, 1)]
    assert len(fpn.fpn_convs) == (3 if mode is False else 5)


def test_extra_level_sources():
    x = _inputs()
    fpn = _fpn(add_extra_convs='on_input')
    assert fpn.fpn_convs[3].conv.in_channels == 32  # the last backbone output
    outs = fpn(x)
    torch.testing.assert_close(outs[3], fpn.fpn_convs[3](x[3]))
    torch.testing.assert_close(outs[4], fpn.fpn_convs[4](outs[3]))
    fpn = _fpn(add_extra_convs='on_lateral')
    torch.testing.assert_close(fpn(x)[3], fpn.fpn_convs[3](fpn.lateral_convs[2](x[3])))
    fpn = _fpn(add_extra_convs='on_output', relu_before_extra_convs=True)
    outs = fpn(x)
    torch.testing.assert_close(outs[3], fpn.fpn_convs[3](outs[2]))
    torch.testing.assert_close(outs[4], fpn.fpn_convs[4](F.relu(outs[3])))
    fpn = _fpn(add_extra_convs=False)
    outs = fpn(x)
    torch.testing.assert_close(outs[3], outs[2][..., ::2, ::2])
    torch.testing.assert_close(outs[4], outs[3][..., ::2, ::2])


def test_top_down_path():
    x = _inputs()
    fpn = _fpn(start_level=0, add_extra_convs=False, num_outs=4)
    lat = [conv(x[i]) for i, conv in enumerate(fpn.lateral_convs)]
    p5 = lat[3]
    p4 = lat[2] + F.interpolate(p5, scale_factor=2, mode='nearest')
    outs = fpn(x)
    torch.testing.assert_close(outs[3], fpn.fpn_convs[3](p5))
    torch.testing.assert_close(outs[2], fpn.fpn_convs[2](p4))


def test_state_dict_keys_match_mmdet():
    keys = set(_fpn().state_dict())
    assert {'lateral_convs.0.conv.weight', 'lateral_convs.0.conv.bias',
            'fpn_convs.0.conv.weight', 'fpn_convs.4.conv.bias'} <= keys
    assert len(keys) == 2 * (3 + 5)
    gn = _fpn(norm_cfg=dict(type='GN', num_groups=2), no_norm_on_lateral=True)
    keys = set(gn.state_dict())
    assert 'fpn_convs.0.gn.weight' in keys and 'lateral_convs.0.gn.weight' not in keys
    assert 'lateral_convs.0.conv.bias' in keys and 'fpn_convs.0.conv.bias' not in keys


def test_xavier_init_zero_bias():
    fpn = _fpn()
    assert all((m.conv.bias == 0).all() for m in fpn.fpn_convs)


def test_end_level_and_errors():
    fpn = _fpn(start_level=0, end_level=2, num_outs=3, add_extra_convs=False)
    assert [o.shape[-1] for o in fpn(_inputs())] == [32, 16, 8]
    with pytest.raises(ValueError, match='num_outs'):
        _fpn(start_level=0, end_level=2, num_outs=4)
    with pytest.raises(ValueError, match='add_extra_convs'):
        _fpn(add_extra_convs='on_top')
    with pytest.raises(ValueError, match='num_outs'):
        _fpn(num_outs=2)
