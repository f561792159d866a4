"""GuidedAnchorHead / FeatureAdaption (mmdet 2.x's): keys, the location targets by hand, the
masked test-time convs, losses, proposals of the guided anchors, bad arguments, and every
checkpoint mode exact."""
import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from ckptzoo.models.dense_heads import FeatureAdaption
from ckptzoo.registry import UnknownKeyError

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.ga_heads import GA_TRAIN_CFG, build, ga_head_cfg, inputs, train_run
from tests.helpers.unit_modes import Counting

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    return build(ga_head_cfg('GuidedAnchorHead', **kw))


def test_keys_shapes_and_init_as_mmdet():
    head = _head()
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes == {'conv_loc.weight': (1, 8, 1, 1), 'conv_loc.bias': (1, ),
                      'conv_shape.weight': (2, 8, 1, 1), 'conv_shape.bias': (2, ),
                      'feature_adaption.conv_offset.weight': (36, 2, 1, 1),
                      'feature_adaption.conv_adaption.weight': (8, 8, 3, 3),
                      'conv_cls.weight': (3, 8, 1, 1), 'conv_cls.bias': (3, ),
                      'conv_reg.weight': (4, 8, 1, 1), 'conv_reg.bias': (4, )}
    torch.testing.assert_close(head.conv_loc.bias, torch.full((1, ), math.log(0.01 / 0.99)))
    # mmcv order: the head's Normal(0.01) everywhere (masked convs too), then FeatureAdaption's
    assert head.conv_cls.weight.std() < 0.03 and (head.conv_cls.bias == 0).all()
    assert 0.05 < head.feature_adaption.conv_offset.weight.std() < 0.2
    assert head.feature_adaption.conv_adaption.weight.std() < 0.03
    assert head.num_base_priors == 1 and head.approxs_per_octave == 9
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_feature_adaption_follows_the_shape_and_detaches_it():
    fa = FeatureAdaption(4, 6, kernel_size=3, deform_groups=2)
    x = torch.randn(1, 4, 5, 5)
    shape = torch.zeros(1, 2, 5, 5, requires_grad=True)
    out = fa(x, shape)
    assert out.shape == (1, 6, 5, 5) and (out >= 0).all()
    # a zero shape map gives zero offsets: the plain 3x3 convolution
    ref = torch.relu(torch.nn.functional.conv2d(x, fa.conv_adaption.weight, padding=1))
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert shape.grad is None


def test_location_targets_by_hand():
    head = _head()
    # a 16 x 16 box on level floor(log2(16 / (4 * 8)) + 0.5) = -1, clamped to 0
    gt = torch.tensor([[8., 8., 24., 24.]])
    targets, weights, avg = head.ga_loc_targets([gt], [(4, 4), (2, 2)])
    assert avg == (16 + 4) / 200
    # level 0: box / 8 = [1, 1, 3, 3]; centre region (r1 = 0.4): round(1.8)=2 .. round(2.2)=2
    t0 = torch.zeros(4, 4)
    t0[2, 2] = 1
    torch.testing.assert_close(targets[0][0, 0], t0)
    # ignore region (r2 = 0.25): round(1.5)=2 .. round(2.5)=2 (half to even): only the centre
    w0 = torch.full((4, 4), 0.1)
    w0[2, 2] = 1
    torch.testing.assert_close(weights[0][0, 0], w0)
    # level 1 holds the box's ignore region: [0.5, .., 1.5] -> round(0.75)=1 .. round(1.25)=1
    w1 = torch.full((2, 2), 0.1)
    w1[1, 1] = 0
    torch.testing.assert_close(weights[1][0, 0], w1)
    assert targets[1].sum() == 0


