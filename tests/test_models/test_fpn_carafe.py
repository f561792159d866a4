"""FPN_CARAFE: mmdet 2.28.2's keys for carafe/'s neck, shapes, units, every upsampling, every
checkpoint mode exact (BN statistics included), bad arguments refused."""
import pytest
import torch

from ckptzoo.models import FPN_CARAFE
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg

SIZES = [(12, 10), (6, 5), (3, 3), (2, 2)]  # odd sizes: the upsampled level is cut to size


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, sizes=SIZES, n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, c, h, w, generator=gen) for c, (h, w) in zip(channels, sizes)]


def test_config_neck_keys_and_shapes_as_mmdet():
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg('carafe/faster_rcnn_r50_fpn_carafe_1x_coco.py'))
    state = neck.state_dict()
    assert len(state) == 36 and sum(v.numel() for v in state.values()) == 8949904
    assert list(state)[:2] == ['lateral_convs.0.conv.weight', 'lateral_convs.0.conv.bias']
    assert list(state)[-2:] == ['upsample_modules.3.content_encoder.weight',
                                'upsample_modules.3.content_encoder.bias']
    assert tuple(state['upsample_modules.0.content_encoder.weight'].shape) == (100, 64, 3, 3)
    assert tuple(state['lateral_convs.4.conv.weight'].shape) == (256, 2048, 3, 3)
    assert list(neck.checkpoint_units()) == ['laterals'] + [f'level{i}' for i in
                                                            range(4, -1, -1)]
    small = FPN_CARAFE([4, 8, 16, 32], 8, 5, upsample_cfg=dict(type='carafe',
                                                               compressed_channels=4))
    with torch.no_grad():
        outs = small(_feats([4, 8, 16, 32]))
    assert [tuple(o.shape[2:]) for o in outs] == SIZES + [(1, 1)]


@pytest.mark.parametrize('kw', [
    dict(upsample_cfg=dict(type='carafe', up_kernel=3, up_group=2, compressed_channels=4)),
    dict(norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU'), order=('act', 'conv', 'norm'),
         start_level=1, upsample_cfg=dict(type='carafe', compressed_channels=4)),
    dict(upsample_cfg=dict(type='nearest')),
    dict(upsample_cfg=dict(type='bilinear'), end_level=2, num_outs=3),
    dict(upsample_cfg=dict(type='deconv', upsample_kernel=3)),
    dict(upsample_cfg=dict(type='pixel_shuffle', upsample_kernel=3)),
])
def test_every_mode_is_exact(single_thread, kw):
    kw = dict(dict(num_outs=5), **kw)
    assert_every_mode_exact(lambda cp: FPN_CARAFE([4, 8, 8, 16], 8, with_cp=cp, **kw),
                            _feats([4, 8, 8, 16]))


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg'):
        FPN_CARAFE([4, 8], 8, 2, init_cfg=dict(type='Xavier'))
    with pytest.raises(ValueError, match='upsample_cfg type'):
        FPN_CARAFE([4, 8], 8, 2, upsample_cfg=dict(type=None))
    with pytest.raises(ValueError, match='upsample_kernel'):
        FPN_CARAFE([4, 8], 8, 2, upsample_cfg=dict(type='deconv'))
    with pytest.raises(ValueError, match='foo'):
        FPN_CARAFE([4, 8], 8, 2, upsample_cfg=dict(type='carafe', foo=1))
    with pytest.raises(ValueError, match='order'):
        FPN_CARAFE([4, 8], 8, 2, order=('norm', 'act', 'conv'))
    with pytest.raises(ValueError, match='2 inputs'):
        FPN_CARAFE([4, 8], 8, 2)([torch.randn(1, 4, 8, 8)])
