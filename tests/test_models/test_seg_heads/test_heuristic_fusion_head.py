"""HeuristicFusionHead: a hand-made image (instances laid by score, an instance mostly under
another one dropped, an empty one skipped, a small stuff segment made void), the three input
forms (probabilities, bool masks, an arg-max label map) agreeing, no detections, bad
arguments."""
import pytest
import torch

from ckptzoo.evaluation.panoptic_utils import INSTANCE_OFFSET
from ckptzoo.models.seg_heads import BasePanopticFusionHead, HeuristicFusionHead
from ckptzoo.registry import build_head

TEST_CFG = dict(mask_thr_binary=0.5, mask_overlap=0.5, stuff_area_limit=21)


def _head(**kw):
    return build_head(dict(dict(type='HeuristicFusionHead', num_things_classes=3,
                                num_stuff_classes=2, test_cfg=TEST_CFG), **kw))


def _inputs():
    """8 x 8: stuff 0 on top, stuff 1 below, the things channel at the bottom-right corner;
    B (label 2, 0.95) and A (label 1, 0.9) overlap by half of A, C (label 0) lies under A and
    B entirely, D (label 0) is empty."""
    seg = torch.zeros(3, 8, 8)
    seg[0, :4] = 1.0
    seg[1, 4:] = 1.0
    seg[2, 6:, 6:] = 2.0
    probs = torch.full((4, 8, 8), 0.2)
    probs[1, :2, :4] = 0.7      # A
    probs[0, :2, 2:6] = 0.9     # B
    probs[2, :2, :4] = 0.6      # C
    bboxes = torch.tensor([[2., 0., 6., 2., 0.95], [0., 0., 4., 2., 0.9],
                           [0., 0., 4., 2., 0.5], [0., 0., 1., 1., 0.3]])
    labels = torch.tensor([2, 1, 0, 0])
    return bboxes, labels, probs, seg


def _expected():
    pan = torch.full((8, 8), 5, dtype=torch.long)   # stuff 3 has 20 pixels < 21: void
    pan[4:] = 4
    pan[6:, 6:] = 5                                  # the semantic "things" channel: void
    pan[:2, 2:6] = 2 + 1 * INSTANCE_OFFSET           # B, first by score
    pan[:2, :2] = 1 + 2 * INSTANCE_OFFSET            # A keeps what B left
    return pan


def test_fusion_by_hand():
    head = _head()
    assert isinstance(head, BasePanopticFusionHead) and head.num_classes == 5
    assert not head.with_loss and head.forward_train() == {}
    bboxes, labels, probs, seg = _inputs()
    pan = head.simple_test(bboxes, labels, probs, seg)
    assert pan.dtype == torch.int64 and pan.shape == (8, 8)
    assert torch.equal(pan, _expected())


def test_bool_masks_and_a_label_map_give_the_same_result():
    head = _head()
    bboxes, labels, probs, seg = _inputs()
    pan = head.simple_test(bboxes, labels, probs >= 0.5, seg.argmax(dim=0))
    assert torch.equal(pan, _expected())


def test_a_lower_overlap_threshold_drops_the_half_covered_instance():
    head = _head(test_cfg=dict(TEST_CFG, mask_overlap=0.4, stuff_area_limit=0))
    bboxes, labels, probs, seg = _inputs()
    pan = head.simple_test(bboxes, labels, probs, seg)
    assert (pan // INSTANCE_OFFSET).max() == 1 and (pan == 2 + INSTANCE_OFFSET).sum() == 8
    assert (pan[:2, :2] == 3).all()   # A dropped: stuff 3 (kept: no area limit)


def test_no_detections_gives_the_stuff_map():
    head = _head(test_cfg=dict(TEST_CFG, stuff_area_limit=0))
    _, _, _, seg = _inputs()
    pan = head.simple_test(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, 8, 8), seg)
    assert torch.equal(pan, seg.argmax(dim=0) + 3)


def test_missing_test_cfg_and_unknown_arguments_are_named():
    bboxes, labels, probs, seg = _inputs()
    with pytest.raises(ValueError, match='stuff_area_limit'):
        _head(test_cfg=dict(mask_thr_binary=0.5, mask_overlap=0.5)).simple_test(
            bboxes, labels, probs, seg)
    with pytest.raises(TypeError, match='bogus'):
        _head(bogus=1)
    with pytest.raises(ValueError, match='num_things_classes'):
        HeuristicFusionHead(num_things_classes=-1)
