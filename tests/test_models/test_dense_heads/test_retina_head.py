import math

import numpy as np
import pytest
import torch

from ckptzoo.core.bbox import bbox_mapping_back
from ckptzoo.models.utils import bias_init_with_prob
from ckptzoo.registry import build_head

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _head(**kw):
    cfg = dict(type='RetinaHead', num_classes=2, in_channels=4, stacked_convs=1,
               feat_channels=4,
               # one level, stride 8, one 16x16 anchor per position
               anchor_generator=dict(type='AnchorGenerator', strides=[8], ratios=[1.0],
                                     scales=[2]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                               target_stds=[1.] * 4),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                             loss_weight=1.0),
               loss_bbox=dict(type='L1Loss', loss_weight=1.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def test_keys_and_prior_init():
    head = _head(stacked_convs=2, num_classes=3)
    keys = set(head.state_dict())
    assert {'cls_convs.0.conv.weight', 'cls_convs.1.conv.bias', 'reg_convs.0.conv.weight',
            'retina_cls.weight', 'retina_cls.bias', 'retina_reg.weight'} <= keys
    assert head.retina_cls.out_channels == 3 and head.retina_reg.out_channels == 4
    torch.testing.assert_close(head.retina_cls.bias, torch.full((3, ), math.log(0.01 / 0.99)))
    assert bias_init_with_prob(0.01) == pytest.approx(-4.59511985)
    assert (head.retina_reg.bias == 0).all() and head.retina_reg.weight.std() < 0.02


def test_loss_by_hand():
    """Image 16x16, 2x2 feature map: anchors [-8,-8,8,8], [0,-8,16,8], [-8,0,8,16],
    [0,0,16,16]. The gt [0,0,16,16] is anchor 3 (IoU 1); the others have IoU 1/7, 1/3, 1/3
    (negatives). One positive, so both losses are plain sums."""
    head = _head()
    torch.manual_seed(1)
    cls_score = torch.randn(1, 2, 2, 2)
    bbox_pred = torch.randn(1, 4, 2, 2)
    losses = head.loss([cls_score], [bbox_pred], [torch.tensor([[0., 0., 16., 16.]])],
                       [torch.tensor([1])], [_meta()])
    logits = cls_score.permute(0, 2, 3, 1).reshape(4, 2)
    targets = torch.tensor([[0., 0.], [0., 0.], [0., 0.], [0., 1.]])
    p = logits.sigmoid()
    focal = -(0.25 * targets * (1 - p)**2 * torch.log(p)
              + 0.75 * (1 - targets) * p**2 * torch.log(1 - p))
    torch.testing.assert_close(losses['loss_cls'][0], focal.sum(), rtol=1e-5, atol=0)
    deltas = bbox_pred.permute(0, 2, 3, 1).reshape(4, 4)
    torch.testing.assert_close(losses['loss_bbox'][0], deltas[3].abs().sum(), rtol=1e-5,
                               atol=0)


def test_loss_without_gt_is_background_focal_over_one():
    head = _head()
    cls_score = torch.randn(2, 2, 2, 2, requires_grad=True)
    bbox_pred = torch.randn(2, 4, 2, 2, requires_grad=True)
    losses = head.loss([cls_score], [bbox_pred], [torch.zeros(0, 4)] * 2,
                       [torch.zeros(0, dtype=torch.long)] * 2, [_meta(), _meta()])
    p = cls_score.detach().sigmoid()
    expected = -(0.75 * p**2 * torch.log(1 - p)).sum() / 2  # each image counts 1
    torch.testing.assert_close(losses['loss_cls'][0], expected, rtol=1e-5, atol=0)
    assert losses['loss_bbox'][0].item() == 0
    sum(losses['loss_cls'] + losses['loss_bbox']).backward()
    assert torch.isfinite(cls_score.grad).all() and torch.isfinite(bbox_pred.grad).all()


def test_allowed_border_ignores_outside_anchors():
    head = _head(train_cfg=dict(TRAIN_CFG, allowed_border=0))
    cls_score = torch.zeros(1, 2, 2, 2)
    losses = head.loss([cls_score], [torch.zeros(1, 4, 2, 2)],
                       [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([0])],
                       [_meta(17, 17)])
    # only anchor 3 lies inside the 17x17 image (x2 < 17): one positive, nothing else counts
    pos = 0.25 * 0.25 * math.log(2)
    neg = 0.75 * 0.25 * math.log(2)
    torch.testing.assert_close(losses['loss_cls'][0], torch.tensor(pos + neg))


def test_get_bboxes_clips_rescales_and_nms():
    head = _head()
    cls_score = torch.full((1, 2, 2, 2), -10.)
    cls_score[0, 1, 1, 1] = 5.   # anchor 3, class 1
    cls_score[0, 1, 1, 0] = 4.   # anchor 2, class 1, IoU 1/3 with anchor 3: kept
    cls_score[0, 0, 1, 1] = 3.   # anchor 3, class 0: another class, kept
    bbox_pred = torch.zeros(1, 4, 2, 2)
    (dets, labels), = head.get_bboxes([cls_score], [bbox_pred], img_metas=[_meta(scale=2.0)],
                                      rescale=True)
    assert labels.tolist() == [1, 1, 0]
    s = torch.tensor([5., 4., 3.]).sigmoid()
    # anchor 2 [-8, 0, 8, 16] is clipped to [0, 0, 8, 16], then halved
    torch.testing.assert_close(dets, torch.tensor([[0., 0., 8., 8., s[0]], [0., 0., 4., 8., s[1]],
                                                   [0., 0., 8., 8., s[2]]]))
    # a tighter NMS and max_per_img
    cfg = dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.3), max_per_img=1)
    (dets, labels), = head.get_bboxes([cls_score], [bbox_pred], img_metas=[_meta()], cfg=cfg)
    assert labels.tolist() == [1] and dets.shape == (1, 5)


