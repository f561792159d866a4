import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.retina_variants import (TEST_CFG, assert_modes_exact, build, inputs,
                                           loss_and_grads, retina_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _cfg(**kw):
    cfg = retina_head_cfg(type='RetinaSepBNHead', num_ins=2,
                          norm_cfg=dict(type='BN', requires_grad=True))
    cfg.update(kw)
    return cfg


def test_keys_shared_convs_and_own_norms():
    head = build(_cfg())
    keys = list(head.state_dict())
    # mmdet's layout: every level lists the shared conv, each has its own BN
    for level in (0, 1):
        for i in (0, 1):
            assert f'cls_convs.{level}.{i}.conv.weight' in keys
            assert f'reg_convs.{level}.{i}.bn.running_mean' in keys
    assert 'cls_convs.0.0.conv.bias' not in keys  # a normed ConvModule has no bias
    assert head.cls_convs[1][0].conv is head.cls_convs[0][0].conv
    assert head.cls_convs[1][0].bn is not head.cls_convs[0][0].bn
    assert {'retina_cls.weight', 'retina_reg.bias'} <= set(keys)
    torch.testing.assert_close(head.retina_cls.bias,
                               torch.full((12, ), math.log(0.01 / 0.99)))
    assert head.retina_cls.weight.std() < 0.02 and (head.retina_reg.bias == 0).all()
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_levels_use_their_own_norm():
    head = build(_cfg()).train()
    feats = inputs()[0]
    head(feats)
    bn0, bn1 = head.cls_convs[0][0].bn, head.cls_convs[1][0].bn
    assert bn0.num_batches_tracked == 1 and bn1.num_batches_tracked == 1
    assert not torch.equal(bn0.running_mean, bn1.running_mean)
    head.eval()
    with torch.no_grad():
        cls, reg = head([f.detach() for f in feats])
    assert [c.shape for c in cls] == [(2, 12, 8, 8), (2, 12, 4, 4)]
    assert [r.shape for r in reg] == [(2, 16, 8, 8), (2, 16, 4, 4)]


def test_loss_and_detections():
    losses, grads, _ = loss_and_grads(build(_cfg()))
    assert set(losses) == {'loss_cls', 'loss_bbox'} and len(losses['loss_cls']) == 2
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    assert grads['cls_convs.0.0.conv.weight'].abs().sum() > 0
    head = build(_cfg(test_cfg=dict(TEST_CFG, score_thr=0.0))).eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        results = head.simple_test([f.detach() for f in feats], metas)
    assert len(results) == 2 and results[0][0].shape[1] == 5


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    assert_modes_exact(lambda: build(_cfg(cp_use_reentrant=reentrant)), mode)


def test_with_cp_is_full():
    head = build(_cfg(with_cp=True))
    assert {u.mode for u in head.level_units} == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match='init_cfg must be None'):
        build(_cfg(init_cfg=dict(type='Normal', layer='Conv2d', std=0.01)))
    with pytest.raises(ValueError, match=r'num_ins \(3\) must equal the number of anchor'):
        build(_cfg(num_ins=3))
    with pytest.raises(ValueError, match='num_ins must be a positive int'):
        build(_cfg(num_ins=0))
    with pytest.raises(ValueError, match='in_channels must equal it, got 8'):
        build(_cfg(stacked_convs=0, feat_channels=4))
    head = build(_cfg(stacked_convs=0))
    assert len(head.cls_convs[0]) == 0 and head(inputs()[0])[0][1].shape == (2, 12, 4, 4)
    with pytest.raises(ValueError, match='expects num_ins=2 levels, got 1'):
        build(_cfg())(inputs()[0][:1])
