"""YOLOXPAFPN: mmdet 2.28.2's keys and shapes, the top-down and bottom-up chains, every
checkpoint mode exact, bad arguments."""
import pytest
import torch

from ckptzoo.models import YOLOXPAFPN
from ckptzoo.models.utils import DepthwiseSeparableConvModule
from ckptzoo.registry import build_neck
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)


def test_yolox_s_neck_as_mmdet():
    neck = build_neck(dict(type='YOLOXPAFPN', in_channels=[128, 256, 512], out_channels=128,
                           num_csp_blocks=1)).eval()
    keys = list(neck.state_dict())
    assert keys[0] == 'reduce_layers.0.conv.weight'
    for k in ('top_down_blocks.1.blocks.0.conv2.conv.weight', 'downsamples.1.bn.running_mean',
              'bottom_up_blocks.0.final_conv.conv.weight', 'out_convs.2.conv.weight'):
        assert k in keys, k
    assert neck.reduce_layers[0].conv.in_channels == 512  # deepest first
    assert neck.top_down_blocks[0].main_conv.conv.in_channels == 512  # 256 * 2
    assert not neck.top_down_blocks[0].blocks[0].add_identity
    with torch.no_grad():
        outs = neck([torch.rand(1, 128, 8, 8), torch.rand(1, 256, 4, 4),
                     torch.rand(1, 512, 2, 2)])
    assert [tuple(o.shape[1:]) for o in outs] == [(128, 8, 8), (128, 4, 4), (128, 2, 2)]
    assert list(neck.checkpoint_units()) == ['top_down.0', 'top_down.1', 'bottom_up.0',
                                             'bottom_up.1', 'out_convs.0', 'out_convs.1',
                                             'out_convs.2']
    nano = YOLOXPAFPN([16, 32, 64], 16, num_csp_blocks=1, use_depthwise=True)
    assert isinstance(nano.downsamples[0], DepthwiseSeparableConvModule)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
@pytest.mark.parametrize('depthwise', [False, True])
def test_every_mode_equals_plain(monkeypatch, mode, depthwise):
    torch.manual_seed(0)
    neck = randomise_bn(YOLOXPAFPN([8, 16, 32], 8, num_csp_blocks=1,
                                   use_depthwise=depthwise)).double().train()
    feats = [torch.randn(2, 8, 8, 8, dtype=torch.float64),
             torch.randn(2, 16, 4, 4, dtype=torch.float64),
             torch.randn(2, 32, 2, 2, dtype=torch.float64)]
    assert_mode_exact(neck, feats, monkeypatch, mode=mode, min_calls=7)
    if mode == 'full':
        assert_mode_exact(neck, feats, monkeypatch, segments=[['top_down.0', 'top_down.1'],
                                                              ['bottom_up.0', 'bottom_up.1']])


def test_with_cp_and_bad_arguments():
    neck = YOLOXPAFPN([8, 16], 8, num_csp_blocks=1, with_cp=True)
    assert set(neck.checkpoint_plan().values()) == {'full'}
    with pytest.raises(ValueError, match='in_channels must list at least two levels'):
        YOLOXPAFPN([8], 8)
    with pytest.raises(ValueError, match=r'expects 2 inputs \(in_channels\), got 1'):
        neck([torch.rand(1, 8, 4, 4)])
