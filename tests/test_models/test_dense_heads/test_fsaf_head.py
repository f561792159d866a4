import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.retina_variants import (assert_modes_exact, build, inputs, loss_and_grads,
                                           retina_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)
FSAF_TRAIN = dict(assigner=dict(type='CenterRegionAssigner', pos_scale=0.2, neg_scale=0.5,
                                min_pos_iof=0.01),
                  allowed_border=-1, pos_weight=-1, debug=False)


def fsaf_head_cfg(**kw):
    cfg = retina_head_cfg(
        type='FSAFHead', reg_decoded_bbox=True, train_cfg=FSAF_TRAIN,
        anchor_generator=dict(type='AnchorGenerator', octave_base_scale=1, scales_per_octave=1,
                              ratios=[1.0], strides=[8, 16]),
        bbox_coder=dict(type='TBLRBBoxCoder', normalizer=4.0),
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=1.0, reduction='none'),
        loss_bbox=dict(type='IoULoss', eps=1e-6, loss_weight=1.0, reduction='none'))
    cfg.update(kw)
    return cfg


def test_init_and_relu_box_branch():
    head = build(fsaf_head_cfg())
    assert (head.retina_reg.bias == 0.25).all()
    torch.testing.assert_close(head.retina_cls.bias, torch.full((3, ), math.log(0.01 / 0.99)))
    _, bbox_preds = head(inputs()[0])
    assert all((b >= 0).all() for b in bbox_preds)
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_losses_and_log_values():
    losses, grads, _ = loss_and_grads(build(fsaf_head_cfg()))
    assert set(losses) == {'loss_cls', 'loss_bbox', 'num_pos', 'pos_recall'}
    assert len(losses['loss_cls']) == len(losses['loss_bbox']) == 2
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    assert losses['num_pos'][0] > 0 and 0 <= losses['pos_recall'][0] <= 100
    assert grads['retina_reg.weight'].abs().sum() > 0


def test_each_gt_trains_at_its_best_level_only():
    head = build(fsaf_head_cfg())
    # gt 0 at levels 0 and 1, gt 1 only at level 0; level 1 is better for gt 0
    cls_loss = [torch.tensor([[1., 1.], [2., 0.], [5., 5.]]), torch.tensor([[0.5, 0.], [9., 9.]])]
    reg_loss = [torch.tensor([1., 1., 1.]), torch.tensor([0.5, 0.])]
    gt_inds = [torch.tensor([0, 0, 1]), torch.tensor([0, -1])]
    levels = torch.stack([head.collect_loss_level_single(c, r, g, 2)
                          for c, r, g in zip(cls_loss, reg_loss, gt_inds)])
    torch.testing.assert_close(levels, torch.tensor([[3., 11.], [1., 1e6]]))
    argmin = levels.min(dim=0)[1]
    assert argmin.tolist() == [1, 0]
    labels = [torch.tensor([1, 0, 1]), torch.tensor([0, 3])]
    cls0, reg0, pos0 = head.reweight_loss_single(cls_loss[0], reg_loss[0], gt_inds[0],
                                                 labels[0], 0, argmin)
    # level 0: gt 0's priors 0 and 1 drop their box loss and their label's class loss
    assert pos0.tolist() == [False, False, True]
    assert cls0.item() == 1. + 0. + 10. and reg0.item() == 1.
    cls1, reg1, pos1 = head.reweight_loss_single(cls_loss[1], reg_loss[1], gt_inds[1],
                                                 labels[1], 1, argmin)
    assert pos1.tolist() == [True, False] and cls1.item() == 18.5 and reg1.item() == 0.5


def test_without_ground_truth():
    head = build(fsaf_head_cfg())
    feats, metas, _, _ = inputs()
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2,
                       [torch.zeros(0, dtype=torch.long)] * 2, metas)
    assert losses['num_pos'].item() == 0 and losses['pos_recall'].item() == 0
    assert all(torch.isfinite(x) for x in losses['loss_cls'])
    sum(losses['loss_cls'] + losses['loss_bbox']).backward()


@pytest.mark.parametrize('mode', [m for m in MODES if m])
def test_every_checkpoint_mode_is_exact(mode):
    assert_modes_exact(lambda: build(fsaf_head_cfg(norm_cfg=dict(type='BN',
                                                                 requires_grad=True))), mode)


def test_losses_must_be_unreduced():
    with pytest.raises(ValueError, match="loss_cls needs reduction='none'"):
        build(fsaf_head_cfg(loss_cls=dict(type='FocalLoss', use_sigmoid=True)))
