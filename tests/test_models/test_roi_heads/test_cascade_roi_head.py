"""CascadeRoIHead on its own: per-stage configs, bad configs refused at build naming the key,
the proposals each stage hands the next (mmdet's refine: ground truths dropped, negatives
regressed by their predicted class), the shared extractor, and the samplers at capacity."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.core.bbox import restore_sampling_at_capacity, set_sampling_at_capacity
from ckptzoo.core.mask import PolygonMasks
from ckptzoo.registry import MODELS

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import cascade_cfg, img_meta

one_thread = pytest.fixture(autouse=True)(one_thread)


def _head_cfg(**kw):
    cfg = cascade_cfg(**kw)
    return dict(cfg['roi_head'], train_cfg=cfg['train_cfg']['rcnn'],
                test_cfg=cfg['test_cfg']['rcnn'])


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(_head_cfg(**kw))


def _feats(seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 16, 64 // s, 64 // s, generator=g) for s in (4, 8, 16, 32, 64))


GT_BBOXES = [torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
             torch.tensor([[5., 5., 52., 52.]])]
GT_LABELS = [torch.tensor([0, 2]), torch.tensor([1])]
GT_MASKS = [PolygonMasks([[np.array([8., 10., 40., 12., 38., 50.])],
                          [np.array([30., 4., 60., 6., 58., 30.])]], 64, 64),
            PolygonMasks([[np.array([5., 5., 50., 5., 50., 50.])]], 64, 64)]


def _proposals(seed=1, n=40):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(2):
        xy = torch.rand(n, 2, generator=g) * 40
        wh = torch.rand(n, 2, generator=g) * 24 + 4
        out.append(torch.cat([xy, xy + wh, torch.rand(n, 1, generator=g)], 1))
    return out


def _train(head, seed=3):
    torch.manual_seed(seed)
    return head.forward_train(_feats(), [img_meta(), img_meta(56, 60)], _proposals(),
                              copy.deepcopy(GT_BBOXES), GT_LABELS, gt_masks=GT_MASKS)


def test_per_stage_modules_and_one_config_for_all():
    head = _head()
    assert len(head.bbox_head) == len(head.bbox_roi_extractor) == len(head.mask_head) == 3
    assert [type(m).__name__ for m in head.bbox_head] == ['Shared2FCBBoxHead'] * 3
    assert head.bbox_head[0] is not head.bbox_head[1]  # one module per stage
    assert not head.share_roi_extractor and len(head.mask_roi_extractor) == 3
    cfg = _head_cfg()
    cfg['bbox_head'] = cfg['bbox_head'][0]  # a dict: the same config for every stage
    head = MODELS.build(cfg)
    assert [list(h.bbox_coder.stds) for h in head.bbox_head] == [[0.1, 0.1, 0.2, 0.2]] * 3
    shared = _head(share_extractor=True)
    assert shared.share_roi_extractor and shared.mask_roi_extractor is shared.bbox_roi_extractor
    assert list(shared.checkpoint_units()) == [f'{k}.{i}' for i in range(3)
                                               for k in ('bbox', 'mask')]
    assert list(_head(with_mask=False).checkpoint_units()) == ['bbox.0', 'bbox.1', 'bbox.2']


@pytest.mark.parametrize('key, value, error, match', [
    ('bbox_head', 2, ValueError, r"bbox_head needs one entry per stage \(num_stages=3\), got 2"),
    ('bbox_roi_extractor', 2, ValueError, 'bbox_roi_extractor needs one entry per stage'),
    ('mask_head', 4, ValueError, r'mask_head needs one entry per stage \(num_stages=3\), got 4'),
    ('mask_roi_extractor', 2, ValueError, 'mask_roi_extractor needs one entry per stage'),
    ('stage_loss_weights', 2, ValueError, 'stage_loss_weights needs one entry per stage'),
    ('train_cfg', 2, ValueError, r"train_cfg \(the detector's train_cfg.rcnn\) needs one entry "
                                 r'per stage \(num_stages=3\), got 2'),
    ('stage_loss_weights', 'one', TypeError, 'stage_loss_weights must be a list of 3'),
    ('train_cfg', 'dict', TypeError, r"train_cfg \(the detector's train_cfg.rcnn\) must be a "
                                     'list of 3'),
    ('num_stages', 0, ValueError, 'num_stages must be a positive int, got 0'),
    ('shared_head', dict(type='ResLayer'), NotImplementedError, 'shared_head'),
])
def test_bad_configs_fail_at_build_naming_the_key(key, value, error, match):
    cfg = _head_cfg()
    if key in ('num_stages', 'shared_head'):
        cfg[key] = value
    elif value == 'one':
        cfg[key] = 1.0
    elif value == 'dict':
        cfg[key] = cfg[key][0]
    else:
        cfg[key] = (cfg[key] if isinstance(cfg[key], list) else [cfg[key]] * 3)[:1] * value
    with pytest.raises(error, match=match):
        MODELS.build(cfg)


def test_unknown_train_cfg_key_of_a_stage_is_named():
    cfg = _head_cfg()
    cfg['train_cfg'][1]['mask_szie'] = 28
    with pytest.raises(KeyError, match=r"'train_cfg.rcnn\[1\].mask_szie' \(did you mean "
                                       r"'train_cfg.rcnn\[1\].mask_size'"):
        MODELS.build(cfg)


def test_detector_with_too_few_rcnn_train_cfgs_fails_at_build():
    from ckptzoo.registry import build_detector
    cfg = cascade_cfg()
    cfg['train_cfg']['rcnn'] = cfg['train_cfg']['rcnn'][:2]
    with pytest.raises(ValueError, match=r"train_cfg.rcnn\) needs one entry per stage"):
        build_detector(cfg)


def test_each_stage_samples_the_previous_stages_refined_boxes(monkeypatch):
    """Stage i+1 gets what ``refine_bboxes`` makes of stage i's sampled RoIs: the ground
    truths the sampler added are dropped, negatives are regressed by their predicted class,
    positives by their target class (mmdet's semantics), with stage i's own coder."""
    head = _head(class_agnostic=False)
    seen_props, refined = [], []
    for i, sampler in enumerate(head.bbox_sampler):
        real = sampler.sample

        def sample(assign_result, bboxes, *args, real=real, i=i, **kwargs):
            seen_props.append((i, bboxes.clone()))
            return real(assign_result, bboxes, *args, **kwargs)
        monkeypatch.setattr(sampler, 'sample', sample)
    for i, bbox_head in enumerate(head.bbox_head):
        real_refine = bbox_head.refine_bboxes

        def refine(rois, labels, bbox_preds, pos_is_gts, img_metas, real=real_refine, i=i):
            out = real(rois, labels, bbox_preds, pos_is_gts, img_metas)
            refined.append((i, rois, labels, bbox_preds, pos_is_gts, out))
            return out
        monkeypatch.setattr(bbox_head, 'refine_bboxes', refine)
    _train(head)
    assert [i for i, _ in seen_props] == [0, 0, 1, 1, 2, 2]
    assert [r[0] for r in refined] == [0, 1]
    for stage, rois, labels, bbox_preds, pos_is_gts, out in refined:
        for img in range(2):
            inds = (rois[:, 0] == img).nonzero().squeeze(1)
            keep = torch.ones(len(inds), dtype=torch.bool)
            keep[:len(pos_is_gts[img])] = pos_is_gts[img] == 0
            assert pos_is_gts[img].sum() > 0  # the ground truths are among the positives
            deltas = bbox_preds[inds].view(len(inds), -1, 4)[torch.arange(len(inds)),
                                                             labels[inds]]
            expected = head.bbox_head[stage].bbox_coder.decode(
                rois[inds, 1:], deltas, max_shape=img_meta()['img_shape'] if img == 0
                else img_meta(56, 60)['img_shape'])[keep]
            torch.testing.assert_close(out[img], expected)
            torch.testing.assert_close(seen_props[2 * stage + 2 + img][1], expected)
        assert (labels >= 0).all() and (labels < 3).all()  # no background label left


def test_samplers_of_every_stage_sample_at_capacity():
    """Set at capacity on the head (as the planner's probe session does), every stage samples
    its largest counts, not only the first."""
    head = _head(rcnn_num=16)
    counts = []
    for sampler in head.bbox_sampler:
        real = sampler.sample
        sampler.sample = lambda *a, real=real, **k: counts.append(real(*a, **k)) or counts[-1]
    states = set_sampling_at_capacity(head, True)
    assert len(states) == 3  # one sampler per stage, found in the head's list
    try:
        _train(head)
    finally:
        restore_sampling_at_capacity(states)
    assert not any(s.at_capacity for s in head.bbox_sampler)
    assert len(counts) == 6
    assert all(len(r.pos_inds) == 4 and len(r.pos_inds) + len(r.neg_inds) == 16
               for r in counts)


def test_shared_extractor_pools_the_mask_rois_again():
    """mmdet's cascade has no shared-feature shortcut: with the box extractors shared, each
    stage's mask head takes the positives pooled again by that stage's box extractor."""
    head = _head(share_extractor=True)
    for c in head.train_cfg:
        c['mask_size'] = 14  # the 7x7 box features give 14x14 masks
    calls = []
    for i, ext in enumerate(head.bbox_roi_extractor):
        ext.register_forward_hook(lambda m, a, out, i=i: calls.append((i, out.shape[0])))
    losses = _train(head)
    assert [i for i, _ in calls] == [0, 0, 1, 1, 2, 2]
    assert all(torch.isfinite(v).all() for v in losses.values())


def test_no_rois_stops_the_cascade_as_mmdet():
    """Without any sampled RoI (no proposal, no ground truth) the first stage's losses are
    all there is: mmdet leaves the stages loop."""
    head = _head(with_mask=False)
    losses = head.forward_train(_feats(), [img_meta(), img_meta()],
                                [torch.zeros(0, 5), torch.zeros(0, 5)],
                                [torch.zeros(0, 4)] * 2, [torch.zeros(0, dtype=torch.long)] * 2)
    assert sorted(losses) == ['s0.loss_bbox']


def test_forward_train_needs_train_cfg_and_masks():
    head = _head()
    with pytest.raises(ValueError, match='needs gt_masks'):
        head.forward_train(_feats(), [img_meta()] * 2, _proposals(), GT_BBOXES, GT_LABELS)
    cfg = _head_cfg()
    cfg['train_cfg'] = None
    with pytest.raises(ValueError, match='needs train_cfg'):
        MODELS.build(cfg).forward_train(_feats(), [img_meta()] * 2, _proposals(), GT_BBOXES,
                                        GT_LABELS, gt_masks=GT_MASKS)
