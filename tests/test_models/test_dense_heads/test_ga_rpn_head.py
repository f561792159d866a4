"""GARPNHead (mmdet 2.x's): keys, loss names, proposals and their config (per-level NMS,
``nms_post``, ``nms_across_levels``, mmdet's deprecated keys), every checkpoint mode exact."""
import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from ckptzoo.models.dense_heads import GARPNHead
from ckptzoo.registry import UnknownKeyError

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.ga_heads import RPN_TEST_CFG, build, ga_head_cfg, inputs, train_run

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    return build(ga_head_cfg('GARPNHead', **kw))


def test_keys_and_one_class():
    head = _head()
    assert {f'{m}.{p}' for m in ('rpn_conv', 'conv_loc', 'conv_shape', 'conv_cls', 'conv_reg')
            for p in ('weight', 'bias')} | {'feature_adaption.conv_offset.weight',
                                          'feature_adaption.conv_adaption.weight'} \
        == set(head.state_dict())
    assert head.conv_cls.out_channels == 1 and head.sampling and head.ga_sampling
    with pytest.raises(TypeError, match='num_classes'):
        _head(num_classes=2)


def test_losses_and_proposals():
    head = _head()
    losses, _ = train_run(head, with_labels=False)
    assert set(losses) == {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_anchor_shape',
                           'loss_anchor_loc'}
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        proposals = head.simple_test_rpn(feats, metas)
        across = head.get_bboxes(*head(feats), img_metas=metas,
                                 cfg=dict(RPN_TEST_CFG, nms_across_levels=True, max_per_img=5))
        merged = head.aug_test_rpn([feats, feats], [metas, metas])
    for p, a, m in zip(proposals, across, merged):
        assert p.shape[1] == 5 and 0 < len(p) <= 30
        assert (p[:-1, 4] >= p[1:, 4]).all()  # best first
        assert len(a) <= 5 and len(m) <= 30


def test_proposal_cfg_checks_and_deprecated_keys():
    old = dict(nms_pre=100, nms_post=50, max_num=30, nms_thr=0.7, min_bbox_size=0)
    resolved = GARPNHead.check_proposal_cfg(old, 'test_cfg')
    assert resolved['nms'] == dict(type='nms', iou_threshold=0.7)
    assert resolved['max_per_img'] == 30
    with pytest.raises(ValueError, match='nms_post'):
        GARPNHead.check_proposal_cfg({k: v for k, v in RPN_TEST_CFG.items()
                                      if k != 'nms_post'}, 'test_cfg')
    with pytest.raises(ValueError, match='plain NMS'):
        GARPNHead.check_proposal_cfg(dict(RPN_TEST_CFG, nms=dict(type='soft_nms',
                                                                 iou_threshold=0.5)), 'x')
    with pytest.raises(ValueError, match='give only'):
        GARPNHead.check_proposal_cfg(dict(RPN_TEST_CFG, nms_thr=0.5), 'x')
    with pytest.raises(UnknownKeyError, match='score_thr'):
        _head(test_cfg=dict(RPN_TEST_CFG, score_thr=0.1))


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    ref = train_run(_head(cp_use_reentrant=reentrant), with_labels=False)
    head = _head(cp_use_reentrant=reentrant)
    head.set_checkpoint_plan({'*': mode})
    losses, grads = train_run(head, with_labels=False)
    assert losses == ref[0] and grads.keys() == ref[1].keys()
    assert all(torch.equal(grads[k], ref[1][k]) for k in grads)


def test_softmax_scores_the_foreground_logit():
    """mmdet's GARPNHead failed on a softmax loss_cls (its 2D scores met a 1D mask)."""
    head = _head(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0))
    assert head.conv_cls.out_channels == 2
    losses, _ = train_run(head, with_labels=False)
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        outs = head(feats)
        proposals = head.get_bboxes(*outs, img_metas=metas)
    fg = [c.permute(0, 2, 3, 1).reshape(2, -1, 2).softmax(-1)[..., 0] for c in outs[0]]
    best = max(float(f[0].max()) for f in fg)
    assert proposals[0][0, 4].item() == pytest.approx(best)


def test_no_position_kept_gives_no_proposal():
    head = _head()
    with torch.no_grad():
        head.conv_loc.bias.fill_(-50.)
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        assert all(p.shape == (0, 5) for p in head.simple_test_rpn(feats, metas))
