"""CascadeRPNHead / StageCascadeRPNHead / AdaptiveConv (mmdet 2.x): keys, the adaptive convs,
anchor refinement and offsets, the stage losses, proposals, and exact checkpoint units."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.checkpointing import MODES
from ckptzoo.models.dense_heads.cascade_rpn_head import AdaptiveConv
from ckptzoo.registry import build_head

from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

STRIDES = [4, 8]
CODER = dict(type='DeltaXYWHBBoxCoder', target_means=(.0, ) * 4, target_stds=(.1, .1, .5, .5))
STAGES = [
    dict(type='StageCascadeRPNHead', in_channels=4, feat_channels=6,
         anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[1.0],
                               strides=STRIDES),
         adapt_cfg=dict(type='dilation', dilation=3), bridged_feature=True, sampling=False,
         with_cls=False, reg_decoded_bbox=True, bbox_coder=CODER,
         loss_bbox=dict(type='IoULoss', linear=True, loss_weight=10.0)),
    dict(type='StageCascadeRPNHead', in_channels=6, feat_channels=6,
         anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[1.0],
                               strides=STRIDES),
         adapt_cfg=dict(type='offset'), bridged_feature=False, sampling=True, with_cls=True,
         reg_decoded_bbox=True, bbox_coder=CODER,
         loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
         loss_bbox=dict(type='IoULoss', linear=True, loss_weight=10.0))]
TRAIN_CFG = [
    dict(assigner=dict(type='RegionAssigner', center_ratio=0.2, ignore_ratio=0.5),
         allowed_border=-1, pos_weight=-1, debug=False),
    dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.7, neg_iou_thr=0.7,
                       min_pos_iou=0.3, ignore_iof_thr=-1),
         sampler=dict(type='RandomSampler', num=64, pos_fraction=0.5, neg_pos_ub=-1,
                      add_gt_as_proposals=False),
         allowed_border=-1, pos_weight=-1, debug=False)]
TEST_CFG = dict(nms_pre=200, max_per_img=50, nms=dict(type='nms', iou_threshold=0.8),
                min_bbox_size=0)


def _head(**kw):
    torch.manual_seed(0)
    return build_head(dict(dict(type='CascadeRPNHead', num_stages=2, stages=copy.deepcopy(STAGES),
                                train_cfg=copy.deepcopy(TRAIN_CFG), test_cfg=TEST_CFG), **kw))


def _meta(h=32, w=32):
    return dict(img_shape=(h, w, 3), pad_shape=(32, 32, 3), ori_shape=(h, w, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def _inputs():
    g = torch.Generator().manual_seed(1)
    feats = [torch.randn(2, 4, 32 // s, 32 // s, generator=g, requires_grad=True)
             for s in STRIDES]
    gts = [torch.tensor([[4., 4., 20., 22.], [10., 2., 30., 30.]]),
           torch.tensor([[2., 6., 14., 16.]])]
    return feats, [_meta(), _meta(28, 30)], gts


def test_keys_and_layers_as_mmdet():
    head = _head()
    assert list(head.state_dict()) == [
        'stages.0.rpn_conv.conv.weight', 'stages.0.rpn_conv.conv.bias', 'stages.0.rpn_reg.weight',
        'stages.0.rpn_reg.bias', 'stages.1.rpn_conv.conv.weight', 'stages.1.rpn_cls.weight',
        'stages.1.rpn_cls.bias', 'stages.1.rpn_reg.weight', 'stages.1.rpn_reg.bias']
    s0, s1 = head.stages
    assert s0.rpn_conv.conv.dilation == (3, 3) and s0.rpn_conv.conv.padding == (3, 3)
    assert not s0.with_cls and not hasattr(s0, 'rpn_cls') and not s0.sampling
    assert type(s0.sampler).__name__ == 'PseudoSampler'
    assert s1.sampling and type(s1.sampler).__name__ == 'RandomSampler'
    assert s0.init_cfg['override'] == [dict(name='rpn_reg')]
    assert s1.init_cfg['override'] == [dict(name='rpn_reg'), dict(name='rpn_cls')]


def test_adaptive_conv_checks_its_offset():
    with pytest.raises(ValueError, match='offset'):
        AdaptiveConv(2, 2, type='dilation')(torch.zeros(1, 2, 3, 3), torch.zeros(1, 9, 18))
    with pytest.raises(ValueError, match='offset'):
        AdaptiveConv(2, 2, type='offset')(torch.zeros(1, 2, 3, 3), None)
    with pytest.raises(ValueError, match="'offset' or 'dilation'"):
        AdaptiveConv(2, 2, type='deform')


def test_offsets_of_grid_anchors_twice_the_stride_are_zero():
    """An anchor of 2 strides centred on its location is the plain 3x3 kernel: zero offsets,
    and the offset conv is then the plain conv."""
    stage = _head().stages[1]
    sizes = [(8, 8), (4, 4)]
    anchors = [[torch.cat([(a[:, :2] + a[:, 2:]) / 2 - s, (a[:, :2] + a[:, 2:]) / 2 + s], 1)
                for a, s in zip(stage.prior_generator.grid_priors(sizes), STRIDES)]]
    offsets = stage.anchor_offset(anchors, STRIDES, sizes)
    assert [o.shape for o in offsets] == [(1, 64, 18), (1, 16, 18)]
    assert all(float(o.abs().max()) == 0 for o in offsets)
    x = torch.randn(1, 6, 8, 8)
    torch.testing.assert_close(stage.rpn_conv(x, offsets[0]),
                               F.conv2d(x, stage.rpn_conv.conv.weight, padding=1))


def test_forward_bridges_and_refines():
    head = _head()
    feats, metas, _ = _inputs()
    x, cls, reg = head.stages[0](feats)
    assert cls == [None, None] and [r.shape for r in reg] == [(2, 4, 8, 8), (2, 4, 4, 4)]
    assert x[0].shape == (2, 6, 8, 8)  # bridged: the stage's features
    x1, cls1, _ = head.stages[1](x, head.stages[1].anchor_offset(
        *head.stages[0].get_anchors([(8, 8), (4, 4)], metas)[:1], STRIDES, [(8, 8), (4, 4)]))
    assert x1[0] is x[0] and cls1[0].shape == (2, 1, 8, 8)  # not bridged: its input
    anchors, _ = head.stages[0].get_anchors([(8, 8), (4, 4)], metas)
    zero = [torch.zeros(2, 4, 8, 8), torch.zeros(2, 4, 4, 4)]
    refined = head.stages[0].refine_bboxes(anchors, zero, metas)
    assert float(refined[1][0][:, 2].max()) == 30 and float(refined[0][0].min()) == 0


def test_losses_names_and_proposals_from_test_cfg():
    head = _head()
    feats, metas, gts = _inputs()
    torch.manual_seed(3)
    losses, proposals = head.forward_train(feats, metas, gts, proposal_cfg=dict(max_per_img=1))
    assert list(losses) == ['s0.loss_rpn_reg', 's1.loss_rpn_cls', 's1.loss_rpn_reg']
    assert all(len(v) == 2 for v in losses.values())
    assert [p.shape[1] for p in proposals] == [5, 5] and 1 < len(proposals[0]) <= 50
    assert head.simple_test_rpn(feats, metas)[0].shape[1] == 5
    with pytest.raises(ValueError, match='gt_labels'):
        head.forward_train(feats, metas, gts, gt_labels=[torch.tensor([0, 1])] * 2)
    with pytest.raises(NotImplementedError):
        head.aug_test_rpn([feats], [metas])


def test_without_sampling_losses_are_averaged_over_anchors_by_200():
    stage = _head().stages[0]
    feats, metas, gts = _inputs()
    sizes = [(8, 8), (4, 4)]
    anchors, flags = stage.get_anchors(sizes, metas)
    _, cls, reg = stage(feats)
    ref = stage.loss(anchors, flags, cls, reg, gts, metas)['loss_rpn_reg']
    stage.loss_bbox.loss_weight *= 2
    assert torch.allclose(stage.loss(anchors, flags, cls, reg, gts, metas)['loss_rpn_reg'][0],
                          2 * ref[0])
    labels = stage.get_targets(anchors, flags, gts, metas, sizes)[0]
    assert sum(lab.numel() for lab in labels) / 200.0 == 2 * 80 / 200.0


def _run(head, seed=5):
    feats, metas, gts = _inputs()
    torch.manual_seed(seed)
    losses = head.forward_train(feats, metas, gts)
    sum(sum(v) for v in losses.values()).backward()
    grads = {n: p.grad.clone() for n, p in head.named_parameters()}
    grads['feat0'] = feats[0].grad.clone()
    return {k: [float(x) for x in v] for k, v in losses.items()}, grads


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    ref = _run(_head(cp_use_reentrant=reentrant))
    head = _head(cp_use_reentrant=reentrant)
    assert list(head.checkpoint_units()) == [f'stages.{s}.level{i}' for s in (0, 1)
                                             for i in (0, 1)]
    head.set_checkpoint_plan({'*': mode})
    losses, grads = _run(head)
    assert losses == ref[0] and grads.keys() == ref[1].keys()
    assert all(torch.equal(grads[k], ref[1][k]) for k in grads)
