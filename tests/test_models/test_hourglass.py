"""HourglassNet (mmdet 2.28.2's backbone of CornerNet / CentripetalNet): keys of the
Hourglass-104 config, shapes, the stem and the stacks as checkpoint units with every mode (and
a segment) exact, BN statistics included, bad arguments refused."""
import os.path as osp

import pytest
import torch

from ckptzoo.models.backbones import HourglassNet
from ckptzoo.registry import build_backbone
from tests.helpers.checkpointing import one_thread
from tests.helpers.mmdet_config_count import mmdet_configs_root
from tests.helpers.unit_modes import assert_mode_exact, randomise_bn

TINY = dict(downsample_times=2, num_stacks=2, stage_channels=[8, 8, 16],
            stage_blocks=[1, 1, 2], feat_channel=8)


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_hourglass104_keys_as_mmdet():
    from mmengine.config import Config
    root = mmdet_configs_root()
    if root is None:
        pytest.skip("mmdet 2.28.2's configs are not installed")
    cfg = Config.fromfile(osp.join(root, 'cornernet/cornernet_hourglass104_mstest_8x6_210e_coco.py'),
                          import_custom_modules=False).model.backbone.to_dict()
    with torch.device('meta'):
        net = build_backbone(cfg)
    state = net.state_dict()
    params = sum(p.numel() for p in net.parameters())
    assert params == 187700352 and len(state) == 960  # mmdet 2.28.2: the same counts
    assert {'stem.0.conv.weight', 'stem.1.0.downsample.0.weight',
            'hourglass_modules.1.low2.low2.low2.low2.low2.3.conv2.weight',
            'hourglass_modules.0.low2.low3.1.bn2.running_var', 'inters.0.conv1.weight',
            'conv1x1s.0.bn.weight', 'out_convs.1.conv.weight', 'remap_convs.0.conv.weight'} \
        <= set(state)
    assert list(net.checkpoint_units()) == ['stem', 'stack0', 'stack1']
    assert net.checkpoint_chain_exits() == ['stack0']


def test_shapes_and_odd_sizes():
    net = HourglassNet(**TINY).eval()
    with torch.no_grad():
        outs = net(torch.randn(1, 3, 64, 64))
        odd = net(torch.randn(1, 3, 60, 52))
    assert [tuple(o.shape) for o in outs] == [(1, 8, 16, 16)] * 2
    assert [tuple(o.shape) for o in odd] == [(1, 8, 15, 13)] * 2
    one = HourglassNet(**dict(TINY, num_stacks=1))
    # mmdet's ResLayer builds one (unused) block even for num_stacks - 1 == 0
    assert len(one(torch.randn(1, 3, 32, 32))) == 1 and len(one.inters) == 1


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_is_exact(mode, monkeypatch, single_thread):
    torch.manual_seed(0)
    net = HourglassNet(**TINY).double().train()
    randomise_bn(net)
    assert_mode_exact(net, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch, mode)


def test_a_segment_and_with_cp(monkeypatch, single_thread):
    torch.manual_seed(0)
    net = HourglassNet(**TINY).double().train()
    randomise_bn(net)
    assert_mode_exact(net, torch.randn(2, 3, 32, 32, dtype=torch.float64), monkeypatch,
                      segments=[['stem', 'stack1']])
    assert set(HourglassNet(**TINY, with_cp=True).checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg'):
        HourglassNet(**TINY, init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='num_stacks'):
        HourglassNet(**dict(TINY, num_stacks=0))
    with pytest.raises(ValueError, match='one length'):
        HourglassNet(**dict(TINY, stage_blocks=[1, 1]))
    with pytest.raises(ValueError, match='more than downsample_times'):
        HourglassNet(**dict(TINY, downsample_times=3))
    with pytest.raises(TypeError, match='with_cp'):
        HourglassNet(**TINY, with_cp='full')
