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
GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def _head(type='LDHead', seed=0, **kw):
    cfg = dict(type=type, num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True), reg_max=4,
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0,
                             loss_weight=1.0),
               loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    if type == 'LDHead':
        cfg['loss_ld'] = dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10)
    cfg.update(kw)
    torch.manual_seed(seed)
    return build_head(cfg)


def _meta(h=32, w=32):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False)


def _feats(batch=2, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 4, 4, 4, generator=g), torch.randn(batch, 4, 2, 2, generator=g)]


def test_layers_and_keys_are_gfl_heads():
    ld, gfl = _head(), _head(type='GFLHead')
    assert list(ld.state_dict()) == list(gfl.state_dict())
    assert list(ld.checkpoint_units()) == ['level0', 'level1']
    assert type(ld.loss_ld).__name__ == 'KnowledgeDistillationKLDivLoss'
    default = _head(loss_ld=dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10))
    assert default.loss_ld.T == 10


def test_gfl_losses_are_gfl_heads_and_loss_ld_is_the_positives_kl():
    ld, gfl = _head(), _head(type='GFLHead')
    gfl.load_state_dict(ld.state_dict())
    feats, metas = _feats(), [_meta(), _meta(28, 30)]
    teacher = _head(seed=1)(feats)
    cls, reg = ld(feats)
    losses = ld.loss(cls, reg, GTS, LABELS, teacher[1], metas)
    ref = gfl.loss(cls, reg, GTS, LABELS, metas)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_dfl', 'loss_ld'}
    torch.testing.assert_close(losses['loss_cls'], ref['loss_cls'], rtol=0, atol=0)
    anchors, valid = ld.get_anchors([c.shape[-2:] for c in cls], metas)
    _, labels, _, _, _, _, _ = ld.get_targets(anchors, valid, GTS, metas, gt_labels_list=LABELS)
    for lvl in range(2):
        lab = labels[lvl].reshape(-1)
        pos = (lab < 2).nonzero()[:, 0]
        pred = reg[lvl].permute(0, 2, 3, 1).reshape(-1, 20)[pos].reshape(-1, 5)
        soft = teacher[1][lvl].permute(0, 2, 3, 1).reshape(-1, 20)[pos].reshape(-1, 5)
        w = cls[lvl].permute(0, 2, 3, 1).reshape(-1, 2).sigmoid().max(1)[0][pos]
        p = F.softmax(soft / 10, 1)
        kl = (p * (p.log() - F.log_softmax(pred / 10, 1))).mean(1) * 100
        expected = 0.25 * (kl * w.repeat_interleave(4)).sum() / (4 + torch.finfo(torch.float32).eps)
        assert len(pos) > 0
        torch.testing.assert_close(losses['loss_ld'][lvl], expected, rtol=1e-5, atol=1e-7)
    # a teacher equal to the student: nothing to distil
    same = ld.loss(cls, reg, GTS, LABELS, [r.detach() for r in reg], metas)
    assert all(v.abs() < 1e-6 for v in same['loss_ld'])


def test_box_losses_are_divided_by_the_weight_sum_plus_1e6():
    ld = _head()
    feats, metas = _feats(), [_meta(), _meta()]
    cls, reg = ld(feats)
    losses = ld.loss(cls, reg, GTS, LABELS, _head(seed=1)(feats)[1], metas)
    gfl = _head(type='GFLHead')
    gfl.load_state_dict(ld.state_dict())
    ratio = [a / b for a, b in zip(losses['loss_bbox'], gfl.loss(cls, reg, GTS, LABELS,
                                                                 metas)['loss_bbox'])]
    # GFL's divisor is max(sum, 1), LD's sum + 1e-6: one ratio on every level, and with a
    # weight sum below 1 (an untrained head's scores) the ratio is 1 / sum, not 1
    torch.testing.assert_close(ratio[0], ratio[1])
    assert ratio[0] > 1.5


def test_no_positives_give_zero_connected_losses():
    head = _head()
    feats = [f.requires_grad_() for f in _feats()]
    teacher = _head(seed=1)(_feats())[1]
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2, [torch.zeros(0).long()] * 2,
                       teacher, [_meta(), _meta()])
    assert all(v.item() == 0 for v in losses['loss_bbox'] + losses['loss_dfl'] +
               losses['loss_ld'])
    sum(sum(v) for v in losses.values()).backward()
    assert feats[0].grad.abs().sum() > 0


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    def run(head):
        head.zero_grad()
        feats = [f.clone().double().requires_grad_() for f in base]
        losses = head.forward_train(feats, teacher, metas, GTS, LABELS)
        loss = sum(sum(v) for v in losses.values())
        loss.backward()
        return (loss.detach(), [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()})

    base, metas = _feats(), [_meta(), _meta(28, 30)]
    teacher = tuple([t.double().detach() for t in o] for o in _head(seed=1)(base))
    plain = _head().double()
    ref = run(plain)
    cp = _head().double()
    cp.load_state_dict(plain.state_dict())
    cp.set_checkpoint_plan({'level*': mode})
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=0, msg=name)


def test_a_teacher_of_another_shape_is_refused():
    head = _head()
    feats = _feats()
    teacher = _head(reg_max=7)(feats)[1]
    with pytest.raises(ValueError, match='reg_max'):
        head.loss(*head(feats), GTS, LABELS, teacher, [_meta(), _meta()])
    with pytest.raises(ValueError, match='teacher levels'):
        head.loss(*head(feats), GTS, LABELS, teacher[:1], [_meta(), _meta()])
