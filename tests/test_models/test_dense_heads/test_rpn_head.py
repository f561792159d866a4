import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import UnknownKeyError, build_head

from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

ASSIGNER = dict(type='MaxIoUAssigner', pos_iou_thr=0.7, neg_iou_thr=0.4, min_pos_iou=0.3,
                match_low_quality=True, ignore_iof_thr=-1)
SAMPLER = dict(type='RandomSampler', num=8, pos_fraction=0.5, neg_pos_ub=-1,
               add_gt_as_proposals=False)
TRAIN_CFG = dict(assigner=ASSIGNER, sampler=SAMPLER, allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, max_per_img=100, nms=dict(type='nms', iou_threshold=0.7),
                min_bbox_size=0)


def _head(**kw):
    """One level, stride 8, one 16x16 anchor per position: on a 16x16 image (2x2 map) the
    anchors are [-8,-8,8,8], [0,-8,16,8], [-8,0,8,16], [0,0,16,16]."""
    cfg = dict(type='RPNHead', in_channels=4, feat_channels=4,
               anchor_generator=dict(type='AnchorGenerator', strides=[8], ratios=[1.0],
                                     scales=[2]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                               target_stds=[1.] * 4),
               loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
               loss_bbox=dict(type='L1Loss', loss_weight=1.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _two_level_head(**kw):
    """Strides 8 and 16, one 16x16 anchor per position at both levels: on a 32x32 image level
    0 is 4x4 (centres 0, 8, 16, 24), level 1 is 2x2 (centres 0, 16), and level 1's anchors
    equal level 0's at the even positions."""
    return _head(anchor_generator=dict(type='AnchorGenerator', strides=[8, 16], ratios=[1.0],
                                       scales=[1.0], base_sizes=[16, 16]), **kw)


def _meta(h=16, w=16, scale=1.0, flip=False):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=flip,
                flip_direction='horizontal' if flip else None)


def test_keys_layers_and_init():
    head = _head(in_channels=6, feat_channels=5)
    assert sorted(head.state_dict()) == ['rpn_cls.bias', 'rpn_cls.weight', 'rpn_conv.bias',
                                         'rpn_conv.weight', 'rpn_reg.bias', 'rpn_reg.weight']
    assert head.num_classes == 1 and head.rpn_cls.out_channels == 1
    assert head.rpn_conv.kernel_size == (3, 3) and head.rpn_cls.kernel_size == (1, 1)
    assert head.rpn_reg.out_channels == 4 and head.rpn_conv.in_channels == 6
    big = _head(in_channels=64, feat_channels=64)  # Normal(std=0.01), zero bias
    assert abs(big.rpn_conv.weight.std().item() - 0.01) < 1e-3
    assert (big.rpn_conv.bias == 0).all() and (big.rpn_cls.bias == 0).all()
    softmax = _head(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False))
    assert softmax.rpn_cls.out_channels == 2  # one anchor, (foreground, background)
    stacked = _head(num_convs=2)
    assert sorted(k for k in stacked.state_dict() if k.startswith('rpn_conv')) == [
        'rpn_conv.0.conv.bias', 'rpn_conv.0.conv.weight', 'rpn_conv.1.conv.bias',
        'rpn_conv.1.conv.weight']
    assert not stacked.rpn_conv[0].activate.inplace  # mmdet: inplace=False


def test_forward_is_conv_relu_then_cls_and_reg():
    head = _head()
    x = torch.randn(2, 4, 3, 5)
    (cls,), (reg,) = head([x])
    hidden = F.relu(F.conv2d(x, head.rpn_conv.weight, head.rpn_conv.bias, padding=1))
    torch.testing.assert_close(cls, F.conv2d(hidden, head.rpn_cls.weight, head.rpn_cls.bias))
    torch.testing.assert_close(reg, F.conv2d(hidden, head.rpn_reg.weight, head.rpn_reg.bias))
    assert list(head.checkpoint_units()) == ['level0']
    with pytest.raises(ValueError, match='RPNHead expects 1 levels'):
        head([x, x])


def _bce(logits, targets):
    return F.binary_cross_entropy_with_logits(logits, targets, reduction='none')