def test_only_pseudo_sampler():
    head = _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='PseudoSampler')))
    assert head.sampling is False
    with pytest.raises(NotImplementedError, match='PseudoSampler'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=256)))


def test_giou_on_decoded_boxes():
    head = _head(reg_decoded_bbox=True, loss_bbox=dict(type='GIoULoss', loss_weight=2.0))
    bbox_pred = torch.zeros(1, 4, 2, 2)
    losses = head.loss([torch.zeros(1, 2, 2, 2)], [bbox_pred],
                       [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([1])], [_meta()])
    # the positive anchor decodes to the gt exactly
    assert abs(losses['loss_bbox'][0].item()) < 1e-5
    bbox_pred[0, 2, 1, 1] = math.log(2)  # twice as wide: IoU 1/2, hull = union
    losses = head.loss([torch.zeros(1, 2, 2, 2)], [bbox_pred],
                       [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([1])], [_meta()])
    assert losses['loss_bbox'][0].item() == pytest.approx(2.0 * 0.5, abs=1e-5)


def test_bbox_mapping_back_by_hand():
    boxes = torch.tensor([[10., 10., 30., 60.]])
    scale = np.array([2., 4., 2., 4.], dtype=np.float32)
    shape = (80, 100, 3)
    torch.testing.assert_close(bbox_mapping_back(boxes, shape, scale, False),
                               torch.tensor([[5., 2.5, 15., 15.]]))
    # flipped in the 100 x 80 augmented image: x1 = 100 - 30, y1 = 80 - 60, ...
    torch.testing.assert_close(bbox_mapping_back(boxes, shape, scale, True),
                               torch.tensor([[35., 2.5, 45., 15.]]))
    torch.testing.assert_close(bbox_mapping_back(boxes, shape, scale, True, 'vertical'),
                               torch.tensor([[5., 5., 15., 17.5]]))
    torch.testing.assert_close(bbox_mapping_back(boxes, shape, scale, True, 'diagonal'),
                               torch.tensor([[35., 5., 45., 17.5]]))


def test_anchors_beyond_the_padded_image_are_ignored():
    head = _head()
    cls_score = torch.zeros(1, 2, 2, 2)
    # pad 8 x 16: only the first row of the 2x2 map is valid (ceil(8 / 8) = 1)
    meta = dict(_meta(), img_shape=(8, 16, 3), pad_shape=(8, 16, 3))
    losses = head.loss([cls_score], [torch.zeros(1, 4, 2, 2)],
                       [torch.tensor([[0., -8., 16., 8.]])], [torch.tensor([0])], [meta])
    pos = 0.25 * 0.25 * math.log(2)
    neg = 0.75 * 0.25 * math.log(2)
    # anchor 1 is the gt (class 0 positive, class 1 negative), anchor 0 is negative (IoU 1/3)
    torch.testing.assert_close(losses['loss_cls'][0], torch.tensor(pos + 3 * neg))
