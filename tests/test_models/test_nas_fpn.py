"""NASFPN: mmdet 2.28.2's keys for nas_fpn/'s neck, shapes, units, every checkpoint mode exact
(BN statistics included), bad arguments refused."""
import pytest
import torch

from ckptzoo.models import NASFPN
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, sizes, n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, c, h, w, generator=gen) for c, (h, w) in zip(channels, sizes)]


def test_config_neck_keys_and_shapes_as_mmdet():
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg('nas_fpn/retinanet_r50_nasfpn_crop640_50e_coco.py'))
    state = neck.state_dict()
    assert len(state) == 373 and sum(v.numel() for v in state.values()) == 30017846
    assert list(state)[:2] == ['lateral_convs.0.conv.weight', 'lateral_convs.0.bn.weight']
    assert list(state)[-1] == 'fpn_stages.6.gp_75_6.out_conv.bn.num_batches_tracked'
    assert 'extra_downsamples.1.0.conv.weight' in state
    assert not any('gp_43_5' in k or 'gp_54_7' in k for k in state)
    assert list(neck.checkpoint_units()) == ['lateral'] + [f'stage{s}' for s in range(7)]
    small = NASFPN([4, 8, 16, 32], 8, 5, 2, start_level=1)
    with torch.no_grad():
        outs = small(_feats([4, 8, 16, 32], [(64, 64), (32, 32), (16, 16), (8, 8)]))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 32 // 2**i, 32 // 2**i) for i in range(5)]


@pytest.mark.parametrize('norm_cfg,sizes', [
    (dict(type='BN'), [(64, 64), (32, 32), (16, 16), (8, 8)]),
    (None, [(80, 56), (40, 28), (20, 14), (10, 7)]),  # pads before pooling, odd upsampling
])
def test_every_mode_is_exact(single_thread, norm_cfg, sizes):
    assert_every_mode_exact(
        lambda cp: NASFPN([4, 8, 8, 16], 8, 5, 2, start_level=1, norm_cfg=norm_cfg,
                          with_cp=cp),
        _feats([4, 8, 8, 16], sizes))


def test_bad_arguments():
    with pytest.raises(ValueError, match='num_outs must be 5'):
        NASFPN([4, 8, 8], 8, 4, 1)
    with pytest.raises(ValueError, match='start_level'):
        NASFPN([4, 8, 8], 8, 5, 1, start_level=3)
    with pytest.raises(TypeError, match='with_cp'):
        NASFPN([4, 8, 8], 8, 5, 1, with_cp=None)
    with pytest.raises(ValueError, match='3 inputs'):
        NASFPN([4, 8, 8], 8, 5, 1)([torch.randn(1, 4, 8, 8)])
