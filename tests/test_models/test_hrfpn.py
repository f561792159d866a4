"""HRFPN: mmdet 2.28.2's keys for the hrnetv2p configs, shapes, every checkpoint mode and
segment exact (outputs, every gradient), bad arguments refused."""
import copy

import pytest
import torch

from ckptzoo.models import HRFPN
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread


@pytest.fixture
def single_thread():
    yield from one_thread()


def test_w18_neck_keys_and_shapes_as_mmdet(single_thread):
    # the neck of mmdet's hrnet/faster_rcnn_hrnetv2p_w18_1x_coco.py: 12 keys, 3,019,776 numbers
    neck = build_model(dict(type='HRFPN', in_channels=[18, 36, 72, 144], out_channels=256))
    state = neck.state_dict()
    assert list(state) == ['reduction_conv.conv.weight', 'reduction_conv.conv.bias'] + [
        f'fpn_convs.{i}.conv.{p}' for i in range(5) for p in ('weight', 'bias')]
    assert sum(v.numel() for v in state.values()) == 3019776
    assert neck.num_outs == 5 and neck.pooling is torch.nn.functional.avg_pool2d
    feats = [torch.randn(1, c, 32 // 2**i, 32 // 2**i) for i, c in enumerate([18, 36, 72, 144])]
    with torch.no_grad():
        outs = neck(feats)
    assert [tuple(o.shape) for o in outs] == [(1, 256, 32 // 2**i, 32 // 2**i) for i in range(5)]
    assert list(neck.checkpoint_units()) == ['reduction'] + [f'level{i}' for i in range(5)]
    strided = HRFPN([4, 8], 8, num_outs=2, stride=2, pooling_type='MAX')
    assert strided.pooling is torch.nn.functional.max_pool2d
    assert [tuple(o.shape) for o in strided([torch.randn(1, 4, 16, 16),
                                             torch.randn(1, 8, 8, 8)])] == [(1, 8, 8, 8),
                                                                           (1, 8, 4, 4)]


def _run(neck, feats):
    neck.zero_grad(set_to_none=True)
    feats = [f.clone().requires_grad_() for f in feats]
    outs = neck(feats)
    gen = torch.Generator().manual_seed(5)
    sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs).backward()
    return ([o.detach() for o in outs] + [f.grad for f in feats]
            + [p.grad for p in neck.parameters()])


@pytest.mark.parametrize('pooling_type', ['AVG', 'MAX'])
@pytest.mark.parametrize('plan', ['full', 'selective', 'offload', 'segment', 'with_cp'])
def test_every_mode_is_exact(single_thread, pooling_type, plan):
    torch.manual_seed(0)
    plain = HRFPN([4, 8, 8, 16], 8, num_outs=5, pooling_type=pooling_type)
    if plan == 'with_cp':
        cp = HRFPN([4, 8, 8, 16], 8, num_outs=5, pooling_type=pooling_type, with_cp=True)
        cp.load_state_dict(plain.state_dict())
        assert all(m == 'full' for m in cp.checkpoint_plan().values())
    else:
        cp = copy.deepcopy(plain)
        if plan == 'segment':
            cp.set_checkpoint_segments([['reduction', 'level4']])
        else:
            cp.set_checkpoint_plan({'*': plan})
    feats = [torch.randn(2, c, 32 // 2**i, 32 // 2**i) for i, c in enumerate([4, 8, 8, 16])]
    ref, got = _run(plain, feats), _run(cp, feats)
    assert len(ref) == len(got) == 5 + 4 + 12
    for a, b in zip(ref, got):
        assert a is not None and b is not None
        torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_bad_arguments():
    with pytest.raises(TypeError, match='in_channels'):
        HRFPN((4, 8), 8)
    with pytest.raises(TypeError, match='with_cp'):
        HRFPN([4, 8], 8, with_cp='yes')
    with pytest.raises(NotImplementedError, match='conv_cfg'):
        HRFPN([4, 8], 8, conv_cfg=dict(type='DCN'))
    with pytest.raises(ValueError, match='2 inputs'):
        HRFPN([4, 8], 8)([torch.randn(1, 4, 8, 8)])
