import math

import numpy as np
import pytest
import torch

from ckptzoo.core.utils import GaussianMixture1D
from ckptzoo.models.dense_heads import ATSSHead, PAAHead
from ckptzoo.models.dense_heads.paa_head import levels_to_images
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.1, neg_iou_thr=0.1,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _head(**kw):
    cfg = dict(type='PAAHead', reg_decoded_bbox=True, score_voting=True, topk=9,
               num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[0.1, 0.1, 0.2, 0.2]),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                             loss_weight=1.0),
               loss_bbox=dict(type='GIoULoss', loss_weight=1.3),
               loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=0.5),
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


def test_atss_layers_and_keys():
    head = _head()
    assert isinstance(head, ATSSHead)
    assert {'atss_cls.weight', 'atss_reg.bias', 'atss_centerness.weight', 'scales.1.scale',
            'cls_convs.0.gn.weight'} <= set(head.state_dict())
    torch.testing.assert_close(head.atss_cls.bias, torch.full((2, ), math.log(0.01 / 0.99)))
    assert head.checkpoint_plan() == {'level0': None, 'level1': None}


def test_levels_to_images():
    a, b = torch.arange(2 * 3 * 2 * 2.).view(2, 3, 2, 2), torch.arange(2 * 3 * 1.).view(2, 3, 1, 1)
    imgs = levels_to_images([a, b])
    assert [i.shape for i in imgs] == [(5, 3), (5, 3)]
    torch.testing.assert_close(imgs[1][:4], a[1].permute(1, 2, 0).reshape(4, 3))
    torch.testing.assert_close(imgs[1][4], b[1, :, 0, 0])


def test_reassign_keeps_the_low_loss_mode_up_to_its_most_likely_candidate():
    head = _head()
    anchors = [torch.zeros(4, 4), torch.zeros(2, 4)]
    pos_inds = torch.tensor([0, 1, 2, 4, 5])
    losses = torch.tensor([0.1, 0.12, 3.0, 0.2, 2.5])
    label = torch.full((6, ), 2)
    label[pos_inds] = 1
    label_weight, bbox_weight = torch.ones(6), torch.ones(6, 4)
    out_label, out_lw, out_bw, num_pos = head.paa_reassign(
        losses, label, label_weight, bbox_weight, pos_inds, torch.zeros(5, dtype=torch.long),
        anchors)
    # the mixture on the sorted losses (anchors 0, 1, 4, 5, 2)
    x = np.array([[0.1], [0.12], [0.2], [2.5], [3.0]], dtype=np.float32)
    gmm = GaussianMixture1D(np.array([0.5, 0.5]), np.array([x.min(), x.max()]).reshape(2, 1),
                            np.ones((2, 1))).fit(x)
    assert gmm.predict(x).tolist() == [0, 0, 0, 1, 1]
    keep = [0, 1, 4][:int(np.argmax(gmm.score_samples(x)[:3])) + 1]
    assert num_pos == len(keep)
    assert [i for i in range(6) if out_label[i] == 1] == keep
    assert all(out_label[i] == 2 for i in (2, 5)) and out_bw[[2, 5]].sum() == 0
    torch.testing.assert_close(out_lw, label_weight)
    assert label.tolist().count(1) == 5  # the inputs are not changed
    # topk=1: one candidate per level, so the two lowest (anchors 0 and 4)
    _, _, _, num_pos = _head(topk=1).paa_reassign(
        losses, label, label_weight, bbox_weight, pos_inds, torch.zeros(5, dtype=torch.long),
        anchors)
    assert num_pos in (1, 2)


def test_loss_reaches_every_parameter():
    head = _head()
    cls, reg, iou = head(_feats())
    losses = head.loss(cls, reg, iou, GTS, LABELS, [_meta(), _meta()])
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_iou'}
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    sum(losses.values()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in head.parameters())
    # no boxes at all: zero box and IoU losses that keep the graph
    cls, reg, iou = head(_feats())
    losses = head.loss(cls, reg, iou, [torch.zeros(0, 4)] * 2,
                       [torch.zeros(0, dtype=torch.long)] * 2, [_meta(), _meta()])
    assert losses['loss_bbox'] == 0 and losses['loss_iou'] == 0 and losses['loss_cls'] > 0
    sum(losses.values()).backward()


def test_score_voting_by_hand():
    head = _head()
    det = torch.tensor([[0., 0., 10., 10., 0.9]])
    boxes = torch.tensor([[0., 0., 10., 10.], [0., 0., 10., 12.], [50., 50., 60., 60.]])
    scores = torch.tensor([[0.9, 0., 0.], [0.6, 0.7, 0.], [0.8, 0., 0.]])
    voted, labels = head.score_voting(det, torch.tensor([0]), boxes, scores, 0.05)
    iou = torch.tensor([1., 100. / 120.])
    w = torch.exp(-(1 - iou)**2 / 0.025) * torch.tensor([0.9, 0.6])
    expected = (w[:, None] * boxes[:2]).sum(0) / w.sum()
    torch.testing.assert_close(voted, torch.cat([expected, torch.tensor([0.9])])[None])
    assert labels.tolist() == [0]


def test_get_bboxes_scores_are_sqrt_of_cls_times_iou():
    head = _head(score_voting=False)
    head.eval()
    with torch.no_grad():
        cls, reg, iou = head(_feats(batch=1))
        for c in cls:
            c.fill_(-10.)
        cls[0][0, 1, 2, 1] = 2.
        iou[0][0, 0, 2, 1] = 1.
        (dets, labels), = head.get_bboxes(cls, reg, iou, img_metas=[_meta()])
    assert labels.tolist() == [1]
    expected = (torch.tensor(2.).sigmoid() * torch.tensor(1.).sigmoid()).sqrt()
    torch.testing.assert_close(dets[0, 4], expected)
    with pytest.raises(NotImplementedError, match='with_nms'):
        head.get_bboxes(cls, reg, iou, img_metas=[_meta()], with_nms=False)


def test_every_checkpoint_mode_is_exact():
    feats = _feats()

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        losses = head.loss(*outs, GTS, LABELS, [_meta(), _meta()])
        sum(losses.values()).backward()
        return [float(v) for v in losses.values()], [x.grad for x in xs], \
            {n: p.grad for n, p in head.named_parameters()}

    ref = run(_head())
    for mode in ('full', 'selective', 'offload'):
        head = _head()
        head.set_checkpoint_plan({'level*': mode})
        got = run(head)
        assert got[0] == ref[0]
        for a, b in zip(got[1], ref[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for name, g in ref[2].items():
            torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)


def test_bad_arguments_are_named():
    with pytest.raises(NotImplementedError, match="covariance_type must be 'diag'"):
        _head(covariance_type='full')
    with pytest.raises(ValueError, match='topk'):
        _head(topk=0)
    with pytest.raises(ValueError, match='reg_decoded_bbox'):
        _head(reg_decoded_bbox=False)
    assert isinstance(_head(), PAAHead)
