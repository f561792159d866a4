"""The Libra and OHEM samplers (ckptzoo/core/bbox/samplers/): counts and choices by hand,
the capacity flag, and OHEM's context protocol through a StandardRoIHead."""
import pytest
import torch

from ckptzoo.core.bbox import AssignResult
from ckptzoo.core.bbox.samplers import set_sampling_at_capacity
from ckptzoo.registry import TASK_UTILS

GT = torch.tensor([[0., 0., 10., 10.], [20., 20., 30., 30.]])
GT_LABELS = torch.tensor([1, 2])


def _assign(gt_inds, overlaps):
    gt_inds = torch.tensor(gt_inds)
    labels = torch.where(gt_inds > 0, gt_inds, torch.full_like(gt_inds, -1))
    return AssignResult(2, gt_inds, torch.tensor(overlaps, dtype=torch.float), labels)


def _boxes(n):
    return torch.arange(n, dtype=torch.float)[:, None] + torch.tensor([0., 0., 5., 5.])


def test_instance_balanced_positives_spread_over_the_ground_truths():
    sampler = TASK_UTILS.build(dict(type='InstanceBalancedPosSampler', num=8,
                                    pos_fraction=0.5, add_gt_as_proposals=False))
    # 9 positives of gt 1, 1 of gt 2: 4 wanted, round(4 / 2) + 1 = 3 per ground truth at most
    gt_inds = [1] * 9 + [2] + [0] * 10
    torch.manual_seed(0)
    res = sampler.sample(_assign(gt_inds, [0.8] * 10 + [0.1] * 10), _boxes(20), GT, GT_LABELS)
    assert 9 in res.pos_inds.tolist() and res.pos_inds.numel() == 4  # the lone one kept
    assert res.neg_inds.numel() == 4


def test_iou_balanced_negatives_come_from_every_bin():
    sampler = TASK_UTILS.build(dict(type='IoUBalancedNegSampler', num=6, pos_fraction=0.,
                                    floor_thr=-1, floor_fraction=0, num_bins=3,
                                    add_gt_as_proposals=False))
    # 30 negatives: IoU 0.0-0.09 (10), 0.1-0.19 (10), 0.2-0.29 (10); max 0.29 -> bins of ~0.097
    overlaps = [i / 100 for i in range(30)]
    torch.manual_seed(0)
    res = sampler.sample(_assign([0] * 30, overlaps), _boxes(30), GT, GT_LABELS)
    bins = sorted(min(int(overlaps[i] / (0.29 / 3)), 2) for i in res.neg_inds.tolist())
    assert bins == [0, 0, 1, 1, 2, 2]
    assert sampler.floor_thr == 0  # as mmdet: -1 becomes 0 at the first draw


def test_combined_sampler_builds_its_parts_with_its_arguments():
    sampler = TASK_UTILS.build(dict(
        type='CombinedSampler', num=8, pos_fraction=0.25, add_gt_as_proposals=False,
        pos_sampler=dict(type='InstanceBalancedPosSampler'),
        neg_sampler=dict(type='IoUBalancedNegSampler', floor_thr=-1, floor_fraction=0,
                         num_bins=3)))
    assert sampler.pos_sampler.num == sampler.neg_sampler.num == 8
    assert type(sampler.neg_sampler).__name__ == 'IoUBalancedNegSampler'
    res = sampler.sample(_assign([1] * 5 + [0] * 20, [0.7] * 5 + [i / 50 for i in range(20)]),
                         _boxes(25), GT, GT_LABELS)
    assert res.pos_inds.numel() == 2 and res.neg_inds.numel() == 6


