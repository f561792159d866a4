"""NASFCOS_FPN: mmdet 2.28.2's keys for nas_fcos/'s neck (its input convs as plain convs: the
configs' DCNv2 is not in the zoo yet), shapes, units, every checkpoint mode exact, bad
arguments refused."""
import pytest
import torch

from ckptzoo.models import NASFCOS_FPN
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg

CELLS = ['c22_1', 'c22_2', 'c32', 'c02', 'c42', 'c36', 'c61']


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, sizes, n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, c, h, w, generator=gen) for c, (h, w) in zip(channels, sizes)]


def test_config_neck_keys_and_shapes_as_mmdet():
    cfg = mmdet_neck_cfg('nas_fcos/nas_fcos_nashead_r50_caffe_fpn_gn-head_4x4_1x_coco.py')
    cfg['conv_cfg'] = None
    with torch.device('meta'):
        neck = build_model(cfg)
    state = neck.state_dict()
    assert len(state) == 148 and sum(v.numel() for v in state.values()) == 9211926
    assert list(state)[:2] == ['adapt_convs.0.conv.weight', 'adapt_convs.0.bn.weight']
    assert list(state)[-2:] == ['extra_downsamples.1.conv.weight',
                                'extra_downsamples.1.conv.bias']
    assert 'fpn.c32.input1_conv.conv.weight' in state
    assert not any(k.startswith('fpn.c32.input2_conv') for k in state)
    # the cells' out conv: BN over the concatenation, ReLU, then a grouped 1x1 conv
    out_conv = neck.fpn['c61'].out_conv
    assert out_conv.order == ('norm', 'act', 'conv') and out_conv.conv.groups == 256
    assert out_conv.bn.num_features == 512
    assert list(neck.checkpoint_units()) == ['adapt'] + CELLS + ['merge', 'extra0', 'extra1']
    small = NASFCOS_FPN([4, 8, 16, 32], 8, 5)
    with torch.no_grad():
        outs = small(_feats([4, 8, 16, 32], [(64, 64), (32, 32), (16, 16), (8, 8)]))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 32 // 2**i, 32 // 2**i) for i in range(5)]


@pytest.mark.parametrize('norm_cfg,sizes', [
    (dict(type='BN'), [(64, 64), (32, 32), (16, 16), (8, 8)]),
    (None, [(80, 56), (40, 28), (20, 14), (10, 7)]),
])
def test_every_mode_is_exact(single_thread, norm_cfg, sizes):
    assert_every_mode_exact(
        lambda cp: NASFCOS_FPN([4, 8, 8, 16], 8, 5, norm_cfg=norm_cfg, with_cp=cp),
        _feats([4, 8, 8, 16], sizes))


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg'):
        NASFCOS_FPN([4, 8, 8, 16], 8, 5, init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='3 levels'):
        NASFCOS_FPN([4, 8, 8, 16], 8, 5, start_level=2)
    with pytest.raises(ValueError, match='4 inputs'):
        NASFCOS_FPN([4, 8, 8, 16], 8, 5)([torch.randn(1, 4, 8, 8)])
