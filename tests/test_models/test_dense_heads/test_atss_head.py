import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _head(**kw):
    """Strides 8 and 16, one square anchor of 4 strides per position (ATSS's layout)."""
    cfg = dict(type='ATSSHead', num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[0.1, 0.1, 0.2, 0.2]),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                             loss_weight=1.0),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
               loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _feats(batch=2, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 4, 4, 4, generator=g), torch.randn(batch, 4, 2, 2, generator=g)]


GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def test_keys_shapes_and_init():
    head = _head(pred_kernel_size=1)
    keys = set(head.state_dict())
    assert {'cls_convs.0.conv.weight', 'cls_convs.0.gn.weight', 'reg_convs.0.gn.bias',
            'atss_cls.weight', 'atss_cls.bias', 'atss_reg.weight', 'atss_centerness.weight',
            'scales.0.scale', 'scales.1.scale'} <= keys
    assert 'cls_convs.0.conv.bias' not in keys  # the conv before a norm has no bias
    assert head.atss_cls.kernel_size == (1, 1) and head.scales[1].scale.shape == ()
    torch.testing.assert_close(head.atss_cls.bias, torch.full((2, ), math.log(0.01 / 0.99)))
    cls, reg, ctr = head(_feats())
    assert [c.shape for c in cls] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
    assert [c.shape for c in ctr] == [(2, 1, 4, 4), (2, 1, 2, 2)]
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_each_level_has_its_scale():
    head = _head()
    feats = _feats()
    _, reg, _ = head(feats)
    with torch.no_grad():
        head.scales[1].scale.fill_(3.)
    _, reg3, ctr = head(feats)
    torch.testing.assert_close(reg3[0], reg[0])
    torch.testing.assert_close(reg3[1], 3 * reg[1])