def test_at_capacity_the_largest_counts_without_random_numbers():
    sampler = TASK_UTILS.build(dict(
        type='CombinedSampler', num=8, pos_fraction=0.5, add_gt_as_proposals=False,
        pos_sampler=dict(type='InstanceBalancedPosSampler'),
        neg_sampler=dict(type='IoUBalancedNegSampler', floor_thr=-1, floor_fraction=0,
                         num_bins=3)))
    head = torch.nn.Module()
    head.bbox_sampler = sampler
    set_sampling_at_capacity(head, True)
    before = torch.get_rng_state()
    # 1 positive (repeated to 4), 40 negatives (4 chosen, none drawn)
    res = sampler.sample(_assign([1] + [0] * 40, [0.9] + [i / 100 for i in range(40)]),
                         _boxes(41), GT, GT_LABELS)
    assert res.pos_inds.tolist() == [0] * 4 and res.neg_inds.numel() == 4
    assert torch.equal(torch.get_rng_state(), before)
    assert not sampler.pos_sampler.at_capacity  # the parts' own flags are restored


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match='floor_thr'):
        TASK_UTILS.build(dict(type='IoUBalancedNegSampler', num=4, pos_fraction=0.5,
                              floor_thr=-0.5))
    with pytest.raises(ValueError, match='num_bins'):
        TASK_UTILS.build(dict(type='IoUBalancedNegSampler', num=4, pos_fraction=0.5,
                              num_bins=0))
    with pytest.raises(ValueError, match='context'):
        TASK_UTILS.build(dict(type='OHEMSampler', num=4, pos_fraction=0.5))
    with pytest.raises(ValueError, match='pos_fraction'):
        TASK_UTILS.build(dict(type='InstanceBalancedPosSampler', num=4, pos_fraction=2))


def test_ohem_keeps_the_hardest_rois_of_the_roi_head():
    """The RoI head passes itself as ``context`` and each image's ``feats``; the negatives
    kept are those with the largest classification loss under the head."""
    from ckptzoo.registry import MODELS

    roi_head = MODELS.build(dict(
        type='StandardRoIHead',
        bbox_roi_extractor=dict(type='SingleRoIExtractor',
                                roi_layer=dict(type='RoIAlign', output_size=7,
                                               sampling_ratio=0),
                                out_channels=4, featmap_strides=[4]),
        bbox_head=dict(type='Shared2FCBBoxHead', in_channels=4, fc_out_channels=8,
                       roi_feat_size=7, num_classes=3),
        train_cfg=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5,
                                     neg_iou_thr=0.5, min_pos_iou=0.5),
                       sampler=dict(type='OHEMSampler', num=4, pos_fraction=0.25,
                                    add_gt_as_proposals=False),
                       pos_weight=-1)))
    sampler = roi_head.bbox_sampler
    assert sampler.context is roi_head and sampler.bbox_head is roi_head.bbox_head
    torch.manual_seed(0)
    feats = [torch.randn(1, 4, 16, 16)]
    proposals = torch.rand(12, 2) * 30
    proposals = torch.cat([proposals, proposals + 20], 1)
    assign = _assign([0] * 12, [0.] * 12)
    res = sampler.sample(assign, proposals, GT, GT_LABELS, feats=feats)
    with torch.no_grad():
        scores = roi_head._bbox_forward(feats, torch.cat(
            [proposals.new_zeros(12, 1), proposals], 1))['cls_score']
    loss = torch.nn.functional.cross_entropy(scores, torch.full((12, ), 3), reduction='none')
    assert sorted(res.neg_inds.tolist()) == sorted(loss.topk(4).indices.tolist())


def _pisa_head(score_thr=0.05, num=8, k=0.5, bias=0.):
    from ckptzoo.registry import MODELS

    return MODELS.build(dict(
        type='PISARoIHead',
        bbox_roi_extractor=dict(type='SingleRoIExtractor',
                                roi_layer=dict(type='RoIAlign', output_size=7,
                                               sampling_ratio=0),
                                out_channels=4, featmap_strides=[4]),
        bbox_head=dict(type='Shared2FCBBoxHead', in_channels=4, fc_out_channels=8,
                       roi_feat_size=7, num_classes=3),
        train_cfg=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5,
                                     neg_iou_thr=0.5, min_pos_iou=0.5),
                       sampler=dict(type='ScoreHLRSampler', num=num, pos_fraction=0.25,
                                    add_gt_as_proposals=False, k=k, bias=bias,
                                    score_thr=score_thr, iou_thr=0.5),
                       pos_weight=-1)))


def _hlr_inputs(n=40):
    torch.manual_seed(0)
    feats = [torch.randn(1, 4, 16, 16)]
    proposals = torch.rand(n, 2) * 30
    return feats, torch.cat([proposals, proposals + 20], 1)


