"""GridHead (ckptzoo/models/roi_heads/mask_heads/grid_head.py): the heatmap targets and the
box voting by hand, the fused / unfused outputs, mmdet's sub-regions and initialisation."""
import numpy as np
import pytest
import torch

from ckptzoo.core.bbox import AssignResult
from ckptzoo.core.bbox.samplers import SamplingResult
from ckptzoo.registry import MODELS

from tests.helpers.grid_rcnn import grid_head_cfg


def _head(**kw):
    torch.manual_seed(0)
    return MODELS.build(grid_head_cfg(**kw))


def _result(pos_bboxes, gt_bboxes):
    n = pos_bboxes.shape[0]
    assign = AssignResult(n, torch.arange(1, n + 1), torch.ones(n), torch.zeros(n).long())
    return SamplingResult(torch.arange(n), torch.zeros(0, dtype=torch.long), pos_bboxes,
                          gt_bboxes, assign, torch.zeros(n, dtype=torch.uint8))


def test_sub_regions_are_mmdets():
    head = _head()
    assert head.whole_map_size == 56
    assert head.sub_regions[0] == (0, 0, 28, 28) and head.sub_regions[4] == (14, 14, 42, 42)
    assert head.sub_regions[8] == (28, 28, 56, 56) and head.sub_regions[2] == (0, 28, 28, 56)


def test_targets_put_a_disc_on_each_ground_truth_point():
    """A proposal equal to its ground truth (28 px): doubled to 56 px, each point of the 3x3
    grid lands at the centre (14, 14) of its own 28x28 sub-region; radius 1 is 5 pixels. A
    box whose doubled width is at most the grid size (3) gets no target."""
    head = _head()
    box = torch.tensor([[0., 0., 28., 28.], [0., 0., 1.5, 20.]])
    targets = head.get_targets([_result(box, box)], dict(pos_radius=1))
    assert targets.shape == (2, 9, 28, 28)
    disc = torch.zeros(28, 28)
    disc[14, 13:16] = 1
    disc[13:16, 14] = 1
    for j in range(9):
        assert torch.equal(targets[0, j], disc)
    assert targets[1].sum() == 0
    wide = head.get_targets([_result(box[:1], box[:1])], dict(pos_radius=2))
    assert wide[0, 0].sum() == 13  # the 13 integer points within radius 2


def test_get_bboxes_votes_the_edges_and_clips_to_the_image():
    """Every heatmap peaks at the centre of its sub-region: the points sit at the box's
    corners, edges and centre (half a cell in), so the voted box is the box shifted by half
    a heatmap cell; a box past the image is clipped (mmdet's clip is a no-op)."""
    head = _head()
    pred = torch.full((2, 9, 28, 28), -20.)
    pred[:, :, 14, 14] = 20.
    dets = torch.tensor([[0., 0., 28., 28., 0.9], [40., 40., 68., 68., 0.5]])
    boxes = head.get_bboxes(dets, pred, [dict(img_shape=(64, 64, 3))])
    torch.testing.assert_close(boxes[0], torch.tensor([0.5, 0.5, 28.5, 28.5, 0.9]))
    torch.testing.assert_close(boxes[1], torch.tensor([40.5, 40.5, 64., 64., 0.5]))


def test_forward_gives_the_unfused_heatmap_only_in_training():
    head = _head()
    x = torch.randn(3, 16, 14, 14)
    out = head(x)
    assert out['fused'].shape == out['unfused'].shape == (3, 9, 28, 28)
    assert not torch.equal(out['fused'], out['unfused'])
    head.eval()
    out = head(x)
    assert out['unfused'] is out['fused']
    loss = head.loss(out, torch.zeros(3, 9, 28, 28))['loss_grid']
    assert loss > 0


def test_init_and_arguments_are_mmdets():
    head = _head()
    assert torch.allclose(head.deconv2.bias, torch.full((9, ), -float(np.log(99.))))
    assert head.deconv1.weight.std() < 0.01
    with pytest.raises(ValueError, match='square'):
        _head(grid_points=8)
    with pytest.raises(ValueError, match='roi_feat_size'):
        _head(roi_feat_size=(14, 14))
    with pytest.raises(ValueError, match='num_groups'):
        _head(point_feat=7)
    with pytest.raises(ValueError, match='14'):
        _head()(torch.randn(1, 16, 7, 7))