def test_loss_by_hand_from_the_targets():
    """The losses recomputed from the head's own targets: focal over the positives, the
    GIoU of the decoded boxes weighted by the centerness targets over their sum, and the
    centerness BCE over the positives."""
    head = _head()
    cls, reg, ctr = head(_feats())
    metas = [_meta(), _meta()]
    losses = head.loss(cls, reg, ctr, GTS, LABELS, metas)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_centerness'}
    anchors, valid = head.get_anchors([c.shape[-2:] for c in cls], metas)
    (anchors, labels, _, targets, _, num_pos, _) = head.get_targets(
        anchors, valid, GTS, metas, gt_labels_list=LABELS)
    anchors, labels, targets = (torch.cat(t, 1).reshape(-1, t[0].size(-1)) if t[0].dim() > 2
                                else torch.cat(t, 1).reshape(-1) for t in (anchors, labels,
                                                                          targets))
    flat = lambda xs, c: torch.cat([x.permute(0, 2, 3, 1).reshape(x.size(0), -1, c)  # noqa
                                    for x in xs], 1).reshape(-1, c)
    logits, deltas, centers = flat(cls, 2), flat(reg, 4), flat(ctr, 1)[:, 0]
    pos = (labels < 2).nonzero()[:, 0]
    assert len(pos) == num_pos >= 3
    onehot = F.one_hot(labels, 3)[:, :2].float()
    p = logits.sigmoid()
    focal = -(0.25 * onehot * (1 - p)**2 * torch.log(p)
              + 0.75 * (1 - onehot) * p**2 * torch.log(1 - p)).sum() / num_pos
    torch.testing.assert_close(sum(losses['loss_cls']), focal, rtol=1e-5, atol=0)
    ctr_t = head.centerness_target(anchors[pos], targets[pos])
    decoded = head.bbox_coder.decode(anchors[pos], deltas[pos])
    lt = torch.max(decoded[:, :2], targets[pos, :2])
    rb = torch.min(decoded[:, 2:], targets[pos, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda b: (b[:, 2:] - b[:, :2]).prod(-1)  # noqa
    union = area(decoded) + area(targets[pos]) - inter
    hull = (torch.max(decoded[:, 2:], targets[pos, 2:])
            - torch.min(decoded[:, :2], targets[pos, :2])).prod(-1)
    giou = inter / union - (hull - union) / hull
    torch.testing.assert_close(sum(losses['loss_bbox']),
                               2.0 * ((1 - giou) * ctr_t).sum() / ctr_t.sum(), rtol=1e-5, atol=0)
    bce = F.binary_cross_entropy_with_logits(centers[pos], ctr_t, reduction='sum') / num_pos
    torch.testing.assert_close(sum(losses['loss_centerness']), bce, rtol=1e-5, atol=0)


def test_centerness_target_by_hand():
    head = _head()
    anchors = torch.tensor([[0., 0., 10., 10.]])
    gts = torch.tensor([[1., 3., 13., 9.]])  # l 4, r 8, t 2, b 4
    torch.testing.assert_close(head.centerness_target(anchors, gts),
                               torch.tensor([math.sqrt(4 / 8 * 2 / 4)]))


def test_without_gt_the_box_losses_are_zero_and_connected():
    head = _head()
    feats = [f.requires_grad_() for f in _feats()]
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2, [torch.zeros(0).long()] * 2,
                       [_meta(), _meta()])
    assert all(v.item() == 0 for v in losses['loss_bbox'] + losses['loss_centerness'])
    sum(sum(v) for v in losses.values()).backward()
    assert torch.isfinite(feats[0].grad).all() and feats[0].grad.abs().sum() > 0


def test_get_bboxes_multiplies_by_the_centerness():
    head = _head()
    cls, reg, ctr = head(_feats(batch=1))
    cls = [torch.full_like(c, -10.) for c in cls]
    cls[0][0, 1, 2, 1] = 3.  # level 0, class 1, position (y 2, x 1)
    ctr = [torch.zeros_like(c) for c in ctr]
    ctr[0][0, 0, 2, 1] = 1.
    reg = [torch.zeros_like(r) for r in reg]
    (dets, labels), = head.get_bboxes(cls, reg, ctr, img_metas=[_meta()])
    assert labels.tolist() == [1]
    # anchor at (8, 16), 16 px wide
    torch.testing.assert_close(dets, torch.tensor(
        [[0., 8., 16., 24., torch.tensor(3.).sigmoid() * torch.tensor(1.).sigmoid()]]))
    (dets2, _), = head.simple_test(_feats(batch=1), [_meta()])
    assert dets2.shape[1] == 5


@pytest.mark.parametrize('mode,reentrant', [('full', False), ('full', True),
                                            ('selective', False), ('offload', False)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    def run(head):
        head.zero_grad()
        feats = [f.clone().double().requires_grad_() for f in base]
        losses = head.forward_train(feats, metas, GTS, LABELS)
        loss = sum(sum(v) for v in losses.values())
        loss.backward()
        return (loss.detach(), [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()})

    base, metas = _feats(), [_meta(), _meta(28, 30)]
    plain = _head(stacked_convs=2).double()
    ref = run(plain)
    cp = _head(stacked_convs=2, cp_use_reentrant=reentrant).double()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-12)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert all(g.abs().sum() > 0 for g in ref[2].values())
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=1e-12, msg=name)


def test_with_cp_flag_checkpoints_every_level(count_cp):
    head = _head(with_cp=True)
    assert head.checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    head([f.requires_grad_() for f in _feats()])
    assert count_cp['checkpoints'] == 2


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match='reg_decoded_bbox must be True, got False'):
        _head(reg_decoded_bbox=False)
    with pytest.raises(ValueError, match='pred_kernel_size must be a positive odd int, got 2'):
        _head(pred_kernel_size=2)
    with pytest.raises(ValueError, match='samples no anchors'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8)))
    assert _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='PseudoSampler'))).sampling is False
    with pytest.raises(ValueError, match='expects 2 levels'):
        _head()(_feats()[:1])
    with pytest.raises(TypeError, match='with_cp must be a bool'):
        _head(with_cp='full')
