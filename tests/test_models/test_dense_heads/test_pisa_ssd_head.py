import math

import numpy as np
import pytest
import torch

from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.level_heads import assert_head_mode_exact

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                               min_pos_iou=0., ignore_iof_thr=-1, gt_max_assign_all=False),
                 smoothl1_beta=1., allowed_border=-1, pos_weight=-1, neg_pos_ratio=3,
                 debug=False)
PISA = dict(TRAIN_CFG, isr=dict(k=2., bias=0.), carl=dict(k=1., bias=0.2))
TINY_ANCHORS = dict(type='SSDAnchorGenerator', scale_major=False, strides=[8, 16],
                    ratios=[[], []], min_sizes=[8, 16], max_sizes=[12, 20])


def _head(type='PISASSDHead', **kw):
    cfg = dict(type=type, num_classes=3, in_channels=(4, 4), anchor_generator=TINY_ANCHORS,
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[0.1, 0.1, 0.2, 0.2]),
               train_cfg=PISA,
               test_cfg=dict(nms_pre=100, nms=dict(type='nms', iou_threshold=0.45),
                             min_bbox_size=0, score_thr=0.02, max_per_img=20))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def _inputs(n=2, seed=3):
    g = torch.Generator().manual_seed(seed)
    cls = [torch.randn(n, 8, 4, 4, generator=g), torch.randn(n, 8, 2, 2, generator=g)]
    reg = [torch.randn(n, 8, 4, 4, generator=g) * .1, torch.randn(n, 8, 2, 2, generator=g) * .1]
    gts = [torch.tensor([[2., 2., 14., 13.], [10., 12., 30., 30.], [3., 4., 12., 12.]]),
           torch.tensor([[0., 0., 20., 18.]])][:n]
    labels = [torch.tensor([0, 2, 0]), torch.tensor([1])][:n]
    return cls, reg, gts, labels, [_meta()] * n


def _losses(head, cls, reg, gts, labels, metas):
    cls = [c.clone().requires_grad_(True) for c in cls]
    reg = [r.clone().requires_grad_(True) for r in reg]
    losses = head.loss(cls, reg, gts, labels, metas)
    total = sum(v.sum() for vs in losses.values() for v in (vs if isinstance(vs, list) else [vs]))
    total.backward()
    return losses, [c.grad for c in cls], [r.grad for r in reg]


def test_keys_as_ssd_head_and_the_carl_loss():
    head = _head()
    assert sorted(head.state_dict()) == sorted(_head(type='SSDHead', train_cfg=TRAIN_CFG)
                                               .state_dict())
    losses, cls_g, _ = _losses(head, *_inputs())
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_carl'}
    assert len(losses['loss_cls']) == 2 and losses['loss_carl'].shape == (1, )
    assert all(math.isfinite(float(v)) for v in losses['loss_cls'] + losses['loss_bbox'])
    assert cls_g[0].abs().sum() > 0


def test_without_isr_and_carl_it_is_ssd():
    pisa, pg, _ = _losses(_head(train_cfg=TRAIN_CFG), *_inputs())
    ssd, sg, _ = _losses(_head(type='SSDHead', train_cfg=TRAIN_CFG), *_inputs())
    assert set(pisa) == {'loss_cls', 'loss_bbox'}
    for k in pisa:
        torch.testing.assert_close(torch.stack([v.sum() for v in pisa[k]]), torch.stack([v.sum() for v in ssd[k]]), rtol=0, atol=0)
    torch.testing.assert_close(pg, sg, rtol=0, atol=0)


def test_isr_changes_only_the_classification_loss():
    isr, _, _ = _losses(_head(train_cfg=dict(TRAIN_CFG, isr=dict(k=2., bias=0.))), *_inputs())
    plain, _, _ = _losses(_head(train_cfg=TRAIN_CFG), *_inputs())
    torch.testing.assert_close(torch.stack(isr["loss_bbox"]), torch.stack(plain["loss_bbox"]))
    assert not torch.equal(torch.cat(isr["loss_cls"]), torch.cat(plain["loss_cls"]))


def test_empty_ground_truth():
    cls, reg, _, _, metas = _inputs()
    losses, _, _ = _losses(_head(), cls, reg, [torch.zeros(0, 4)] * 2,
                           [torch.zeros(0, dtype=torch.long)] * 2, metas)
    assert float(losses['loss_carl']) == 0 and float(sum(losses['loss_cls'])) == 0


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head(stacked_convs=1, feat_channels=4, norm_cfg=dict(type='BN'),
                 act_cfg=dict(type='ReLU')).double().train()
    randomise_bn(head)
    feats = [torch.randn(2, 4, 4, 4, dtype=torch.float64),
             torch.randn(2, 4, 2, 2, dtype=torch.float64)]
    assert_head_mode_exact(head, feats, monkeypatch, mode)


def test_bad_arguments():
    with pytest.raises(UnknownKeyError, match='isrr'):
        _head(train_cfg=dict(PISA, isrr=dict(k=2.)))
    with pytest.raises(ValueError, match='needs train_cfg'):
        _head(train_cfg=None).loss(*_inputs())
    cls, reg, gts, labels, metas = _inputs()
    cls[0][0, 0, 0, 0] = float('nan')
    with pytest.raises(FloatingPointError, match='classification scores'):
        _head().loss(cls, reg, gts, labels, metas)
