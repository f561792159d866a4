import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads.gfl_head import Integral
from ckptzoo.models.losses.iou_loss import aligned_overlaps
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)
GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def _head(**kw):
    cfg = dict(type='GFLHead', num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True), reg_max=4,
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0,
                             loss_weight=1.0),
               loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
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


def test_keys_shapes_and_init():
    head = _head()
    keys = set(head.state_dict())
    assert {'cls_convs.0.conv.weight', 'cls_convs.0.gn.weight', 'gfl_cls.weight',
            'gfl_reg.bias', 'scales.1.scale', 'integral.project'} <= keys
    torch.testing.assert_close(head.integral.project, torch.arange(5.))
    torch.testing.assert_close(head.gfl_cls.bias, torch.full((2, ), math.log(0.01 / 0.99)))
    cls, reg = head(_feats())
    assert [c.shape for c in cls] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [r.shape for r in reg] == [(2, 20, 4, 4), (2, 20, 2, 2)]
    assert head.bbox_pred_dims == 20 and list(head.checkpoint_units()) == ['level0', 'level1']


def test_integral_is_the_expected_bin():
    integral = Integral(reg_max=3)
    logits = torch.full((1, 16), -1e4)
    logits[0, [1, 4, 11, 12, 13]] = 0.  # sides: bin 1, bin 0, bin 3, bins 0 and 1 half each
    torch.testing.assert_close(integral(logits), torch.tensor([[1., 0., 3., 0.5]]))


def test_loss_targets_are_the_predicted_iou_and_the_gt_distances():
    head = _head()
    cls, reg = head(_feats())
    metas = [_meta(), _meta()]
    losses = head.loss(cls, reg, GTS, LABELS, metas)
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_dfl'}
    assert all(torch.isfinite(v) for vs in losses.values() for v in vs)
    assert sum(losses['loss_bbox']) > 0 and sum(losses['loss_dfl']) > 0
    # level 0 by hand: the IoU score target of the positives
    anchors, valid = head.get_anchors([c.shape[-2:] for c in cls], metas)
    anchors, labels, _, targets, _, num_pos, _ = head.get_targets(anchors, valid, GTS, metas,
                                                                 gt_labels_list=LABELS)
    labels0, anchors0, targets0 = labels[0].reshape(-1), anchors[0].reshape(-1, 4), \
        targets[0].reshape(-1, 4)
    pos = (labels0 < 2).nonzero()[:, 0]
    assert len(pos) > 0
    pred0 = reg[0].permute(0, 2, 3, 1).reshape(-1, 20)[pos]
    centres = head.anchor_center(anchors0[pos]) / 8
    decoded = head.bbox_coder.decode(centres, head.integral(pred0))
    iou = aligned_overlaps(decoded, targets0[pos] / 8)
    logits = cls[0].permute(0, 2, 3, 1).reshape(-1, 2)
    p = logits.sigmoid()
    onehot = torch.zeros_like(p)
    onehot[pos, labels0[pos]] = 1
    score = torch.zeros_like(p)
    score[pos, labels0[pos]] = iou
    bce = torch.nn.functional.binary_cross_entropy(p, score, reduction='none')
    expected = (bce * torch.where(onehot > 0, (score - p).abs(), p)**2).sum() / num_pos
    torch.testing.assert_close(losses['loss_cls'][0], expected, rtol=1e-5, atol=0)


def test_without_gt_the_box_losses_are_zero_and_connected():
    head = _head()
    feats = [f.requires_grad_() for f in _feats()]
    losses = head.loss(*head(feats), [torch.zeros(0, 4)] * 2, [torch.zeros(0).long()] * 2,
                       [_meta(), _meta()])
    assert all(v.item() == 0 for v in losses['loss_bbox'] + losses['loss_dfl'])
    sum(sum(v) for v in losses.values()).backward()
    assert feats[0].grad.abs().sum() > 0


def test_get_bboxes_decodes_the_expected_distances_in_strides():
    head = _head()
    cls = [torch.full((1, 2, 4, 4), -10.), torch.full((1, 2, 2, 2), -10.)]
    cls[1][0, 0, 1, 0] = 2.  # level 1 (stride 16), class 0, position (y 1, x 0): centre (0, 16)
    reg = [torch.full((1, 20, 4, 4), -1e4), torch.full((1, 20, 2, 2), -1e4)]
    for side, bin_ in enumerate([1, 0, 2, 1]):  # l, t, r, b in strides
        reg[0][0, side * 5 + bin_] = 0.
        reg[1][0, side * 5 + bin_] = 0.
    (dets, labels), = head.get_bboxes(cls, reg, img_metas=[_meta()])
    assert labels.tolist() == [0]
    torch.testing.assert_close(
        dets, torch.tensor([[0., 16., 32., 32., torch.tensor(2.).sigmoid()]]))


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
    with pytest.raises(ValueError, match='one anchor per position'):
        _head(anchor_generator=dict(type='AnchorGenerator', ratios=[0.5, 1.0],
                                    octave_base_scale=2, scales_per_octave=1, strides=[8, 16]))
    with pytest.raises(ValueError, match='reg_max must be a positive int, got 0'):
        _head(reg_max=0)
    with pytest.raises(ValueError, match='samples no anchors'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8)))
