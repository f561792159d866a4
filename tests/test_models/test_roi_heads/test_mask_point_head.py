"""PointRend's heads: ``MaskPointHead`` (point MLP, training points drawn from torch's
generator as mmdet's, test points the most uncertain cells) and ``CoarseMaskHead`` (small
masks from fully connected layers), with mmdet 2.x's state-dict keys."""
import pytest
import torch

from ckptzoo.models.roi_heads.mask_heads import CoarseMaskHead, MaskPointHead
from ckptzoo.models.utils.point_sample import (get_uncertain_point_coords_with_randomness,
                                               get_uncertainty)
from ckptzoo.ops import point_sample


def test_mask_point_head_keys_shapes_and_init():
    head = MaskPointHead(num_classes=3, num_fcs=2, in_channels=8, fc_channels=6)
    assert list(head.state_dict()) == ['fcs.0.conv.weight', 'fcs.0.conv.bias',
                                       'fcs.1.conv.weight', 'fcs.1.conv.bias',
                                       'fc_logits.weight', 'fc_logits.bias']
    assert head.fcs[0].conv.weight.shape == (6, 11, 1)
    assert head.fcs[1].conv.weight.shape == (6, 9, 1)  # coarse logits again
    assert head.fc_logits.weight.std() < 0.01 and not head.fc_logits.bias.any()
    out = head(torch.randn(4, 8, 10), torch.randn(4, 3, 10))
    assert out.shape == (4, 3, 10)
    flat = MaskPointHead(num_classes=3, num_fcs=2, in_channels=8, fc_channels=6,
                         coarse_pred_each_layer=False, class_agnostic=True)
    assert flat.fcs[1].conv.weight.shape == (6, 6, 1) and flat.fc_logits.out_channels == 1


def test_training_points_come_from_torchs_generator_in_mmdets_order():
    mask_pred = torch.randn(3, 2, 7, 7)
    labels = torch.tensor([0, 1, 1])
    torch.manual_seed(5)
    pts = get_uncertain_point_coords_with_randomness(mask_pred, labels, 10, 3, 0.75)
    torch.manual_seed(5)
    candidates = torch.rand(3, 30, 2)
    rest = torch.rand(3, 3, 2)
    assert pts.shape == (3, 10, 2)
    torch.testing.assert_close(pts[:, 7:], rest, rtol=0, atol=0)
    unc = get_uncertainty(point_sample(mask_pred, candidates), labels)[:, 0]
    for i in range(3):  # the 7 importance points are the most uncertain candidates
        chosen = {tuple(p) for p in pts[i, :7].tolist()}
        best = unc[i].topk(7).indices
        assert chosen == {tuple(p) for p in candidates[i, best].tolist()}


def test_point_sampling_arguments_are_checked():
    with pytest.raises(ValueError, match='oversample_ratio'):
        get_uncertain_point_coords_with_randomness(torch.zeros(1, 1, 2, 2), None, 4, 0.5, 0.5)
    with pytest.raises(ValueError, match='importance_sample_ratio'):
        get_uncertain_point_coords_with_randomness(torch.zeros(1, 1, 2, 2), None, 4, 2, 1.5)


def test_test_points_are_the_centres_of_the_most_uncertain_cells():
    head = MaskPointHead(num_classes=2, in_channels=4, fc_channels=4)
    mask = torch.full((1, 2, 4, 4), 5.)
    mask[0, 1, 2, 3] = 0.1  # the least certain cell of class 1
    mask[0, 1, 0, 1] = -0.2
    idx, pts = head.get_roi_rel_points_test(mask, torch.tensor([1]),
                                            dict(subdivision_num_points=2))
    assert idx.tolist() == [[11, 1]]
    assert pts.tolist() == [[[0.875, 0.625], [0.375, 0.125]]]
    idx, _ = head.get_roi_rel_points_test(mask, torch.tensor([1]),
                                          dict(subdivision_num_points=100))
    assert idx.shape == (1, 16)  # at most every cell


def test_coarse_mask_head_keys_and_output_size():
    head = CoarseMaskHead(num_fcs=2, in_channels=8, conv_out_channels=8, fc_out_channels=16,
                          num_classes=3, roi_feat_size=14)
    assert list(head.state_dict()) == ['downsample_conv.conv.weight', 'downsample_conv.conv.bias',
                                       'fcs.0.weight', 'fcs.0.bias', 'fcs.1.weight',
                                       'fcs.1.bias', 'fc_logits.weight', 'fc_logits.bias']
    assert head.fcs[0].in_features == 8 * 49
    assert (head.fc_logits.weight == 0.001).all()
    assert head(torch.randn(5, 8, 14, 14)).shape == (5, 3, 7, 7)
    plain = CoarseMaskHead(num_convs=1, downsample_factor=1, in_channels=8,
                           conv_out_channels=8, fc_out_channels=16, num_classes=3,
                           roi_feat_size=7)
    assert plain.downsample_conv is None and 'convs.0.conv.weight' in plain.state_dict()
    assert plain(torch.randn(2, 8, 7, 7)).shape == (2, 3, 7, 7)
    with pytest.raises(ValueError, match='num_fcs'):
        CoarseMaskHead(num_fcs=0, in_channels=8, num_classes=3)
