import numpy as np
import pytest
import torch

from ckptzoo.core.bbox import AssignResult, MaxIoUAssigner, SamplingResult
from ckptzoo.core.bbox.samplers.pseudo_sampler import \
    SamplingResult as OldPathSamplingResult
from ckptzoo.registry import BBOX_SAMPLERS, TASK_UTILS


def _sampler(**kw):
    cfg = dict(type='RandomSampler', num=8, pos_fraction=0.25, neg_pos_ub=-1,
               add_gt_as_proposals=True)
    cfg.update(kw)
    return BBOX_SAMPLERS.build(cfg)


def _assign(num_pos=5, num_neg=20, num_ignored=3):
    """gt_inds [pos..., neg..., ignored...] with positives of gt 1 and 2 alternately."""
    gt_inds = torch.cat([torch.arange(num_pos) % 2 + 1, torch.zeros(num_neg, dtype=torch.long),
                         torch.full((num_ignored, ), -1)])
    labels = torch.where(gt_inds > 0, gt_inds + 4, torch.full_like(gt_inds, -1))
    n = gt_inds.numel()
    return AssignResult(2, gt_inds, torch.rand(n), labels=labels)


def _boxes(n):
    xy = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 2)
    return torch.cat([xy, xy + 10, torch.rand(n, 1)], dim=1)  # proposals with a score column


GT = torch.tensor([[1., 2., 30., 40.], [5., 5., 20., 20.]])
GT_LABELS = torch.tensor([5, 6])


def test_old_import_path_and_registry():
    assert OldPathSamplingResult is SamplingResult
    assert TASK_UTILS.get('RandomSampler') is type(_sampler())


def test_add_gt_puts_gts_first():
    result = _assign(num_pos=1, num_neg=1, num_ignored=1)
    result.add_gt_(GT_LABELS)
    assert result.gt_inds.tolist() == [1, 2, 1, 0, -1]
    assert result.labels.tolist() == [5, 6, 5, -1, -1]
    assert result.max_overlaps[:2].tolist() == [1., 1.] and result.num_preds == 5


def test_counts_and_gt_first_order():
    """7 positive candidates (2 gts in front of 5), room for int(8 * 0.25) = 2 positives;
    6 negatives of 20. ``unique`` sorts, so the gts (indices 0, 1), when drawn, lead."""
    torch.manual_seed(0)
    proposals = _boxes(28)
    res = _sampler().sample(_assign(), proposals, GT, GT_LABELS)
    assert res.pos_inds.numel() == 2 and res.neg_inds.numel() == 6
    assert res.pos_inds.tolist() == sorted(res.pos_inds.tolist())
    assert ((res.pos_inds < 7).all() and (res.neg_inds >= 7).all() and (res.neg_inds < 27).all())
    boxes = torch.cat([GT, proposals[:, :4]])
    torch.testing.assert_close(res.pos_bboxes, boxes[res.pos_inds], rtol=0, atol=0)
    torch.testing.assert_close(res.neg_bboxes, boxes[res.neg_inds], rtol=0, atol=0)
    assert res.bboxes.shape == (8, 4)
    assert res.pos_is_gt.dtype == torch.uint8
    assert res.pos_is_gt.tolist() == [int(i < 2) for i in res.pos_inds.tolist()]
    gt_ids = [[1, 2][i] if i < 2 else (i - 2) % 2 + 1 for i in res.pos_inds.tolist()]
    assert res.pos_assigned_gt_inds.tolist() == [g - 1 for g in gt_ids]
    assert res.pos_gt_labels.tolist() == [g + 4 for g in gt_ids]
    torch.testing.assert_close(res.pos_gt_bboxes, GT[res.pos_assigned_gt_inds], rtol=0, atol=0)
    assert res.num_gts == 2
    assert set(res.info) == {'pos_inds', 'neg_inds', 'pos_bboxes', 'neg_bboxes', 'pos_is_gt',
                             'num_gts', 'pos_assigned_gt_inds'}


def test_all_gts_kept_when_positives_fit():
    res = _sampler(num=16, pos_fraction=0.5).sample(_assign(num_pos=2), _boxes(25), GT,
                                                    GT_LABELS)
    assert res.pos_inds.tolist() == [0, 1, 2, 3] and res.pos_is_gt.tolist() == [1, 1, 0, 0]
    assert res.neg_inds.numel() == 12


def _mmdet_draw(gallery, num):
    return gallery if gallery.numel() <= num else gallery[torch.randperm(gallery.numel())[:num]]


@pytest.mark.parametrize('seed', [0, 1, 7])
def test_seeded_draws_are_mmdets(seed):
    """mmdet draws the positives, then the negatives, by torch.randperm(n)[:k] from the
    default generator: the same seed keeps the same RoIs."""
    result = _assign(num_pos=9, num_neg=30)
    proposals = _boxes(result.num_preds)
    torch.manual_seed(seed)
    res = _sampler(num=16, pos_fraction=0.25).sample(result, proposals, GT, GT_LABELS)
    torch.manual_seed(seed)
    pos = _mmdet_draw(torch.arange(0, 11), 4).unique()     # 2 gts + 9 positives
    neg = _mmdet_draw(torch.arange(11, 41), 12).unique()   # 30 negatives
    assert res.pos_inds.tolist() == pos.tolist()
    assert res.neg_inds.tolist() == neg.tolist()


