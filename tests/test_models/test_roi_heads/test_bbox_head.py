import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.roi_heads import BBoxHead, ConvFCBBoxHead
from ckptzoo.registry import MODELS

CODER = dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4, target_stds=[0.1, 0.1, 0.2, 0.2])


def _head(type='Shared2FCBBoxHead', **kw):
    cfg = dict(type=type, in_channels=4, roi_feat_size=7, num_classes=2, bbox_coder=CODER,
               loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
               loss_bbox=dict(type='L1Loss', loss_weight=1.0))
    if type != 'BBoxHead':
        cfg['fc_out_channels'] = 16
    cfg.update(kw)
    torch.manual_seed(0)
    return MODELS.build(cfg)


def test_shared2fc_keys_shapes_and_order_are_mmdets():
    head = _head(num_classes=80, in_channels=256, fc_out_channels=1024)
    assert [(k, tuple(v.shape)) for k, v in head.state_dict().items()] == [
        ('fc_cls.weight', (81, 1024)), ('fc_cls.bias', (81, )),
        ('fc_reg.weight', (320, 1024)), ('fc_reg.bias', (320, )),
        ('shared_fcs.0.weight', (1024, 256 * 49)), ('shared_fcs.0.bias', (1024, )),
        ('shared_fcs.1.weight', (1024, 1024)), ('shared_fcs.1.bias', (1024, ))]


def test_shared4conv1fc_keys_are_mmdets():
    head = _head('Shared4Conv1FCBBoxHead', conv_out_channels=8,
                 norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
                 reg_class_agnostic=True)
    convs = [f'shared_convs.{i}.{p}' for i in range(4)
             for p in ('conv.weight', 'gn.weight', 'gn.bias')]
    assert list(head.state_dict()) == ['fc_cls.weight', 'fc_cls.bias', 'fc_reg.weight',
                                       'fc_reg.bias'] + convs + ['shared_fcs.0.weight',
                                                                 'shared_fcs.0.bias']
    assert head.shared_fcs[0].in_features == 8 * 49 and head.fc_reg.out_features == 4


def test_init_is_mmdets():
    """Normal(0.01) fc_cls, Normal(0.001) fc_reg, Xavier-uniform on every shared fc (each
    Linear inside the ModuleList), all biases 0."""
    head = _head(num_classes=80, in_channels=256, fc_out_channels=1024)
    assert head.fc_cls.weight.std().item() == pytest.approx(0.01, rel=0.05)
    assert head.fc_reg.weight.std().item() == pytest.approx(0.001, rel=0.05)
    for fc in head.shared_fcs:
        bound = math.sqrt(6 / (fc.in_features + fc.out_features))
        assert fc.weight.abs().max().item() <= bound
        assert fc.weight.abs().max().item() > 0.99 * bound
        assert (fc.bias == 0).all()
    for fc in (head.fc_cls, head.fc_reg):
        assert (fc.bias == 0).all()


def test_separate_branches():
    head = _head('ConvFCBBoxHead', num_shared_convs=1, num_cls_convs=1, num_cls_fcs=1,
                 num_reg_fcs=2, conv_out_channels=8)
    assert head.fc_cls.in_features == 16 and head.fc_reg.in_features == 16
    assert head.reg_fcs[0].in_features == 8 * 49
    cls_score, bbox_pred = head(torch.randn(5, 4, 7, 7))
    assert cls_score.shape == (5, 3) and bbox_pred.shape == (5, 8)
    with pytest.raises(ValueError, match='num_cls_convs'):
        _head('ConvFCBBoxHead', num_shared_fcs=1, num_cls_convs=1)
    with pytest.raises(ValueError, match='at least one'):
        _head('ConvFCBBoxHead')


def test_plain_bbox_head_flattens_and_avg_pools():
    x = torch.randn(3, 4, 7, 7)
    head = _head('BBoxHead')
    cls_score, bbox_pred = head(x)
    torch.testing.assert_close(cls_score, F.linear(x.flatten(1), head.fc_cls.weight,
                                                   head.fc_cls.bias))
    pooled = _head('BBoxHead', with_avg_pool=True)
    cls_score, bbox_pred = pooled(x)
    torch.testing.assert_close(bbox_pred, F.linear(x.mean((2, 3)), pooled.fc_reg.weight,
                                                   pooled.fc_reg.bias))
    assert pooled(torch.zeros(0, 4, 7, 7))[0].shape == (0, 3)
    assert _head('BBoxHead', with_cls=False)(x)[0] is None


def _sampling_results():
    return [SimpleNamespace(pos_bboxes=torch.tensor([[0., 0., 10., 10.], [5., 5., 25., 15.]]),
                            neg_bboxes=torch.tensor([[40., 40., 50., 50.]]),
                            pos_gt_bboxes=torch.tensor([[1., 1., 11., 12.], [5., 5., 25., 15.]]),
                            pos_gt_labels=torch.tensor([1, 0])),
            SimpleNamespace(pos_bboxes=torch.zeros(0, 4),
                            neg_bboxes=torch.tensor([[0., 0., 3., 3.]]),
                            pos_gt_bboxes=torch.zeros(0, 4),
                            pos_gt_labels=torch.zeros(0, dtype=torch.long))]


