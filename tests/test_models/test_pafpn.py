"""PAFPN: mmdet 2.28.2's keys for pafpn/faster_rcnn_r50_pafpn_1x_coco.py, shapes, units, every
checkpoint mode exact, bad arguments refused."""
import pytest
import torch

from ckptzoo.models import PAFPN
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, size=32, n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, c, size // 2**i, size // 2**i, generator=gen)
            for i, c in enumerate(channels)]


def test_config_neck_keys_and_shapes_as_mmdet(single_thread):
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg('pafpn/faster_rcnn_r50_pafpn_1x_coco.py'))
    state = neck.state_dict()
    assert len(state) == 28 and sum(v.numel() for v in state.values()) == 6884864
    assert list(state)[:2] == ['lateral_convs.0.conv.weight', 'lateral_convs.0.conv.bias']
    assert list(state)[-4:] == ['pafpn_convs.1.conv.weight', 'pafpn_convs.1.conv.bias',
                                'pafpn_convs.2.conv.weight', 'pafpn_convs.2.conv.bias']
    assert list(neck.checkpoint_units()) == ['level3', 'level2', 'level1', 'level0',
                                             'bottom_up1', 'bottom_up2', 'bottom_up3']
    small = PAFPN([4, 8, 16, 32], 8, num_outs=5)
    with torch.no_grad():
        outs = small(_feats([4, 8, 16, 32]))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 32 // 2**i, 32 // 2**i) for i in range(5)]


@pytest.mark.parametrize('kw', [
    dict(),
    dict(add_extra_convs='on_output', relu_before_extra_convs=True, num_outs=6,
         norm_cfg=dict(type='BN')),
    dict(add_extra_convs='on_lateral', start_level=1, norm_cfg=dict(type='BN'),
         act_cfg=dict(type='ReLU')),
    dict(add_extra_convs='on_input', end_level=2, num_outs=3),
])
def test_every_mode_is_exact(single_thread, kw):
    kw = dict(dict(num_outs=5), **kw)
    assert_every_mode_exact(lambda cp: PAFPN([4, 8, 8, 16], 8, with_cp=cp, **kw),
                            _feats([4, 8, 8, 16]))


def test_bad_arguments():
    with pytest.raises(TypeError, match='with_cp'):
        PAFPN([4, 8], 8, 2, with_cp='yes')
    with pytest.raises(ValueError, match='add_extra_convs'):
        PAFPN([4, 8], 8, 3, add_extra_convs='on_top')
    with pytest.raises(ValueError, match='num_outs'):
        PAFPN([4, 8], 8, 1)
    with pytest.raises(ValueError, match='2 inputs'):
        PAFPN([4, 8], 8, 2)([torch.randn(1, 4, 8, 8)])