def test_draw_of_none_still_consumes_the_generator():
    """neg_pos_ub=0 asks for 0 negatives: mmdet still calls randperm (k=0)."""
    result, proposals = _assign(num_pos=9), _boxes(32)
    torch.manual_seed(3)
    res = _sampler(neg_pos_ub=0).sample(result, proposals, GT, GT_LABELS)
    assert res.neg_inds.numel() == 0
    after = torch.rand(1)
    torch.manual_seed(3)
    torch.randperm(11), torch.randperm(20)
    assert torch.rand(1) == after


def test_neg_pos_ub():
    # no positives at all, no gts added: the bound is neg_pos_ub * max(1, 0) = 3
    res = _sampler(neg_pos_ub=3, add_gt_as_proposals=False).sample(
        _assign(num_pos=0), _boxes(23), GT)
    assert res.pos_inds.numel() == 0 and res.pos_inds.dim() == 1
    assert res.neg_inds.numel() == 3
    res = _sampler(num=64, neg_pos_ub=2.5).sample(_assign(num_pos=1), _boxes(24), GT,
                                                  GT_LABELS)
    assert res.pos_inds.numel() == 3 and res.neg_inds.numel() == 7  # int(2.5 * 3)


def test_without_gts_or_without_adding_them():
    res = _sampler().sample(AssignResult(0, torch.zeros(10, dtype=torch.long), torch.zeros(10),
                                         torch.full((10, ), -1)),
                            _boxes(10), torch.zeros(0, 4), torch.zeros(0, dtype=torch.long))
    assert res.pos_inds.numel() == 0 and res.neg_inds.numel() == 8
    assert res.pos_gt_bboxes.shape == (0, 4) and res.num_gts == 0
    res = _sampler(add_gt_as_proposals=False).sample(_assign(num_pos=1), _boxes(24), GT)
    assert res.pos_inds.tolist() == [0] and res.pos_is_gt.tolist() == [0]


def test_real_assignment_round_trip():
    assigner = MaxIoUAssigner(pos_iou_thr=0.5, neg_iou_thr=0.5, min_pos_iou=0.5,
                              match_low_quality=False)
    proposals = torch.tensor([[1., 2., 30., 40., .9], [60., 60., 70., 70., .8]])
    result = assigner.assign(proposals, GT, None, GT_LABELS)
    res = _sampler(num=4, pos_fraction=0.5).sample(result, proposals, GT, GT_LABELS)
    # candidates [gt 0, gt 1, proposal 0 (IoU 1 with gt 0), proposal 1 (IoU 0)]
    assert res.pos_inds.numel() == 2 and set(res.pos_inds.tolist()) <= {0, 1, 2}
    assert res.pos_assigned_gt_inds.tolist() == [[0, 1, 0][i] for i in res.pos_inds.tolist()]
    assert res.neg_inds.tolist() == [3]


def test_random_choice_of_a_list_gives_an_ndarray():
    out = _sampler().random_choice([4, 5, 6], 2)
    assert isinstance(out, np.ndarray) and len(set(out.tolist())) == 2


@pytest.mark.parametrize('kw, word', [(dict(num=-1), 'num'), (dict(pos_fraction=1.5),
                                                                'pos_fraction'),
                                      (dict(neg_pos_ub='3'), 'neg_pos_ub'),
                                      (dict(add_gt_as_proposals=1), 'add_gt_as_proposals')])
def test_bad_arguments(kw, word):
    with pytest.raises(ValueError, match=word):
        _sampler(**kw)


def test_gt_labels_needed_to_add_gts():
    with pytest.raises(ValueError, match='gt_labels'):
        _sampler().sample(_assign(), _boxes(28), GT)


def test_sampling_at_capacity_is_state_of_the_samplers_a_model_holds():
    """``set_sampling_at_capacity`` finds a model's samplers (an attribute of any module, one
    per stage in a list) and sets their ``at_capacity``, where each yields its largest counts
    without drawing random numbers; the previous flags come back with
    ``restore_sampling_at_capacity``. A sampler the model does not hold is left as it is."""
    from ckptzoo.core.bbox import restore_sampling_at_capacity, set_sampling_at_capacity

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bbox_sampler = _sampler(add_gt_as_proposals=False)
            self.stage_samplers = [_sampler(), _sampler()]

    model = torch.nn.Sequential(Head(), torch.nn.Linear(1, 1))
    head, other = model[0], _sampler()
    head.stage_samplers[1].at_capacity = True
    held = [head.bbox_sampler] + head.stage_samplers
    states = set_sampling_at_capacity(model, True)
    assert [s for s, _ in states] == held and [b for _, b in states] == [False, False, True]
    assert all(s.at_capacity for s in held) and not other.at_capacity
    assign, boxes = _assign(num_pos=1, num_neg=3), _boxes(7)
    before = torch.get_rng_state()
    res = head.bbox_sampler.sample(assign, boxes, GT, GT_LABELS)
    assert res.pos_inds.numel() == 2 and res.neg_inds.numel() == 6  # repeated to capacity
    assert torch.equal(torch.get_rng_state(), before)
    restore_sampling_at_capacity(states)
    assert [s.at_capacity for s in held] == [False, False, True]
    res = head.bbox_sampler.sample(_assign(num_pos=1, num_neg=3), _boxes(7), GT, GT_LABELS)
    assert res.pos_inds.numel() == 1 and res.neg_inds.numel() == 3  # mmdet's
