"""MaskHungarianAssigner and MaskPseudoSampler (mmdet 2.x's): the cheapest one-to-one matching
of queries to masks, unmatched queries negative; the pseudo sampler keeps them all."""
import pytest
import torch

from ckptzoo.core.bbox.assigners import MaskHungarianAssigner
from ckptzoo.core.bbox.samplers import MaskPseudoSampler, MaskSamplingResult
from ckptzoo.registry import TASK_UTILS


def _assigner():
    return TASK_UTILS.build(dict(
        type='MaskHungarianAssigner', cls_cost=dict(type='ClassificationCost', weight=2.0),
        mask_cost=dict(type='CrossEntropyLossCost', weight=5.0, use_sigmoid=True),
        dice_cost=dict(type='DiceCost', weight=5.0, pred_act=True, eps=1.0)))


def test_matches_the_obvious_queries():
    gt_masks = torch.zeros(2, 8, 8)
    gt_masks[0, :4] = 1
    gt_masks[1, 4:] = 1
    mask_pred = torch.full((4, 8, 8), -10.)
    mask_pred[3] = gt_masks[0] * 20 - 10  # query 3 is gt 0
    mask_pred[1] = gt_masks[1] * 20 - 10  # query 1 is gt 1
    cls_pred = torch.zeros(4, 4)
    result = _assigner().assign(cls_pred, mask_pred.flatten(1), torch.tensor([2, 0]),
                                gt_masks.flatten(1), img_meta={})
    assert result.gt_inds.tolist() == [0, 2, 0, 1]
    assert result.labels.tolist() == [-1, 0, -1, 2]
    assert result.num_gts == 2 and result.max_overlaps is None


def test_no_gt_and_zero_weights():
    assigner = MaskHungarianAssigner()
    result = assigner.assign(torch.zeros(3, 4), torch.zeros(3, 16), torch.zeros(0).long(),
                             torch.zeros(0, 16), img_meta={})
    assert result.gt_inds.tolist() == [0, 0, 0] and result.labels.tolist() == [-1, -1, -1]
    only_dice = MaskHungarianAssigner(cls_cost=dict(type='ClassificationCost', weight=0.),
                                      mask_cost=dict(type='FocalLossCost', weight=0.))
    result = only_dice.assign(None, torch.randn(3, 16), torch.tensor([1]),
                              (torch.rand(1, 16) > .5).float(), img_meta={})
    assert (result.gt_inds > 0).sum() == 1
    with pytest.raises(NotImplementedError, match='gt_bboxes_ignore'):
        assigner.assign(torch.zeros(3, 4), torch.zeros(3, 16), torch.tensor([1]),
                        torch.zeros(1, 16), img_meta={}, gt_bboxes_ignore=torch.zeros(1, 4))


def test_pseudo_sampler_keeps_every_query():
    masks = torch.randn(4, 8, 8)
    gt_masks = torch.rand(2, 8, 8) > .5
    result = _assigner().assign(torch.zeros(4, 3), masks.flatten(1), torch.tensor([0, 1]),
                                gt_masks.flatten(1).float(), img_meta={})
    sampling = TASK_UTILS.build(dict(type='MaskPseudoSampler')).sample(result, masks, gt_masks)
    assert isinstance(sampling, MaskSamplingResult)
    assert sorted(sampling.pos_inds.tolist() + sampling.neg_inds.tolist()) == [0, 1, 2, 3]
    assert sampling.pos_masks.shape == (2, 8, 8) and sampling.masks.shape == (4, 8, 8)
    assert torch.equal(sampling.pos_gt_masks, gt_masks[sampling.pos_assigned_gt_inds])
    assert sampling.pos_gt_labels.tolist() == result.labels[sampling.pos_inds].tolist()
    empty = MaskPseudoSampler().sample(
        MaskHungarianAssigner().assign(torch.zeros(4, 3), masks.flatten(1),
                                       torch.zeros(0).long(), torch.zeros(0, 64), img_meta={}),
        masks, torch.zeros(0, 8, 8))
    assert empty.pos_inds.numel() == 0 and empty.pos_gt_masks.shape == (0, 8, 8)
