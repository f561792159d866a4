"""mmdet's match costs: values against direct formulas, mmdet's argument checks as errors."""
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.core.bbox.match_costs import pairwise_overlaps
from ckptzoo.core.bbox.transforms import bbox_cxcywh_to_xyxy, bbox_xyxy_to_cxcywh
from ckptzoo.registry import MATCH_COST, TASK_UTILS

g = torch.Generator().manual_seed(0)
CLS = torch.randn(6, 4, generator=g, dtype=torch.float64)
PRED = torch.rand(6, 4, generator=g, dtype=torch.float64) * 0.4 + 0.2  # cx cy w h
GT = torch.tensor([[0.1, 0.2, 0.5, 0.6], [0.3, 0.1, 0.9, 0.4]], dtype=torch.float64)
LABELS = torch.tensor([2, 0])
MASK_P = torch.randn(6, 3, 5, generator=g, dtype=torch.float64)
MASK_G = torch.rand(2, 3, 5, generator=g) > 0.5


def build(**cfg):
    return MATCH_COST.build(cfg)


def test_box_transforms_round_trip():
    torch.testing.assert_close(bbox_xyxy_to_cxcywh(bbox_cxcywh_to_xyxy(PRED)), PRED)
    torch.testing.assert_close(bbox_cxcywh_to_xyxy(torch.tensor([[2., 3., 2., 4.]])),
                               torch.tensor([[1., 1., 3., 5.]]))


def test_bbox_l1_cost_formats():
    xyxy = bbox_cxcywh_to_xyxy(PRED)
    want = (xyxy[:, None] - GT[None]).abs().sum(-1) * 5
    torch.testing.assert_close(build(type='BBoxL1Cost', weight=5.0)(PRED, GT), want)
    want = (PRED[:, None] - bbox_xyxy_to_cxcywh(GT)[None]).abs().sum(-1)
    torch.testing.assert_close(build(type='BBoxL1Cost', box_format='xywh')(PRED, GT), want)
    with pytest.raises(ValueError, match="box_format must be 'xyxy' or 'xywh'"):
        build(type='BBoxL1Cost', box_format='cxcywh')


def test_classification_and_focal_costs():
    torch.testing.assert_close(build(type='ClassificationCost', weight=2.)(CLS, LABELS),
                               -CLS.softmax(-1)[:, LABELS] * 2)
    p = CLS.sigmoid()[:, LABELS]
    pos = -(p + 1e-12).log() * 0.25 * (1 - p)**2
    neg = -(1 - p + 1e-12).log() * 0.75 * p**2
    torch.testing.assert_close(build(type='FocalLossCost', weight=2.0)(CLS, LABELS),
                               (pos - neg) * 2)
    cost = build(type='FocalLossCost', binary_input=True)(MASK_P, MASK_G)
    assert cost.shape == (6, 2) and cost.dtype == torch.float64


def test_iou_cost_and_pairwise_overlaps():
    a = torch.tensor([[0., 0., 2., 2.], [1., 1., 3., 3.]])
    b = torch.tensor([[0., 0., 2., 2.], [2., 2., 4., 4.]])
    torch.testing.assert_close(pairwise_overlaps(a, b), torch.tensor([[1., 0.], [1 / 7, 1 / 7]]))
    # giou of disjoint boxes (0,0,2,2) and (2,2,4,4): 0 - (16 - 8) / 16
    assert pairwise_overlaps(a, b, 'giou')[0, 1] == -0.5
    torch.testing.assert_close(pairwise_overlaps(a, b, 'iof')[1, 0], torch.tensor(0.25))
    torch.testing.assert_close(build(type='IoUCost', weight=2.0)(a, b),
                               -2 * pairwise_overlaps(a, b, 'giou'))
    assert pairwise_overlaps(a[:0], b).shape == (0, 2)
    with pytest.raises(ValueError, match="iou_mode must be 'iou', 'iof' or 'giou'"):
        build(type='IoUCost', iou_mode='diou')


def test_mask_costs():
    p = MASK_P.sigmoid().flatten(1)
    gt = MASK_G.flatten(1).double()
    dice = 1 - (2 * p @ gt.t() + 1e-3) / (p.sum(1)[:, None] + gt.sum(1)[None] + 1e-3)
    torch.testing.assert_close(build(type='DiceCost', pred_act=True)(MASK_P, MASK_G), dice)
    bce = torch.stack([torch.stack([F.binary_cross_entropy_with_logits(
        MASK_P[i].flatten().float(), gt[j].float()) for j in range(2)]) for i in range(6)])
    torch.testing.assert_close(build(type='CrossEntropyLossCost')(MASK_P, MASK_G), bce)
    with pytest.raises(NotImplementedError, match='use_sigmoid=False'):
        build(type='CrossEntropyLossCost', use_sigmoid=False)
    assert TASK_UTILS is MATCH_COST
