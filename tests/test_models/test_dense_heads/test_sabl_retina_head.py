"""SABLRetinaHead (mmdet 2.x's): keys and shapes, bucket targets by hand, losses, detections
(and test-time augmentation, which mmdet's lacked), bad arguments, every checkpoint mode
exact."""
import math

import pytest
import torch

from ckptzoo.models.checkpointing import MODES

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.ga_heads import build, inputs, meta, sabl_head_cfg, train_run

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _head(**kw):
    return build(sabl_head_cfg(**kw))


def test_keys_shapes_and_prior_as_mmdet():
    head = _head()
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    expected = {f'{t}_convs.{i}.conv.{p}': (8, 8, 3, 3) if p == 'weight' else (8, )
                for t in ('cls', 'reg') for i in range(2) for p in ('weight', 'bias')}
    # 14 buckets: 7 per side, 4 sides
    expected.update({'retina_cls.weight': (3, 8, 3, 3), 'retina_cls.bias': (3, ),
                     'retina_bbox_reg.weight': (28, 8, 3, 3), 'retina_bbox_reg.bias': (28, ),
                     'retina_bbox_cls.weight': (28, 8, 3, 3), 'retina_bbox_cls.bias': (28, )})
    assert shapes == expected
    torch.testing.assert_close(head.retina_cls.bias, torch.full((3, ), math.log(0.01 / 0.99)))
    assert head.side_num == 7 and head.num_base_priors == 1
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_forward_groups_the_bucket_maps_as_mmdet():
    head = _head()
    feats, _, _, _ = inputs()
    cls_scores, bbox_preds = head(feats)
    assert [tuple(c.shape) for c in cls_scores] == [(2, 3, 4, 4), (2, 3, 2, 2)]
    for (bucket_cls, bucket_reg), size in zip(bbox_preds, (4, 2)):
        assert bucket_cls.shape == bucket_reg.shape == (2, 28, size, size)
    single = head.forward_single(feats[0])
    torch.testing.assert_close(single[0], cls_scores[0])
    torch.testing.assert_close(single[1][1], bbox_preds[0][1])


def test_targets_of_a_square_that_is_a_ground_truth():
    """A gt equal to the square at (1, 1) of level 0 (32 x 32 box centred at (8, 8)): that
    square is positive (with the neighbours whose approxes reach IoU 0.5), its buckets are the
    coder's encoding of the box itself; level 1 is all background."""
    head = _head()
    square = torch.tensor([[-8., -8., 24., 24.]])
    approxs, flags = head.get_sampled_approxs([(4, 4), (2, 2)], [meta()])
    squares = head.get_anchors([(4, 4), (2, 2)], [meta()])
    assert torch.equal(squares[0][0][5:6], square)
    targets = head.get_target(approxs, flags, squares, [square], [meta()],
                              gt_labels_list=[torch.tensor([2])])
    labels, label_weights, cls_t, cls_w, reg_t, reg_w, num_pos, num_neg = targets
    assert labels[0][0][5] == 2 and num_pos == (labels[0][0] == 2).sum() > 1
    assert (labels[1] == 3).all()
    offsets, offset_weights, bucket_labels, bucket_weights = head.bbox_coder.encode(square,
                                                                                   square)
    torch.testing.assert_close(cls_t[0][0][5], bucket_labels[0])
    torch.testing.assert_close(reg_t[0][0][5], offsets[0])
    torch.testing.assert_close(reg_w[0][0][5], offset_weights[0])
    assert (cls_w[0][0][labels[0][0] == 3] == 0).all() and (cls_w[1] == 0).all()


def test_losses_detections_and_aug_test():
    head = _head()
    losses, grads = train_run(head)
    assert set(losses) == {'loss_cls', 'loss_bbox_cls', 'loss_bbox_reg'}
    assert all(math.isfinite(x) for v in losses.values() for x in v)
    assert sum(losses['loss_bbox_reg']) > 0
    assert all(g.abs().sum() > 0 for g in grads.values())
    head.eval()
    feats, metas, _, _ = inputs()
    with torch.no_grad():
        results = head.simple_test(feats, metas, rescale=True)
        raw = head.get_bboxes(*head(feats), img_metas=metas, with_nms=False)
        one = [f[:1] for f in feats]
        (aug, aug_labels), = head.aug_test([one, one], [metas[:1], metas[:1]])
    for (dets, labels), (bboxes, scores, raw_labels) in zip(results, raw):
        assert dets.shape[1] == 5 and 0 < len(dets) <= 20 and (labels < 3).all()
        assert len(bboxes) == len(scores) == len(raw_labels) >= len(dets)
        assert (bboxes[:, 2] <= 31).all()  # clipped to max_shape - 1, as the coder
    assert aug.shape[1] == 5 and len(aug) == len(aug_labels) > 0


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match='octave_base_scale'):
        _head(square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[8],
                                           strides=[8, 16]))
    with pytest.raises(ValueError, match='BucketingBBoxCoder'):
        _head(bbox_coder=dict(type='DeltaXYWHBBoxCoder'))
    with pytest.raises(ValueError, match='stacked_convs'):
        _head(stacked_convs=-1)
    with pytest.raises(ValueError, match='one anchor per position'):
        _head(square_anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], scales=[4, 8],
                                           strides=[8, 16]))


@pytest.mark.parametrize('mode,reentrant', [(m, False) for m in MODES if m] + [('full', True)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    ref = train_run(_head(cp_use_reentrant=reentrant))
    head = _head(cp_use_reentrant=reentrant)
    head.set_checkpoint_plan({'*': mode})
    losses, grads = train_run(head)
    assert losses == ref[0] and grads.keys() == ref[1].keys()
    assert all(torch.equal(grads[k], ref[1][k]) for k in grads)
