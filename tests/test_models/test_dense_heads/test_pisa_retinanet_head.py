import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.retina_variants import (TRAIN_CFG, assert_modes_exact, build, inputs,
                                           loss_and_grads, retina_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)
PISA_TRAIN = dict(TRAIN_CFG, isr=dict(k=2., bias=0.), carl=dict(k=1., bias=0.2))


def _cfg(train_cfg=PISA_TRAIN, **kw):
    cfg = retina_head_cfg(type='PISARetinaHead', train_cfg=train_cfg,
                          loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0))
    cfg.update(kw)
    return cfg


def test_losses_over_all_levels_and_carl():
    losses, grads, _ = loss_and_grads(build(_cfg()))
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_carl'}
    assert all(len(v) == 1 and math.isfinite(v[0]) for v in losses.values())
    assert grads['retina_cls.weight'].abs().sum() > 0


def test_without_isr_and_carl_it_is_retinanet():
    """Without isr / carl the one-tensor losses are the sums of RetinaHead's per-level ones."""
    pisa, _, _ = loss_and_grads(build(_cfg(train_cfg=TRAIN_CFG)))
    plain, _, _ = loss_and_grads(build(retina_head_cfg(
        loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0))))
    for key in ('loss_cls', 'loss_bbox'):
        assert pisa[key][0] == pytest.approx(sum(plain[key]), rel=1e-6)


def test_isr_changes_only_the_classification_loss():
    isr_only = dict(TRAIN_CFG, isr=dict(k=2., bias=0.))
    with_isr, _, _ = loss_and_grads(build(_cfg(train_cfg=isr_only)))
    without, _, _ = loss_and_grads(build(_cfg(train_cfg=TRAIN_CFG)))
    assert with_isr['loss_bbox'] == without['loss_bbox']
    assert with_isr['loss_cls'] != without['loss_cls']


def test_sampling_results_come_back():
    head = build(_cfg())
    feats, metas, gt_bboxes, gt_labels = inputs()
    cls_scores, _ = head(feats)
    anchors, flags = head.get_anchors([c.shape[-2:] for c in cls_scores], metas)
    out = head.get_targets(anchors, flags, gt_bboxes, metas, gt_labels_list=gt_labels,
                           return_sampling_results=True)
    assert len(out) == 7 and len(out[-1]) == 2
    assert out[-1][0].pos_assigned_gt_inds.numel() > 0
    assert len(head.get_targets(anchors, flags, gt_bboxes, metas, gt_labels_list=gt_labels)) == 6


@pytest.mark.parametrize('mode', [m for m in MODES if m])
def test_every_checkpoint_mode_is_exact(mode):
    assert_modes_exact(lambda: build(_cfg()), mode)


def test_bad_train_cfg_key():
    with pytest.raises(Exception, match='isrr'):
        build(_cfg(train_cfg=dict(TRAIN_CFG, isrr=dict(k=2.))))
