import math

import pytest
import torch

from ckptzoo.core.anchor import AnchorGenerator
from ckptzoo.registry import TASK_UTILS


def test_single_level_grid_by_hand():
    gen = AnchorGenerator(strides=[8], ratios=[1.0], scales=[2])
    assert gen.num_base_priors == [1]
    (anchors, ) = gen.grid_priors([(2, 3)], device='cpu')
    # base anchor 16x16 centred on (0, 0); positions row-major: x varies fastest
    expected = torch.tensor([[-8., -8., 8., 8.], [0., -8., 16., 8.], [8., -8., 24., 8.],
                             [-8., 0., 8., 16.], [0., 0., 16., 16.], [8., 0., 24., 16.]])
    torch.testing.assert_close(anchors, expected, rtol=0, atol=0)


def test_ratio_is_height_over_width():
    gen = AnchorGenerator(strides=[8], ratios=[0.5], scales=[1])
    # h = 8 * sqrt(0.5), w = 8 / sqrt(0.5)
    w, h = 8 / math.sqrt(0.5), 8 * math.sqrt(0.5)
    torch.testing.assert_close(gen.base_anchors[0],
                               torch.tensor([[-w / 2, -h / 2, w / 2, h / 2]]), rtol=1e-6,
                               atol=1e-5)


@pytest.mark.parametrize('scale_major', [True, False])
def test_base_anchor_order(scale_major):
    gen = AnchorGenerator(strides=[4], ratios=[0.25, 1.0], scales=[1, 2], scale_major=scale_major)
    widths = (gen.base_anchors[0][:, 2] - gen.base_anchors[0][:, 0]).tolist()
    # ratio 0.25 -> w = 4 * 2 * scale; ratio 1 -> w = 4 * scale
    expected = [8., 16., 4., 8.] if scale_major else [8., 4., 16., 8.]
    assert widths == pytest.approx(expected)


def test_retinanet_octave_scales_match_mmdet():
    gen = TASK_UTILS.build(dict(type='AnchorGenerator', octave_base_scale=4, scales_per_octave=3,
                                ratios=[0.5, 1.0, 2.0], strides=[8, 16, 32, 64, 128]))
    assert gen.num_base_priors == [9] * 5
    assert gen.scales.tolist() == pytest.approx([4, 4 * 2**(1 / 3), 4 * 2**(2 / 3)])
    # mmdet 2.x tests/test_utils/test_anchor.py: first RetinaNet base anchors of stride 8
    torch.testing.assert_close(gen.base_anchors[0][:2],
                               torch.tensor([[-22.6274, -11.3137, 22.6274, 11.3137],
                                             [-28.5088, -14.2544, 28.5088, 14.2544]]),
                               rtol=0, atol=1e-4)
    anchors = gen.grid_priors([(8, 8), (4, 4), (2, 2), (1, 1), (1, 1)])
    assert [a.shape[0] for a in anchors] == [576, 144, 36, 9, 9]
    # the second position (x = 8) is the first shifted by one stride
    torch.testing.assert_close(anchors[0][9:18], anchors[0][:9] + torch.tensor([8., 0, 8, 0]))


def test_center_offset_and_rect_stride():
    gen = AnchorGenerator(strides=[(8, 4)], ratios=[1.0], scales=[1], center_offset=0.5)
    # base size is min(stride) = 4, centred on (2, 2); shift 8 in x, 4 in y
    (anchors, ) = gen.grid_priors([(2, 2)])
    torch.testing.assert_close(anchors, torch.tensor([[0., 0, 4, 4], [8., 0, 12, 4],
                                                      [0., 4, 4, 8], [8., 4, 12, 8]]))


def test_valid_flags():
    gen = AnchorGenerator(strides=[8], ratios=[0.5, 1.0], scales=[1])
    # pad 20 x 12: ceil(20 / 8) = 3 valid rows, ceil(12 / 8) = 2 valid columns of 3
    (flags, ) = gen.valid_flags([(3, 3)], (20, 12, 3))
    per_position = [True, True, False] * 3
    assert flags.tolist() == [f for f in per_position for _ in range(2)]


def test_bad_arguments():
    with pytest.raises(ValueError, match='octave_base_scale'):
        AnchorGenerator(strides=[8], ratios=[1.0], scales=[1], octave_base_scale=4,
                        scales_per_octave=3)
    with pytest.raises(ValueError, match='center_offset'):
        AnchorGenerator(strides=[8], ratios=[1.0], scales=[1], center_offset=2)
    gen = AnchorGenerator(strides=[8, 16], ratios=[1.0], scales=[1])
    with pytest.raises(ValueError, match='one feature map size per level'):
        gen.grid_priors([(2, 2)])


def test_legacy_anchor_generator_by_hand():
    """mmdet 1.x anchors: centre ``center_offset * (base - 1)``, extent ``(w - 1) / 2``,
    rounded."""
    from ckptzoo.registry import TASK_UTILS
    gen = TASK_UTILS.build(dict(type='LegacyAnchorGenerator', center_offset=0.5, scales=[8],
                                ratios=[1.0], strides=[4]))
    # base 4, scale 8 -> w = 32; centre 1.5; corners 1.5 -+ 15.5
    assert gen.base_anchors[0].tolist() == [[-14., -14., 17., 17.]]
