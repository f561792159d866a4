"""ChannelMapper: mmdet 2.28.2's keys for Deformable DETR's neck, shapes, every checkpoint mode
exact, bad arguments refused."""
import pytest
import torch

from ckptzoo.models import ChannelMapper
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, size=16):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(2, c, size // 2**i, size // 2**i, generator=gen)
            for i, c in enumerate(channels)]


def test_config_neck_keys_and_shapes_as_mmdet():
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg(
            'deformable_detr/deformable_detr_r50_16x2_50e_coco.py'))
    state = neck.state_dict()
    assert len(state) == 12 and sum(v.numel() for v in state.values()) == 5638144
    assert list(state)[:3] == ['convs.0.conv.weight', 'convs.0.gn.weight', 'convs.0.gn.bias']
    assert list(state)[-3:] == ['extra_convs.0.conv.weight', 'extra_convs.0.gn.weight',
                                'extra_convs.0.gn.bias']
    assert list(neck.checkpoint_units()) == ['level0', 'level1', 'level2', 'level3']
    small = ChannelMapper([4, 8, 16], 8, num_outs=5)
    with torch.no_grad():
        outs = small(_feats([4, 8, 16]))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 16 // 2**i, 16 // 2**i) for i in range(5)]
    assert ChannelMapper([4, 8], 8).extra_convs is None


@pytest.mark.parametrize('kw', [dict(num_outs=5, norm_cfg=dict(type='BN')),
                                dict(kernel_size=1, act_cfg=None)])
def test_every_mode_is_exact(single_thread, kw):
    assert_every_mode_exact(lambda cp: ChannelMapper([4, 8, 16], 8, with_cp=cp, **kw),
                            _feats([4, 8, 16]))


def test_bad_arguments():
    with pytest.raises(TypeError, match='in_channels'):
        ChannelMapper((4, 8), 8)
    with pytest.raises(ValueError, match='num_outs'):
        ChannelMapper([4, 8], 8, num_outs=1)
    with pytest.raises(ValueError, match='2 inputs'):
        ChannelMapper([4, 8], 8)([torch.randn(1, 4, 8, 8)])