def test_get_targets_positives_first_background_is_num_classes():
    head = _head()
    labels, label_weights, bbox_targets, bbox_weights = head.get_targets(
        _sampling_results(), None, None, dict(pos_weight=2.0))
    assert labels.tolist() == [1, 0, 2, 2]
    assert label_weights.tolist() == [2., 2., 1., 1.]
    assert bbox_weights.tolist() == [[1.] * 4, [1.] * 4, [0.] * 4, [0.] * 4]
    # (gx - px) / pw / 0.1 = (6 - 5) / 10 / 0.1 = 1; (6.5 - 5) / 10 / 0.1 = 1.5;
    # log(10 / 10) / 0.2 = 0; log(11 / 10) / 0.2
    torch.testing.assert_close(bbox_targets[0], torch.tensor([1., 1.5, 0., math.log(1.1) / .2]))
    assert (bbox_targets[1:] == 0).all()
    per_image = head.get_targets(_sampling_results(), None, None, dict(pos_weight=-1),
                                 concat=False)
    assert [t.tolist() for t in per_image[1]] == [[1., 1., 1.], [1.]]


def test_loss_avg_factors_and_acc_by_hand():
    """loss_cls: weighted CE over the RoIs with a label weight; loss_bbox: L1 of each
    positive's own-class deltas, divided by *all* sampled RoIs (4); acc in percent."""
    head = _head()
    labels, label_weights, bbox_targets, bbox_weights = head.get_targets(
        _sampling_results(), None, None, dict(pos_weight=2.0))
    cls_score = torch.tensor([[0., 2., 0.], [3., 0., 0.], [0., 1., 0.], [0., 0., 1.]])
    bbox_pred = torch.randn(4, 8)
    rois = torch.zeros(4, 5)
    losses = head.loss(cls_score, bbox_pred, rois, labels, label_weights, bbox_targets,
                       bbox_weights)
    ce = F.cross_entropy(cls_score, labels, reduction='none')
    torch.testing.assert_close(losses['loss_cls'], (ce * label_weights).sum() / 4)
    assert losses['acc'].tolist() == [75.]  # row 2 predicts class 1, its label is background
    own = torch.stack([bbox_pred[0, 4:], bbox_pred[1, :4]])
    torch.testing.assert_close(losses['loss_bbox'], (own - bbox_targets[:2]).abs().sum() / 4)
    agnostic = _head(reg_class_agnostic=True)
    losses = agnostic.loss(cls_score, bbox_pred[:, :4], rois, labels, label_weights,
                           bbox_targets, bbox_weights)
    torch.testing.assert_close(losses['loss_bbox'],
                               (bbox_pred[:2, :4] - bbox_targets[:2]).abs().sum() / 4)


def test_loss_without_positives_or_weights():
    head = _head()
    bbox_pred = torch.randn(2, 8, requires_grad=True)
    labels = torch.tensor([2, 2])
    losses = head.loss(torch.randn(2, 3), bbox_pred, torch.zeros(2, 5), labels,
                       torch.zeros(2), torch.zeros(2, 4), torch.zeros(2, 4))
    assert losses['loss_cls'] == 0  # no weights: divided by max(0, 1)
    assert losses['loss_bbox'] == 0 and losses['loss_bbox'].requires_grad
    losses = head.loss(torch.zeros(0, 3), torch.zeros(0, 8), torch.zeros(0, 5),
                       torch.zeros(0, dtype=torch.long), torch.zeros(0), torch.zeros(0, 4),
                       torch.zeros(0, 4))
    assert set(losses) == {'loss_bbox'}  # mmdet leaves loss_cls and acc out without RoIs


def test_get_bboxes_decode_clip_rescale_nms():
    head = _head()
    rois = torch.tensor([[0., 10., 10., 20., 20.], [0., 30., 30., 50., 44.],
                         [0., 11., 10., 21., 20.]])
    cls_score = torch.tensor([[2., 0., 0.], [0., 1., 0.], [1.5, 0., 0.]])
    bbox_pred = torch.zeros(3, 8)
    bboxes, scores = head.get_bboxes(rois, cls_score, bbox_pred, (40, 45, 3), None)
    torch.testing.assert_close(scores, F.softmax(cls_score, -1))
    clipped = torch.tensor([[10., 10., 20., 20.], [30., 30., 45., 40.], [11., 10., 21., 20.]])
    torch.testing.assert_close(bboxes, clipped.repeat(1, 2))
    cfg = dict(score_thr=0.2, nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)
    dets, labels = head.get_bboxes(rois, cls_score, bbox_pred, (40, 45, 3),
                                   np.array([2., 2., 2., 2.], dtype=np.float32),
                                   rescale=True, cfg=cfg)
    p = F.softmax(cls_score, -1)
    # class 0: rois 0 (p .787) and 2 (p .692) overlap (IoU 0.82): 2 goes; roi 1 (p .212)
    # stays; class 1: roi 1 (p .576); the rest score below 0.2
    expected = torch.cat([torch.stack([clipped[0], clipped[1], clipped[1]]) / 2,
                          torch.stack([p[0, 0], p[1, 1], p[1, 0]])[:, None]], 1)
    torch.testing.assert_close(dets, expected)
    assert labels.tolist() == [0, 1, 0]


