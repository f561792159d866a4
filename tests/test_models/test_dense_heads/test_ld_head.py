"""LDHead (mmdet 2.28.2's): GFLHead's keys and units, loss_ld against the teacher's
distributions by hand, GFL's losses with LD's normalisation, every checkpoint mode exact."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.level_heads import assert_head_mode_exact

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def _head(type='LDHead', **kw):
    cfg = dict(type=type, num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True), reg_max=4,
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0,
                             loss_weight=1.0),
               loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0), train_cfg=TRAIN_CFG)
    if type == 'LDHead':
        cfg['loss_ld'] = dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _metas():
    return [dict(img_shape=(32, 32, 3), pad_shape=(32, 32, 3), ori_shape=(32, 32, 3),
                 scale_factor=np.ones(4, dtype=np.float32), flip=False)] * 2


def _feats():
    g = torch.Generator().manual_seed(2)
    return [torch.randn(2, 4, 4, 4, generator=g), torch.randn(2, 4, 2, 2, generator=g)]


def test_keys_and_units_as_gfl():
    assert list(_head().state_dict()) == list(_head('GFLHead').state_dict())
    assert list(_head().checkpoint_units()) == ['level0', 'level1']


def test_losses_and_ld_by_hand():
    ld, gfl = _head(), _head('GFLHead')
    cls, reg = ld(_feats())
    soft = [r + torch.randn_like(r) for r in reg]
    losses = ld.loss(cls, reg, GTS, LABELS, soft, _metas())
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_dfl', 'loss_ld'}
    ref = gfl.loss(cls, reg, GTS, LABELS, _metas())
    torch.testing.assert_close(losses['loss_cls'], ref['loss_cls'])
    # the box losses of GFL, rescaled from its clamp(1) to LD's "+ 1e-6" normaliser
    ld_weights = sum(ld.loss_single(*a, num_total_samples=1.0)[4] for a in zip(
        *_level_args(ld, cls, reg, soft)))
    gfl_norm = max(float(ld_weights), 1.0)
    for a, b in zip(losses['loss_bbox'], ref['loss_bbox']):
        torch.testing.assert_close(a * (float(ld_weights) + 1e-6), b * gfl_norm)
    # loss_ld on level 0 by hand: the positives' 4 sides, weighted by their best class score
    anchors, labels = _level_args(ld, cls, reg, soft)[0][0], _level_args(ld, cls, reg, soft)[3][0]
    labels = labels.reshape(-1)
    pos = ((labels >= 0) & (labels < 2)).nonzero().squeeze(1)
    pred = reg[0].permute(0, 2, 3, 1).reshape(-1, 20)[pos].reshape(-1, 5)
    tgt = soft[0].permute(0, 2, 3, 1).reshape(-1, 20)[pos].reshape(-1, 5)
    w = cls[0].permute(0, 2, 3, 1).reshape(-1, 2).sigmoid().max(1)[0][pos]
    p = F.softmax(tgt / 10, 1)
    kl = (p * (p.log() - F.log_softmax(pred / 10, 1))).mean(1) * 100
    expected = 0.25 * (kl * w[:, None].expand(-1, 4).reshape(-1)).sum() / 4
    torch.testing.assert_close(losses['loss_ld'][0], expected)


def _level_args(head, cls, reg, soft):
    anchors, flags = head.get_anchors([c.shape[-2:] for c in cls], _metas())
    (anchor_list, labels, label_weights, bbox_targets, _, _, _) = head.get_targets(
        anchors, flags, GTS, _metas(), gt_labels_list=LABELS, label_channels=2)
    return (anchor_list, cls, reg, labels, label_weights, bbox_targets,
            head.prior_generator.strides, soft)


def test_no_positives_and_mismatched_teacher():
    head = _head()
    cls, reg = head(_feats())
    losses = head.loss(cls, reg, [torch.zeros(0, 4)] * 2, [torch.zeros(0, dtype=torch.long)] * 2,
                       reg, _metas())
    assert all(float(v) == 0 for v in losses['loss_ld'])
    with pytest.raises(ValueError, match='teacher gave 1 levels'):
        head.loss(cls, reg, GTS, LABELS, reg[:1], _metas())


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head().double()
    feats = [f.double() for f in _feats()]
    assert_head_mode_exact(head, feats, monkeypatch, mode)