def test_loss_averages_over_the_sampled_anchors():
    """The gt [0,0,16,16] is anchor 3 (IoU 1); anchors 0-2 (IoU 1/7, 1/3, 1/3) are negatives.
    All four are sampled (4 positives and 4 negatives allowed), so both losses are sums over
    1 + 3 = 4 anchors (mmdet: num_total_pos + num_total_neg when sampling)."""
    head = _head()
    assert head.sampling
    torch.manual_seed(1)
    cls_score, bbox_pred = torch.randn(1, 1, 2, 2), torch.randn(1, 4, 2, 2)
    losses = head.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                       [_meta()])
    assert set(losses) == {'loss_rpn_cls', 'loss_rpn_bbox'}
    logits = cls_score.reshape(4)
    expected = _bce(logits, torch.tensor([0., 0., 0., 1.])).sum() / 4
    torch.testing.assert_close(losses['loss_rpn_cls'][0], expected, rtol=1e-5, atol=0)
    deltas = bbox_pred.permute(0, 2, 3, 1).reshape(4, 4)
    torch.testing.assert_close(losses['loss_rpn_bbox'][0], deltas[3].abs().sum() / 4,
                               rtol=1e-5, atol=0)
    # the PseudoSampler (no sampling) averages over the positives only
    pseudo = _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='PseudoSampler')))
    assert not pseudo.sampling
    losses = pseudo.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                         [_meta()])
    torch.testing.assert_close(losses['loss_rpn_cls'][0], expected * 4, rtol=1e-5, atol=0)


def test_sampler_draws_the_negatives_as_mmdet():
    """num=2: the positive and one of the three negatives, the one mmdet's RandomSampler
    draws (``torch.randperm(3)[:1]`` from the default generator)."""
    head = _head(train_cfg=dict(TRAIN_CFG, sampler=dict(SAMPLER, num=2)))
    cls_score, bbox_pred = torch.randn(1, 1, 2, 2), torch.randn(1, 4, 2, 2)
    logits = cls_score.reshape(4)
    for seed in range(4):
        torch.manual_seed(seed)
        chosen = torch.randperm(3)[:1].item()
        torch.manual_seed(seed)
        losses = head.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                           [_meta()])
        expected = (_bce(logits[3], torch.tensor(1.)) + _bce(logits[chosen],
                                                              torch.tensor(0.))) / 2
        torch.testing.assert_close(losses['loss_rpn_cls'][0], expected, rtol=1e-5, atol=0)


def test_softmax_rpn_scores_foreground_channel():
    head = _head(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False))
    cls_score = torch.randn(1, 2, 2, 2)
    bbox_pred = torch.zeros(1, 4, 2, 2)
    cfg = dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.99))
    (proposals, ) = head.get_bboxes([cls_score], [bbox_pred], img_metas=[_meta()], cfg=cfg)
    fg = cls_score.permute(0, 2, 3, 1).reshape(4, 2).softmax(-1)[:, 0]
    torch.testing.assert_close(proposals[:, 4], fg.sort(descending=True)[0])
    losses = head.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                       [_meta()])
    logits = cls_score.permute(0, 2, 3, 1).reshape(4, 2)
    expected = F.cross_entropy(logits, torch.tensor([1, 1, 1, 0]), reduction='sum') / 4
    torch.testing.assert_close(losses['loss_rpn_cls'][0], expected, rtol=1e-5, atol=0)


def _level_outputs(logits0, logits1, deltas0=None, deltas1=None):
    cls = [logits0.reshape(1, 1, 4, 4), logits1.reshape(1, 1, 2, 2)]
    d0 = torch.zeros(16, 4) if deltas0 is None else deltas0
    d1 = torch.zeros(4, 4) if deltas1 is None else deltas1
    reg = [d0.reshape(1, 4, 4, 4).permute(0, 3, 1, 2), d1.reshape(1, 2, 2, 4).permute(0, 3, 1, 2)]
    return cls, reg


def _clipped_anchors(head):
    return [a.clamp(0, 32) for a in head.prior_generator.grid_priors([(4, 4), (2, 2)])]