def test_test_time_masks_zero_the_filtered_positions():
    head = _head()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        head.conv_loc.bias.fill_(0.)
        head.conv_loc.weight.zero_()
        head.conv_loc.weight[0, 0] = 10.  # keep where the first channel is not very negative
        head.train()
        cls_t, reg_t, shape_t, loc_t = head(feats)
        head.eval()
        cls_e, reg_e, shape_e, loc_e = head(feats)
    for level in range(2):
        keep = loc_e[level].sigmoid()[:, 0] >= 0.01
        assert 0 < keep.sum() < keep.numel()
        keep = keep[:, None].float()
        torch.testing.assert_close(cls_e[level], cls_t[level] * keep)
        torch.testing.assert_close(reg_e[level], reg_t[level] * keep)
        torch.testing.assert_close(shape_e[level], shape_t[level])


def test_losses_and_guided_proposals():
    head = _head()
    losses, grads = train_run(head)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_shape', 'loss_loc'}
    assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in losses.values())
    assert sum(losses['loss_shape']) > 0 and sum(losses['loss_bbox']) > 0
    assert all(g.abs().sum() > 0 for g in grads.values())
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        results = head.simple_test(feats, metas)
    assert len(results) == 2
    for dets, labels in results:
        assert dets.shape[1] == 5 and len(dets) == len(labels) <= 20
        assert (dets[:, 2] <= 32).all() and (labels < 3).all()


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match='octave_base_scale'):
        _head(square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[8],
                                           strides=[8, 16]))
    with pytest.raises(ValueError, match='same strides'):
        _head(square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[4],
                                           strides=[8, 32]))
    with pytest.raises(ValueError, match='one anchor per position'):
        _head(square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0, 2.0],
                                           scales=[4], strides=[8, 16]))
    cfg = dict(GA_TRAIN_CFG)
    cfg.pop('ga_assigner')
    with pytest.raises(ValueError, match='ga_assigner'):
        _head(train_cfg=cfg)
    with pytest.raises(UnknownKeyError, match='center_ratio'):
        _head(train_cfg=dict(GA_TRAIN_CFG, centre_ratio=0.2))
    with pytest.raises(ValueError, match='num_classes'):
        _head(num_classes=0)


def test_without_ga_sampler_the_shape_loss_averages_over_positives():
    cfg = dict(GA_TRAIN_CFG)
    cfg.pop('ga_sampler')
    head = _head(train_cfg=cfg)
    assert not head.ga_sampling and type(head.ga_sampler).__name__ == 'PseudoSampler'
    losses, _ = train_run(head)
    assert all(math.isfinite(x) for x in losses['loss_shape'])


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant, monkeypatch):
    ref = train_run(_head(cp_use_reentrant=reentrant))
    head = _head(cp_use_reentrant=reentrant)
    head.set_checkpoint_plan({'*': mode})
    counting = Counting(monkeypatch)
    losses, grads = train_run(head)
    assert counting.calls >= 2
    assert losses == ref[0] and grads.keys() == ref[1].keys()
    assert all(torch.equal(grads[k], ref[1][k]) for k in grads)


def test_with_cp_sets_full_on_every_level():
    head = _head(with_cp=True)
    assert set(head.checkpoint_plan().values()) == {'full'}
    with pytest.raises(TypeError, match='with_cp'):
        _head(with_cp='full')


def test_the_centres_are_the_location_losss_positives():
    """Fixed over mmdet 2.x (which trained the centres as background): a confident location
    score on a centre costs little, on a negative region much."""
    head = _head()
    target = torch.tensor([1., 0.]).view(1, 1, 1, 2)
    weight = torch.ones_like(target)
    confident = torch.full((1, 1, 1, 2), 5.)
    per_position = head.loss_loc_single(confident, target, weight, 1.0)
    centre = head.loss_loc_single(confident[..., :1], target[..., :1], weight[..., :1], 1.0)
    p = torch.sigmoid(torch.tensor(5.))
    torch.testing.assert_close(centre, 0.25 * (1 - p) ** 2 * -torch.log(p))
    torch.testing.assert_close(per_position - centre, 0.75 * p ** 2 * -torch.log(1 - p))
