"""PointRend's ops (``ckptzoo/ops/point_sample.py``): ``point_sample`` reads bilinearly at
``[0, 1]`` points, the RoI-to-image point maps, and ``SimpleRoIAlign`` equal to a one-sample
``RoIAlign`` inside the image. The audit against mmcv 1.7.2's pure-PyTorch ops found them
equal."""
import pytest
import torch

from ckptzoo.ops import (RoIAlign, SimpleRoIAlign, point_sample, rel_roi_point_to_abs_img_point,
                         rel_roi_point_to_rel_img_point)
from ckptzoo.ops.point_sample import generate_grid


def test_point_sample_reads_pixel_centres_and_interpolates():
    img = torch.arange(16.).view(1, 1, 4, 4)
    # the centre of pixel (row 1, col 2) is (2.5 / 4, 1.5 / 4)
    pts = torch.tensor([[[2.5 / 4, 1.5 / 4], [0.5, 0.5]]])
    out = point_sample(img, pts)
    assert out.shape == (1, 1, 2)
    assert out[0, 0, 0] == 6.
    assert out[0, 0, 1] == pytest.approx((5 + 6 + 9 + 10) / 4)


def test_point_sample_keeps_a_grid_shape():
    img = torch.randn(2, 3, 5, 6)
    assert point_sample(img, torch.rand(2, 4, 7, 2)).shape == (2, 3, 4, 7)


def test_rel_roi_points_map_into_the_image_and_feature_map():
    rois = torch.tensor([[0., 10., 20., 30., 60.]])
    rel = torch.tensor([[[0., 0.], [1., 1.], [0.5, 0.25]]])
    absolute = rel_roi_point_to_abs_img_point(rois, rel)
    assert absolute.tolist() == [[[10., 20.], [30., 60.], [20., 30.]]]
    feat = torch.zeros(1, 1, 16, 32)  # stride 4 of a 64 x 128 image
    relative = rel_roi_point_to_rel_img_point(rois, rel, feat, 0.25)
    torch.testing.assert_close(relative, absolute / torch.tensor([128., 64.]))
    torch.testing.assert_close(rel_roi_point_to_rel_img_point(rois[:, 1:], rel, (64, 128)),
                               relative)


def test_generate_grid_gives_bin_centres():
    grid = generate_grid(3, (2, 2), torch.device('cpu'))
    assert grid.shape == (3, 4, 2)
    assert grid[0].tolist() == [[0.25, 0.25], [0.75, 0.25], [0.25, 0.75], [0.75, 0.75]]


def test_simple_roi_align_is_a_one_sample_roi_align_inside_the_image():
    torch.manual_seed(0)
    feats = torch.randn(2, 4, 16, 16)
    rois = torch.tensor([[0., 8., 8., 40., 30.], [0., 20., 4., 50., 50.],
                         [1., 6., 10., 60., 44.]])
    ours = SimpleRoIAlign(output_size=7, spatial_scale=0.25)(feats, rois)
    ref = RoIAlign(7, spatial_scale=0.25, sampling_ratio=1, aligned=True)(feats, rois)
    assert ours.shape == (3, 4, 7, 7)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_simple_roi_align_sends_gradients_to_the_features():
    feats = torch.randn(1, 2, 8, 8, requires_grad=True)
    out = SimpleRoIAlign((3, 4), 0.5, aligned=False)(feats, torch.tensor([[0., 1., 1., 9., 12.]]))
    out.sum().backward()
    assert out.shape == (1, 2, 3, 4) and feats.grad.abs().sum() > 0