def test_nms_pre_is_per_level_and_nms_is_within_levels():
    """nms_pre=1 keeps one anchor per level; level 0's and level 1's best are the same box
    [0,0,8,8] and both stay (NMS separates the levels by their ids)."""
    head = _two_level_head()
    logits0 = -torch.arange(16, dtype=torch.float32) / 4 + 3   # anchor 0 best: 3
    logits1 = -torch.arange(4, dtype=torch.float32) / 4 + 2    # anchor 0 best: 2
    cls, reg = _level_outputs(logits0, logits1)
    cfg = dict(TEST_CFG, nms_pre=1)
    (proposals, ) = head.get_bboxes(cls, reg, img_metas=[_meta(32, 32)], cfg=cfg)
    torch.testing.assert_close(proposals, torch.tensor([
        [0., 0., 8., 8., torch.tensor(3.).sigmoid()],
        [0., 0., 8., 8., torch.tensor(2.).sigmoid()]]))
    # nms_pre=5: the 5 best of level 0's 16 anchors, all 4 of level 1
    torch.manual_seed(3)
    logits0, logits1 = torch.randn(16), torch.randn(4)
    cls, reg = _level_outputs(logits0, logits1)
    (proposals, ) = head.get_bboxes(cls, reg, img_metas=[_meta(32, 32)],
                                    cfg=dict(TEST_CFG, nms_pre=5))
    anchors0, anchors1 = _clipped_anchors(head)
    top0 = logits0.topk(5).indices
    expected = torch.cat([torch.cat([anchors0[top0], logits0[top0, None].sigmoid()], 1),
                          torch.cat([anchors1, logits1[:, None].sigmoid()], 1)])
    expected = expected[expected[:, 4].argsort(descending=True)]
    torch.testing.assert_close(proposals, expected)
    # within a level NMS applies: [0,0,8,8] and [0,0,16,8] (IoU 0.5) at iou_threshold 0.4
    cls, reg = _level_outputs(torch.tensor([3., 2.] + [-9.] * 14), torch.full((4, ), -9.))
    (proposals, ) = head.get_bboxes(cls, reg, img_metas=[_meta(32, 32)],
                                    cfg=dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.4)))
    assert [0., 0., 16., 8.] not in proposals[:, :4].tolist()
    assert proposals[0, :4].tolist() == [0., 0., 8., 8.]


def test_max_per_img_keeps_the_best_over_all_levels():
    head = _two_level_head()
    torch.manual_seed(4)
    logits0, logits1 = torch.randn(16), torch.randn(4)
    (proposals, ) = head.get_bboxes(*_level_outputs(logits0, logits1),
                                    img_metas=[_meta(32, 32)],
                                    cfg=dict(TEST_CFG, max_per_img=3))
    anchors = torch.cat(_clipped_anchors(head))
    scores = torch.cat([logits0, logits1]).sigmoid()
    best = scores.argsort(descending=True)[:3]
    torch.testing.assert_close(proposals, torch.cat([anchors[best], scores[best, None]], 1))


def test_min_bbox_size_needs_width_and_height_above_it():
    """Level 0's anchor 5 ([0,0,16,16]) is shrunk to 4x4 around its centre, anchor 6 pushed
    out of the image (clipped to zero width); the rest stay."""
    head = _two_level_head()
    deltas0 = torch.zeros(16, 4)
    deltas0[5, 2:] = torch.log(torch.tensor(0.25))  # 16 -> 4 px
    deltas0[6, 0] = 3.  # 48 px to the right: x1 = x2 = 32 after clipping
    logits0, logits1 = torch.randn(16), torch.randn(4)
    cls, reg = _level_outputs(logits0, logits1, deltas0)

    def boxes(min_bbox_size):
        (proposals, ) = head.get_bboxes(cls, reg, img_metas=[_meta(32, 32)],
                                        cfg=dict(TEST_CFG, min_bbox_size=min_bbox_size))
        return [tuple(b) for b in proposals[:, :4].tolist()]

    small, empty = (6., 6., 10., 10.), (32., 0., 32., 16.)
    assert small in boxes(0) and empty not in boxes(0)  # mmdet drops empty boxes at 0
    assert small in boxes(3.9) and small not in boxes(4)  # strictly above min_bbox_size
    assert empty in boxes(-1)  # negative: no filter
    assert len(boxes(-1)) == 20 and len(boxes(0)) == 19 and len(boxes(4)) == 18


def test_proposals_are_detached_and_rescaled_on_request():
    head = _two_level_head()
    feats = [torch.randn(2, 4, 4, 4, requires_grad=True),
             torch.randn(2, 4, 2, 2, requires_grad=True)]
    metas = [_meta(32, 32), _meta(32, 32, scale=2.0)]
    gt = [torch.tensor([[0., 0., 16., 16.]]), torch.zeros(0, 4)]
    losses, proposals = head.forward_train(feats, metas, gt, proposal_cfg=TEST_CFG)
    assert set(losses) == {'loss_rpn_cls', 'loss_rpn_bbox'}
    assert all(p.grad_fn is None and not p.requires_grad for p in proposals)
    assert all(p.shape[1] == 5 and p.dtype == torch.float32 for p in proposals)
    assert head.forward_train(feats, metas, gt).keys() == losses.keys()  # no proposal_cfg
    tested = head.simple_test_rpn(feats, metas)
    for a, b in zip(tested, proposals):
        torch.testing.assert_close(a, b)
    rescaled = head.get_bboxes(*head(feats), img_metas=metas, rescale=True)
    torch.testing.assert_close(rescaled[0], tested[0])
    torch.testing.assert_close(rescaled[1][:, :4], tested[1][:, :4] / 2)


