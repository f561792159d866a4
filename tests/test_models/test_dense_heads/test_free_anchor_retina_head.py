import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.retina_variants import (assert_modes_exact, build, inputs, loss_and_grads,
                                           retina_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _cfg(**kw):
    cfg = retina_head_cfg(type='FreeAnchorRetinaHead', pre_anchor_topk=10, bbox_thr=0.5,
                          loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=0.75))
    cfg.update(kw)
    return cfg


def test_keys_are_retina_heads():
    head = build(_cfg())
    plain = build(retina_head_cfg())
    assert list(head.state_dict()) == list(plain.state_dict())
    assert (head.pre_anchor_topk, head.bbox_thr, head.gamma, head.alpha) == (10, 0.5, 2.0, 0.5)
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_bag_losses():
    losses, grads, _ = loss_and_grads(build(_cfg()))
    assert set(losses) == {'positive_bag_loss', 'negative_bag_loss'}
    assert all(math.isfinite(v[0]) and v[0] > 0 for v in losses.values())
    assert grads['retina_reg.weight'].abs().sum() > 0 and grads['feat1'].abs().sum() > 0


def test_no_ground_truth_gives_zero_positive_loss_with_gradients():
    head = build(_cfg())
    feats, metas, _, _ = inputs()
    empty = [torch.zeros(0, 4)] * 2
    losses = head.loss(*head(feats), empty, [torch.zeros(0, dtype=torch.long)] * 2, metas)
    assert losses['positive_bag_loss'].item() == 0
    (losses['positive_bag_loss'] + losses['negative_bag_loss']).backward()
    assert head.retina_reg.weight.grad is not None


def test_positive_bag_loss_by_hand():
    head = build(_cfg())
    cls_p = torch.tensor([[0.5, 0.25]])
    box_p = torch.tensor([[1.0, 0.8]])
    p = cls_p * box_p
    w = 1 / (1 - p)
    bag = (w / w.sum() * p).sum()
    torch.testing.assert_close(head.positive_bag_loss(cls_p, box_p), 0.5 * -torch.log(bag)[None])


def test_image_box_prob_is_the_class_wise_max():
    head = build(_cfg(bbox_thr=0.0))
    anchors = torch.tensor([[0., 0., 10., 10.], [0., 0., 20., 20.], [50., 50., 60., 60.]])
    gts = torch.tensor([[0., 0., 10., 10.], [0., 0., 20., 20.], [0., 0., 10., 20.]])
    prob = head._image_box_prob(anchors, torch.zeros(3, 4), gts, torch.tensor([1, 1, 0]))
    # bbox_thr 0: the probability is IoU / (the object's best IoU). Class 1: objects 0 and 1
    # each fit one anchor exactly, the max over them is 1 on anchors 0 and 1. Class 0: object
    # 2 has IoU 0.5 with anchors 0 and 1, its best: 1 on both.
    assert prob.shape == (3, 3)
    torch.testing.assert_close(prob[:, 1], torch.tensor([1.0, 1.0, 0.0]))
    torch.testing.assert_close(prob[:, 0], torch.tensor([1.0, 1.0, 0.0]))
    prob = head._image_box_prob(anchors, torch.zeros(3, 4), gts[:1], torch.tensor([1]))
    torch.testing.assert_close(prob[:, 1], torch.tensor([1.0, 0.25, 0.0]))
    assert (prob[:, 2] == 0).all()


@pytest.mark.parametrize('mode', [m for m in MODES if m])
def test_every_checkpoint_mode_is_exact(mode):
    assert_modes_exact(lambda: build(_cfg(norm_cfg=dict(type='BN', requires_grad=True))),
                       mode, empty_second=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match='pre_anchor_topk must be a positive int'):
        build(_cfg(pre_anchor_topk=0))
