import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import bias_init_with_prob
from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import one_thread, randomise_bn
from tests.helpers.level_heads import assert_head_mode_exact

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='GridAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                               min_pos_iou=0))
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05, conf_thr=0.005,
                nms=dict(type='nms', iou_threshold=0.45), max_per_img=100)
# two levels, one anchor per position: 16x16 at stride 16, 8x8 at stride 8
ANCHORS = dict(type='YOLOAnchorGenerator', base_sizes=[[(16, 16)], [(8, 8)]], strides=[16, 8])


def _head(**kw):
    cfg = dict(type='YOLOV3Head', num_classes=2, in_channels=[4, 4], out_channels=[4, 4],
               anchor_generator=ANCHORS, featmap_strides=[16, 8], train_cfg=TRAIN_CFG,
               test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def test_keys_and_init_as_mmdet():
    head = _head()
    keys = head.state_dict()
    assert sorted(k for k in keys if k.startswith(('convs_bridge.0', 'convs_pred'))) == [
        'convs_bridge.0.bn.bias', 'convs_bridge.0.bn.num_batches_tracked',
        'convs_bridge.0.bn.running_mean', 'convs_bridge.0.bn.running_var',
        'convs_bridge.0.bn.weight', 'convs_bridge.0.conv.weight', 'convs_pred.0.bias',
        'convs_pred.0.weight', 'convs_pred.1.bias', 'convs_pred.1.weight']
    assert head.num_attrib == 7 and head.convs_pred[0].out_channels == 7
    bias = head.convs_pred[0].bias.view(1, 7)
    assert bias[0, 4].item() == pytest.approx(bias_init_with_prob(8 / (608 / 16)**2))
    assert torch.allclose(bias[0, 5:], torch.full((2, ), bias_init_with_prob(0.01)))
    assert head.convs_bridge[0].bn.weight.eq(1).all()
    assert head.convs_pred[1].weight.std() < 0.02
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_loss_by_hand():
    """Image 16x16, gt [0, 0, 16, 16] (centre (8, 8)): level 0 (1x1, anchor [0, 0, 16, 16])
    is responsible with IoU 1: positive. Level 1 (2x2, 8x8 anchors at centres 4, 12): the
    responsible cell is (1, 1) (anchor [8, 8, 16, 16], IoU 1/4, not above 0.5): its IoU is the
    gt's best among responsible anchors of the level? No: GridAssigner takes the gt's best over
    *all* levels' responsible anchors (IoU 1 at level 0), so level 1 has no positive and all
    four anchors (IoU 1/4 <= 0.5) are negative."""
    head = _head()
    torch.manual_seed(1)
    maps = [torch.randn(1, 7, 1, 1), torch.randn(1, 7, 2, 2)]
    losses = head.loss(maps, [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([1])],
                       [_meta()])
    p0 = maps[0].view(7)
    # level 0: xy targets 0.5, wh targets 0, conf 1, classes (0, 1); means over 1 anchor
    bce = F.binary_cross_entropy_with_logits
    torch.testing.assert_close(losses['loss_xy'][0], bce(p0[:2], torch.full((2, ), .5)))
    torch.testing.assert_close(losses['loss_wh'][0], (p0[2:4]**2).mean())
    torch.testing.assert_close(losses['loss_conf'][0], bce(p0[4], torch.tensor(1.)))
    torch.testing.assert_close(losses['loss_cls'][0], bce(p0[5:], torch.tensor([0., 1.])))
    # level 1: every anchor a negative: conf loss only, mean over the 4 anchors
    p1 = maps[1].permute(0, 2, 3, 1).reshape(4, 7)
    torch.testing.assert_close(losses['loss_conf'][1], bce(p1[:, 4], torch.zeros(4)))
    for key in ('loss_cls', 'loss_xy', 'loss_wh'):
        assert losses[key][1].item() == 0


def test_one_hot_smoother():
    head = _head(one_hot_smoother=0.2)
    maps = [torch.zeros(1, 7, 1, 1), torch.zeros(1, 7, 2, 2)]
    losses = head.loss(maps, [torch.tensor([[0., 0., 16., 16.]])], [torch.tensor([0])],
                       [_meta()])
    target = torch.tensor([0.9, 0.1])
    expected = F.binary_cross_entropy_with_logits(torch.zeros(2), target)
    torch.testing.assert_close(losses['loss_cls'][0], expected)


def test_get_bboxes_by_hand():
    head = _head()
    maps = [torch.full((1, 7, 1, 1), -10.), torch.full((1, 7, 2, 2), -10.)]
    maps[0][0, :4, 0, 0] = torch.tensor([0., 0., math.log(2), 0.])  # centre (8, 8), 32 x 16
    maps[0][0, 4, 0, 0] = 3.  # objectness
    maps[0][0, 6, 0, 0] = 2.  # class 1
    (dets, labels), = head.get_bboxes(maps, [_meta(scale=2.0)], rescale=True)
    assert labels.tolist() == [1]
    score = torch.tensor(2.).sigmoid() * torch.tensor(3.).sigmoid()
    # the box is not clipped (mmdet's YOLOv3 does not clip), then halved
    torch.testing.assert_close(dets, torch.tensor([[-4., 0., 12., 8., score]]))
    (bboxes, scores, conf), = head.get_bboxes(maps, [_meta()], cfg=dict(TEST_CFG, conf_thr=-1),
                                              with_nms=False)
    assert bboxes.shape == (5, 4) and scores.shape == (5, 3) and conf.shape == (5, )
    # conf_thr drops anchors of low objectness before the NMS
    (dets, _), = head.get_bboxes(maps, [_meta()], cfg=dict(TEST_CFG, conf_thr=0.99))
    assert len(dets) == 0


def test_aug_test_of_one_augmentation_is_simple_test():
    head = _head().eval()
    feats = [torch.randn(1, 4, 1, 1), torch.randn(1, 4, 2, 2)]
    cfg = dict(TEST_CFG, score_thr=0.0, conf_thr=0.0)
    head.test_cfg = cfg
    with torch.no_grad():
        (d1, l1), = head.simple_test(feats, [_meta()], rescale=True)
        (d2, l2), = head.aug_test([feats], [[_meta()]], rescale=True)
    torch.testing.assert_close(d2, d1)
    assert torch.equal(l1, l2)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head().double().train()
    randomise_bn(head)
    feats = [torch.randn(2, 4, 2, 2, dtype=torch.float64),
             torch.randn(2, 4, 4, 4, dtype=torch.float64)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        assert_head_mode_exact(head, feats, monkeypatch, mode)


def test_with_cp_sets_full():
    assert set(_head(with_cp=True).checkpoint_plan().values()) == {'full'}


def test_bad_arguments():
    with pytest.raises(ValueError, match='one entry per level'):
        _head(in_channels=[4, 4, 4])
    with pytest.raises(UnknownKeyError, match='score_thrs'):
        _head(test_cfg=dict(TEST_CFG, score_thrs=0.1))
    with pytest.raises(NotImplementedError, match='gt_bboxes_ignore'):
        _head().loss([torch.zeros(1, 7, 1, 1), torch.zeros(1, 7, 2, 2)],
                     [torch.tensor([[0., 0., 8., 8.]])], [torch.tensor([0])], [_meta()],
                     gt_bboxes_ignore=[torch.tensor([[0., 0., 4., 4.]])])
