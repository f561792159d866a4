"""YOLOV3Neck: mmdet 2.28.2's keys and shapes (deepest scale first), every checkpoint mode
exact, bad arguments."""
import pytest
import torch

from ckptzoo.models import YOLOV3Neck
from ckptzoo.registry import build_neck
from tests.helpers.checkpointing import one_thread
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

one_thread = pytest.fixture(autouse=True)(one_thread)


def test_yolov3_neck_as_mmdet():
    neck = build_neck(dict(type='YOLOV3Neck', num_scales=3, in_channels=[1024, 512, 256],
                           out_channels=[512, 256, 128])).eval()
    keys = list(neck.state_dict())
    assert keys[0] == 'detect1.conv1.conv.weight' and 'conv1.conv.weight' in keys
    assert neck.detect2.conv1.conv.in_channels == 512 + 256
    assert neck.conv2.conv.in_channels == 256 and neck.conv2.conv.out_channels == 128
    with torch.no_grad():
        outs = neck([torch.rand(1, 256, 8, 8), torch.rand(1, 512, 4, 4),
                     torch.rand(1, 1024, 2, 2)])
    assert [tuple(o.shape[1:]) for o in outs] == [(512, 2, 2), (256, 4, 4), (128, 8, 8)]
    assert list(neck.checkpoint_units()) == ['level0', 'level1', 'level2']


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_equals_plain(monkeypatch, mode):
    torch.manual_seed(0)
    neck = randomise_bn(YOLOV3Neck(3, [32, 16, 8], [16, 8, 4])).double().train()
    feats = [torch.randn(2, 8, 8, 8, dtype=torch.float64),
             torch.randn(2, 16, 4, 4, dtype=torch.float64),
             torch.randn(2, 32, 2, 2, dtype=torch.float64)]
    assert_mode_exact(neck, feats, monkeypatch, mode=mode, min_calls=3)
    if mode == 'full':
        assert_mode_exact(neck, feats, monkeypatch, segments=[['level0', 'level2']])
        neck = YOLOV3Neck(3, [32, 16, 8], [16, 8, 4], with_cp=True)
        assert set(neck.checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match=r'in_channels and out_channels need num_scales \(3\)'):
        YOLOV3Neck(3, [32, 16], [16, 8, 4])
    neck = YOLOV3Neck(2, [32, 16], [16, 8])
    with pytest.raises(ValueError, match=r'expects 2 inputs \(num_scales\), got 1'):
        neck([torch.rand(1, 32, 2, 2)])