def test_get_bboxes_without_regression_clips_the_rois():
    head = _head('BBoxHead', with_reg=False)
    rois = torch.tensor([[0., -5., 10., 60., 20.]])
    bboxes, _ = head.get_bboxes(rois, torch.zeros(1, 3), None, (40, 45, 3), None)
    assert bboxes.tolist() == [[0., 10., 45., 20.]]


def test_bad_arguments():
    with pytest.raises(ValueError, match='with_cls or with_reg'):
        _head('BBoxHead', with_cls=False, with_reg=False)
    with pytest.raises(NotImplementedError, match='Linear'):
        _head(cls_predictor_cfg=dict(type='NoSuchLinear'))
    assert issubclass(type(_head()), ConvFCBBoxHead) and issubclass(ConvFCBBoxHead, BBoxHead)


@pytest.mark.parametrize('agnostic', [True, False])
def test_regress_by_class_decodes_the_labels_deltas_and_keeps_the_batch_index(agnostic):
    head = _head(reg_class_agnostic=agnostic)
    rois = torch.tensor([[1., 4., 4., 20., 30.], [1., 10., 12., 40., 36.]])
    g = torch.Generator().manual_seed(0)
    pred = torch.randn(2, 4 if agnostic else 8, generator=g)
    label = torch.tensor([1, 0])
    meta = dict(img_shape=(32, 48, 3))
    out = head.regress_by_class(rois, label, pred, meta)
    deltas = pred if agnostic else torch.stack([pred[0, 4:], pred[1, :4]])
    expected = head.bbox_coder.decode(rois[:, 1:], deltas, max_shape=(32, 48, 3))
    torch.testing.assert_close(out, torch.cat([rois[:, :1], expected], 1))
    torch.testing.assert_close(head.regress_by_class(rois[:, 1:], label, pred, meta), expected)
    assert out[:, 3].max() <= 48 and out[:, 4].max() <= 32
    with pytest.raises(ValueError, match=r'rois of \[n, 4\] or \[n, 5\]'):
        head.regress_by_class(rois[:, :3], label, pred, meta)


def test_refine_bboxes_drops_the_ground_truths_per_image():
    head = _head(reg_class_agnostic=True)
    rois = torch.tensor([[0., 1., 1., 9., 9.], [0., 2., 2., 8., 8.], [0., 3., 3., 7., 7.],
                         [1., 1., 1., 5., 5.], [1., 2., 2., 6., 6.]])
    pred = torch.zeros(5, 4)
    pos_is_gts = [torch.tensor([1, 0], dtype=torch.uint8), torch.tensor([0], dtype=torch.uint8)]
    metas = [dict(img_shape=(16, 16, 3))] * 2
    out = head.refine_bboxes(rois, torch.zeros(5, dtype=torch.long), pred, pos_is_gts, metas)
    torch.testing.assert_close(out[0], rois[1:3, 1:])  # zero deltas: the boxes, less the gt
    torch.testing.assert_close(out[1], rois[3:, 1:])
    with pytest.raises(ValueError, match='one entry per image'):
        head.refine_bboxes(rois, torch.zeros(5, dtype=torch.long), pred, pos_is_gts[:1], metas)


def test_custom_classifier_protocol_of_a_seesaw_loss():
    """mmdet's protocol: fc_cls gets ``get_cls_channels`` outputs, the loss dict is merged,
    accuracies come from ``get_accuracy`` and scores from ``get_activation``."""
    seesaw = dict(type='SeesawLoss', num_classes=2, p=0.8, q=2.0)
    for type_ in ('BBoxHead', 'Shared2FCBBoxHead'):
        head = _head(type_, loss_cls=seesaw,
                     cls_predictor_cfg=dict(type='NormedLinear', tempearture=20))
        assert head.custom_cls_channels and head.custom_activation and head.custom_accuracy
        assert head.fc_cls.out_features == 4 and type(head.fc_cls).__name__ == 'NormedLinear'
        assert 'loss_cls.cum_samples' in head.state_dict()
    cls_score, bbox_pred = torch.randn(4, 4), torch.randn(4, 8)
    labels = torch.tensor([0, 1, 2, 2])
    losses = head.loss(cls_score, bbox_pred, torch.zeros(4, 5), labels, torch.ones(4),
                       torch.zeros(4, 4), torch.ones(4, 4))
    assert set(losses) == {'loss_cls_objectness', 'loss_cls_classes', 'acc_objectness',
                           'acc_classes', 'loss_bbox'}
    rois = torch.tensor([[0., 0., 0., 10., 10.]] * 4)
    _, scores = head.get_bboxes(rois, cls_score, bbox_pred, (20, 20, 3), 1.0, cfg=None)
    torch.testing.assert_close(scores, head.loss_cls.get_activation(cls_score))
    plain = _head()
    assert not plain.custom_cls_channels and plain.fc_cls.out_features == 3
