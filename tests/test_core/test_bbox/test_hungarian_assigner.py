"""HungarianAssigner: the optimal one-to-one matching (checked by brute force), empty cases,
and more ground truths than queries: min(num_query, num_gts) pairs and a warning naming the
image and the counts."""
import itertools

import pytest
import torch

from ckptzoo.core.bbox.assigners import HungarianAssigner
from ckptzoo.core.bbox.transforms import bbox_cxcywh_to_xyxy
from ckptzoo.registry import TASK_UTILS

META = dict(img_shape=(40, 50, 3), ori_filename='crowd.jpg')
CFG = dict(type='HungarianAssigner', cls_cost=dict(type='FocalLossCost', weight=2.0),
           reg_cost=dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
           iou_cost=dict(type='IoUCost', iou_mode='giou', weight=2.0))


def _inputs(num_query, num_gts, seed=0):
    g = torch.Generator().manual_seed(seed)
    boxes = torch.rand(num_query, 4, generator=g, dtype=torch.float64) * 0.4 + 0.2
    cls = torch.randn(num_query, 3, generator=g, dtype=torch.float64)
    gt = bbox_cxcywh_to_xyxy(torch.rand(num_gts, 4, generator=g, dtype=torch.float64) * 0.4 +
                             0.2) * torch.tensor([50., 40., 50., 40.], dtype=torch.float64)
    labels = torch.randint(0, 3, (num_gts, ), generator=g)
    return boxes, cls, gt, labels


def _cost(assigner, boxes, cls, gt, labels):
    factor = gt.new_tensor([50, 40, 50, 40])
    return (assigner.cls_cost(cls, labels) + assigner.reg_cost(boxes, gt / factor) +
            assigner.iou_cost(bbox_cxcywh_to_xyxy(boxes) * factor, gt))


@pytest.mark.parametrize('num_query, num_gts', [(5, 3), (4, 4), (3, 5)])
def test_matching_is_optimal(num_query, num_gts, recwarn):
    assigner = TASK_UTILS.build(CFG)
    boxes, cls, gt, labels = _inputs(num_query, num_gts)
    result = assigner.assign(boxes, cls, gt, labels, META)
    cost = _cost(assigner, boxes, cls, gt, labels)
    matched = (result.gt_inds > 0).nonzero().flatten()
    assert len(matched) == min(num_query, num_gts)
    assert len(set(result.gt_inds[matched].tolist())) == len(matched)  # one to one
    total = sum(cost[q, result.gt_inds[q] - 1] for q in matched)
    k = min(num_query, num_gts)
    best = min(sum(cost[q, j] for q, j in zip(qs, js))
               for qs in itertools.permutations(range(num_query), k)
               for js in itertools.combinations(range(num_gts), k))
    torch.testing.assert_close(total, best)
    assert torch.equal(result.labels[matched], labels[result.gt_inds[matched] - 1])
    assert (result.labels[result.gt_inds == 0] == -1).all()


def test_more_gts_than_queries_warns_naming_image_and_counts():
    boxes, cls, gt, labels = _inputs(3, 5)
    with pytest.warns(UserWarning, match=r'image crowd.jpg has 5 ground truths but only 3 '
                                         r'queries: 2 ground truths get no query'):
        result = HungarianAssigner().assign(boxes, cls, gt, labels, META)
    assert (result.gt_inds > 0).sum() == 3 and result.num_gts == 5


def test_empty_cases_and_ignore():
    boxes, cls, gt, labels = _inputs(4, 2)
    none = HungarianAssigner().assign(boxes, cls, gt[:0], labels[:0], META)
    assert (none.gt_inds == 0).all() and (none.labels == -1).all()
    no_query = HungarianAssigner().assign(boxes[:0], cls[:0], gt, labels, META)
    assert no_query.gt_inds.shape == (0, )
    with pytest.raises(NotImplementedError, match='gt_bboxes_ignore'):
        HungarianAssigner().assign(boxes, cls, gt, labels, META, gt_bboxes_ignore=gt)
