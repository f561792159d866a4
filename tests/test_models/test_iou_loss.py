"""The IoU-family losses (ckptzoo/models/losses/iou_loss.py) on boxes whose IoU, GIoU, DIoU
and CIoU are known by hand."""
import math

import pytest
import torch

from ckptzoo.models.losses.iou_loss import aligned_overlaps
from ckptzoo.registry import build_loss

# pred [0, 0, 2, 2] vs target [1, 0, 3, 2]: overlap 2, union 6 -> IoU 1/3; enclosing 3 x 2 = 6
PRED = torch.tensor([[0., 0., 2., 2.], [0., 0., 4., 4.]])
TARGET = torch.tensor([[1., 0., 3., 2.], [0., 0., 4., 4.]])


def _loss(type_, **kw):
    return build_loss(dict(type=type_, reduction='none', **kw))


def test_iou_loss_modes_by_hand():
    iou = torch.tensor([1 / 3, 1.])
    torch.testing.assert_close(_loss('IoULoss')(PRED, TARGET), -iou.log())
    torch.testing.assert_close(_loss('IoULoss', mode='linear')(PRED, TARGET), 1 - iou)
    torch.testing.assert_close(_loss('IoULoss', mode='square')(PRED, TARGET), 1 - iou ** 2)
    with pytest.warns(DeprecationWarning, match='linear'):
        legacy = _loss('IoULoss', linear=True)
    assert legacy.mode == 'linear'
    # disjoint boxes: IoU 0 clamped to eps
    far = torch.tensor([[10., 10., 12., 12.]])
    torch.testing.assert_close(_loss('IoULoss', eps=1e-3)(far, PRED[:1]),
                               torch.tensor([-math.log(1e-3)]))


def test_giou_diou_ciou_by_hand():
    # GIoU = 1/3 - (6 - 6) / 6; DIoU: centres 1 apart, diagonal^2 = 9 + 4
    torch.testing.assert_close(_loss('GIoULoss')(PRED, TARGET), torch.tensor([2 / 3, 0.]))
    d = torch.tensor([1 - (1 / 3 - 1 / 13), 0.])
    torch.testing.assert_close(_loss('DIoULoss')(PRED, TARGET), d, rtol=1e-5, atol=1e-6)
    # equal aspect ratios: v = 0, so CIoU = DIoU
    torch.testing.assert_close(_loss('CIoULoss')(PRED, TARGET), d, rtol=1e-5, atol=1e-6)
    wide = torch.tensor([[0., 0., 4., 1.]])
    sq = torch.tensor([[0., 0., 2., 2.]])  # IoU 2/6 <= 0.5: alpha = 0, CIoU = DIoU
    torch.testing.assert_close(_loss('CIoULoss')(wide, sq), _loss('DIoULoss')(wide, sq))
    # GIoU of disjoint boxes: 0 - (enclosing - union) / enclosing
    far = torch.tensor([[4., 0., 6., 2.]])
    torch.testing.assert_close(_loss('GIoULoss')(far, PRED[:1]),
                               torch.tensor([1 + (12 - 8) / 12]))
    torch.testing.assert_close(aligned_overlaps(PRED, TARGET, 'giou'), torch.tensor([1 / 3, 1.]))


def test_bounded_iou_loss_by_hand():
    # equal boxes: every term 0; a width twice the target's: dw term 1 - 1/2 beyond beta
    loss = _loss('BoundedIoULoss', beta=0.2, eps=0.)
    torch.testing.assert_close(loss(TARGET[1:], TARGET[1:]), torch.zeros(1, 4))
    pred = torch.tensor([[-2., 0., 6., 4.]])  # same centre, width 8 vs 4
    torch.testing.assert_close(loss(pred, TARGET[1:]), torch.tensor([[0., 0., 0.4, 0.]]))


def test_weights_and_reductions():
    weight = torch.tensor([2., 0.])
    loss = build_loss(dict(type='GIoULoss', loss_weight=3.))
    torch.testing.assert_close(loss(PRED, TARGET, weight, avg_factor=4.),
                               torch.tensor(3 * 2 * (2 / 3) / 4))
    per_coord = torch.tensor([[1., 1., 2., 0.], [0., 0., 0., 0.]])  # averaged to [1, 0]
    torch.testing.assert_close(loss(PRED, TARGET, per_coord), torch.tensor(3 * (2 / 3) / 2))
    zero = loss(PRED.clone().requires_grad_(), TARGET, torch.zeros(2))
    assert zero.item() == 0 and zero.requires_grad
    # mmdet: IoULoss keeps the per-box losses for reduction 'none' even with zero weights
    assert _loss('IoULoss')(PRED, TARGET, torch.zeros(2)).shape == (2, )
    assert _loss('GIoULoss')(PRED, TARGET, torch.zeros(2)).shape == ()


@pytest.mark.parametrize('cfg, match', [
    (dict(type='IoULoss', mode='cubic'), 'mode'),
    (dict(type='GIoULoss', reduction='avg'), 'reduction'),
    (dict(type='DIoULoss', eps=-1), 'eps'),
    (dict(type='BoundedIoULoss', beta=0), 'beta'),
])
def test_bad_arguments_are_refused(cfg, match):
    with pytest.raises(ValueError, match=match):
        build_loss(cfg)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match='pred and target'):
        build_loss(dict(type='CIoULoss'))(PRED, TARGET[:1])