def test_aug_test_rpn_maps_back_and_merges():
    head = _two_level_head()
    torch.nn.init.zeros_(head.rpn_reg.weight)  # proposals are the clipped anchors
    feats = [torch.randn(1, 4, 4, 4), torch.randn(1, 4, 2, 2)]
    single, = head.simple_test_rpn(feats, [_meta(32, 32)])
    assert len(single) == 20  # level-wise NMS keeps level 1's copies of level 0's boxes
    # the merge is one NMS over all levels and views (mmdet's merge_aug_proposals): the same
    # view twice gives the single view's proposals less the 4 copies
    merged, = head.aug_test_rpn([feats, feats], [[_meta(32, 32)], [_meta(32, 32)]])
    first = [i for i, b in enumerate(single[:, :4].tolist())
             if b not in single[:i, :4].tolist()]
    torch.testing.assert_close(merged, single[first])
    assert len(merged) == 16
    # a flipped view of features at scale 2 maps back mirrored and halved
    merged, = head.aug_test_rpn([feats], [[_meta(32, 32, scale=2.0, flip=True)]])
    expected = single[first].clone()
    expected[:, 0], expected[:, 2] = 32 - single[first, 2], 32 - single[first, 0]
    expected[:, :4] /= 2
    torch.testing.assert_close(merged, expected)
    head.test_cfg = dict(TEST_CFG, max_per_img=5)
    merged, = head.aug_test_rpn([feats, feats], [[_meta(32, 32)], [_meta(32, 32)]])
    torch.testing.assert_close(merged, single[first][:5])


@pytest.mark.parametrize('mode,reentrant', [('full', False), ('full', True),
                                            ('selective', False), ('offload', False)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    def run(head):
        head.zero_grad()
        feats = [f.clone().requires_grad_() for f in base]
        torch.manual_seed(5)  # the sampler's draws
        losses, proposals = head.forward_train(feats, metas, gt, proposal_cfg=TEST_CFG)
        loss = sum(sum(v) for v in losses.values())
        loss.backward()
        return (loss.detach(), proposals, [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()})

    torch.manual_seed(2)
    base = [torch.randn(2, 4, 4, 4), torch.randn(2, 4, 2, 2)]
    metas = [_meta(32, 32), _meta(32, 32)]
    gt = [torch.tensor([[0., 0., 16., 16.], [8., 4., 30., 20.]]),
          torch.tensor([[4., 4., 20., 28.]])]
    plain = _two_level_head(num_convs=2, train_cfg=dict(TRAIN_CFG, sampler=dict(SAMPLER, num=4)))
    ref = run(plain)
    cp = _two_level_head(num_convs=2, train_cfg=dict(TRAIN_CFG, sampler=dict(SAMPLER, num=4)),
                         cp_use_reentrant=reentrant)
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(got[2], ref[2]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(g.abs().sum() > 0 for g in ref[3].values())
    for name, grad in ref[3].items():
        torch.testing.assert_close(got[3][name], grad, rtol=0, atol=0, msg=name)


def test_with_cp_flag_checkpoints_every_level(count_cp):
    head = _two_level_head(with_cp=True)
    assert head.checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    feats = [torch.randn(1, 4, 4, 4, requires_grad=True),
             torch.randn(1, 4, 2, 2, requires_grad=True)]
    head(feats)
    assert count_cp['checkpoints'] == 2


def test_config_errors_name_the_bad_value():
    with pytest.raises(TypeError, match='num_classes is no argument'):
        _head(num_classes=3)
    with pytest.raises(ValueError, match='num_convs must be a positive int, got 0'):
        _head(num_convs=0)
    with pytest.raises(UnknownKeyError, match="'test_cfg.nms_thr'"):
        _head(test_cfg=dict(TEST_CFG, nms_thr=0.7))
    with pytest.raises(ValueError, match='needs max_per_img'):
        _head(test_cfg=dict(nms_pre=10, nms=dict(type='nms', iou_threshold=0.7)))
    with pytest.raises(ValueError, match='iou_threshold'):
        _head(test_cfg=dict(TEST_CFG, nms=dict(type='nms')))
    with pytest.raises(ValueError, match='add_gt_as_proposals=False'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=256,
                                                      pos_fraction=0.5)))
    with pytest.raises(NotImplementedError, match='PseudoSampler'):
        _head(loss_cls=dict(type='FocalLoss', use_sigmoid=True))
    head = _head()
    with pytest.raises(ValueError, match='the proposal cfg'):
        head.get_bboxes([torch.randn(1, 1, 2, 2)], [torch.randn(1, 4, 2, 2)],
                        img_metas=[_meta()], cfg=dict(nms_pre=3))
    with pytest.raises(NotImplementedError, match='aug_test_rpn'):
        head.aug_test([], [])