def test_score_hlr_ranks_the_negatives_and_keeps_their_total_loss():
    """Every negative valid (score_thr 0): the kept ones are the top of the HLR ranking,
    their weights fall with the rank (k=1, bias=0: linear) and are renormalised so that the
    weighted loss of the kept negatives equals their plain loss."""
    head = _pisa_head(score_thr=0., k=1.)
    sampler = head.bbox_sampler
    assert sampler.context is head and sampler.bbox_head is head.bbox_head
    feats, proposals = _hlr_inputs()
    before = torch.get_rng_state()
    res, weights = sampler.sample(_assign([0] * 40, [0.] * 40), proposals, GT, GT_LABELS,
                                  feats=feats)
    assert torch.equal(torch.get_rng_state(), before)  # no random draw on this path
    assert res.neg_inds.numel() == weights.numel() == 8 and res.pos_inds.numel() == 0
    assert len(set(res.neg_inds.tolist())) == 8
    with torch.no_grad():
        scores = head._bbox_forward(feats, torch.cat([proposals.new_zeros(40, 1), proposals],
                                                     1))['cls_score']
    loss = torch.nn.functional.cross_entropy(scores, torch.full((40, ), 3), reduction='none')
    kept = loss[res.neg_inds]
    assert torch.allclose((kept * weights).sum(), kept.sum())
    assert (weights[:-1] >= weights[1:]).all()  # in rank order, the first ranked highest
    # the best-scoring negative heads its group, so it ranks first
    assert res.neg_inds[0] == scores.softmax(-1)[:, :-1].max(-1)[0].argmax()


def test_score_hlr_fills_with_random_low_scores_and_at_capacity_draws_nothing():
    head = _pisa_head(score_thr=1.)  # nothing valid: random negatives, weights 1
    feats, proposals = _hlr_inputs()
    torch.manual_seed(1)
    res, weights = head.bbox_sampler.sample(_assign([0] * 40, [0.] * 40), proposals, GT,
                                            GT_LABELS, feats=feats)
    assert res.neg_inds.numel() == 8 and torch.equal(weights, torch.ones(8))
    set_sampling_at_capacity(head, True)
    assert head.bbox_sampler.at_capacity
    before = torch.get_rng_state()
    # 1 positive (repeated to 2), 3 negatives repeated to 6 with their weights
    gt_inds = [1] + [0] * 3 + [-1] * 36
    res, weights = head.bbox_sampler.sample(_assign(gt_inds, [0.9] + [0.] * 39), proposals, GT,
                                            GT_LABELS, feats=feats)
    assert torch.equal(torch.get_rng_state(), before)
    assert res.pos_inds.tolist() == [0, 0] and res.neg_inds.tolist() == [1, 2, 3] * 2
    assert weights.numel() == 6


def test_score_hlr_needs_its_context_and_without_negatives_gives_no_weights():
    with pytest.raises(ValueError, match='context'):
        TASK_UTILS.build(dict(type='ScoreHLRSampler', num=4, pos_fraction=0.5))
    head = _pisa_head()
    feats, proposals = _hlr_inputs(4)
    res, weights = head.bbox_sampler.sample(_assign([1, 1, 2, -1], [0.9] * 4), proposals, GT,
                                            GT_LABELS, feats=feats)
    assert weights is None and res.neg_inds.numel() == 0 and res.pos_inds.numel() == 2


def test_nms_match_groups_each_kept_box_with_the_boxes_it_suppresses():
    from ckptzoo.ops import nms_match

    dets = torch.tensor([[0., 0., 10., 10., 0.5], [1., 0., 11., 10., 0.9],
                         [50., 50., 60., 60., 0.7], [0., 1., 10., 11., 0.6],
                         [51., 50., 61., 60., 0.1]])
    groups = nms_match(dets, 0.5)
    assert [g.tolist() for g in groups] == [[1, 3, 0], [2, 4]]
    assert nms_match(dets[:0], 0.5) == []
    assert [g.tolist() for g in nms_match(dets.numpy(), 0.5)] == [[1, 3, 0], [2, 4]]
