"""FPG: mmdet 2.28.2's keys for fpg/'s necks, shapes, units, every checkpoint mode exact (BN
statistics included), the transitions mmdet cannot build working, bad arguments refused."""
import pytest
import torch

from ckptzoo.models import FPG
from ckptzoo.registry import build_model
from tests.helpers.checkpointing import one_thread
from tests.helpers.necks import assert_every_mode_exact, mmdet_neck_cfg

BN = dict(type='BN')


@pytest.fixture
def single_thread():
    yield from one_thread()


def _feats(channels, size=32, n=2):
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, c, size // 2**i, size // 2**i, generator=gen)
            for i, c in enumerate(channels)]


@pytest.mark.parametrize('rel,keys,numel', [
    ('fpg/faster_rcnn_r50_fpg_crop640_50e_coco.py', 774, 41681278),
    ('fpg/retinanet_r50_fpg_crop640_50e_coco.py', 776, 42795646)])
def test_config_neck_keys_and_shapes_as_mmdet(rel, keys, numel):
    with torch.device('meta'):
        neck = build_model(mmdet_neck_cfg(rel))
    state = neck.state_dict()
    assert len(state) == keys and sum(v.numel() for v in state.values()) == numel
    assert list(state)[:2] == ['lateral_convs.0.weight', 'lateral_convs.0.bias']
    assert list(state)[-2:] == ['output_transition.4.conv_out.conv.weight',
                                'output_transition.4.conv_out.conv.bias']
    assert 'fpn_transitions.8.4.across_down' not in dict(neck.named_modules())  # the top
    assert 'fpn_transitions.0.0.across_lateral' not in dict(neck.named_modules())  # skipped
    assert 'fpn_transitions.4.0.across_down.conv.conv.weight' in state
    assert list(neck.checkpoint_units()) == ['lateral'] + [f'stage{s}' for s in range(9)] + [
        f'out{i}' for i in range(5)]


def _cfg(**kw):
    conv = dict(type='conv', norm_cfg=BN, inplace=False, order=('act', 'conv', 'norm'))
    cfg = dict(in_channels=[4, 8, 8, 16], out_channels=8, inter_channels=8, num_outs=5,
               stack_times=3, paths=['bu'] * 3, same_down_trans=None,
               same_up_trans=dict(conv, kernel_size=3, stride=2, padding=1),
               across_lateral_trans=dict(conv, kernel_size=1),
               across_down_trans=dict(type='interpolation_conv', mode='nearest',
                                      kernel_size=3, norm_cfg=BN, order=('act', 'conv', 'norm'),
                                      inplace=False),
               across_up_trans=None, across_skip_trans=dict(conv, kernel_size=1),
               output_trans=dict(type='last_conv', kernel_size=3,
                                 order=('act', 'conv', 'norm'), inplace=False),
               norm_cfg=BN, skip_inds=[(0, 1), (0, ), (), (), (2, )])
    cfg.update(kw)
    return cfg


@pytest.mark.parametrize('kw,unused', [
    (dict(), ()),
    (dict(paths=['bu', 'td', 'td'], add_extra_convs=True, start_level=1, num_outs=4,
         skip_inds=[(1, ), (), (), (2, )],
         same_down_trans=dict(type='interpolation_conv', kernel_size=3),
         across_up_trans=dict(type='conv', kernel_size=3, stride=2, padding=1)),
     # a pathway runs one of its same-pathway transitions (mmdet builds both)
     ('fpn_transitions.0.0.same_down', 'fpn_transitions.0.1.same_down',
      'fpn_transitions.0.2.same_down', 'fpn_transitions.1.1.same_up',
      'fpn_transitions.1.2.same_up', 'fpn_transitions.1.3.same_up',
      'fpn_transitions.2.1.same_up', 'fpn_transitions.2.2.same_up')),
])
def test_every_mode_is_exact(single_thread, kw, unused):
    assert_every_mode_exact(lambda cp: FPG(with_cp=cp, **_cfg(**kw)), _feats([4, 8, 8, 16]),
                            unused=unused)


def test_what_mmdet_cannot_build_works():
    # the defaults: an identity across-skip, no skip_inds; an output 'conv' transition
    neck = FPG([4, 8, 8], 8, 3, 2, ['bu', 'td'],
               across_down_trans=dict(type='interpolation_conv', kernel_size=3),
               output_trans=dict(type='conv', kernel_size=1))
    outs = neck(_feats([4, 8, 8]))
    assert [tuple(o.shape) for o in outs] == [(2, 8, 32, 32), (2, 8, 16, 16), (2, 8, 8, 8)]
    assert not any('across_skip' in k for k in neck.state_dict())


def test_bad_arguments():
    with pytest.raises(ValueError, match='paths'):
        FPG([4, 8], 8, 2, 2, ['bu', 'up'])
    with pytest.raises(ValueError, match='transition type'):
        FPG([4, 8], 8, 2, 1, ['bu'], across_lateral_trans=dict(type='deform'))
    with pytest.raises(ValueError, match='inter_channels'):
        FPG([4, 8], 8, 2, 1, ['bu'], inter_channels=[8])
    with pytest.raises(ValueError, match='skip_inds'):
        FPG([4, 8], 8, 2, 1, ['bu'], skip_inds=[()])
    with pytest.raises(ValueError, match='2 inputs'):
        FPG([4, 8], 8, 2, 1, ['bu'])([torch.randn(1, 4, 8, 8)])
