import math

import pytest
import torch

from ckptzoo.core.anchor import SSDAnchorGenerator
from ckptzoo.core.anchor.ssd_anchor_generator import ssd_anchor_sizes
from ckptzoo.registry import TASK_UTILS

SSD300 = dict(type='SSDAnchorGenerator', scale_major=False, input_size=300,
              basesize_ratio_range=(0.15, 0.9), strides=[8, 16, 32, 64, 100, 300],
              ratios=[[2], [2, 3], [2, 3], [2, 3], [2], [2]])


def test_ssd300_coco_sizes_and_counts():
    gen = TASK_UTILS.build(SSD300)
    # mmdet's arithmetic: ratios 15..90 in steps of int(75 / 4) = 18, level 0 hard-coded 7%..15%
    assert gen.base_sizes == [21, 45, 99, 153, 207, 261]
    assert gen.max_sizes == [45, 99, 153, 207, 261, 315]
    assert gen.num_base_priors == [4, 6, 6, 6, 4, 4]
    assert gen.num_levels == 6


@pytest.mark.parametrize('size, lo, expected', [
    (300, 0.2, [30, 60, 111, 162, 213, 264]), (512, 0.1, [20, 51, 133, 215, 296, 378, 460]),
    (512, 0.15, [35, 76, 153, 230, 307, 384, 460])])
def test_voc_and_512_sizes(size, lo, expected):
    levels = len(expected)
    mins, _ = ssd_anchor_sizes(size, (lo, 0.9), levels)
    assert mins == expected


def test_base_anchors_by_hand():
    """Level 0 of SSD300: centre (4, 4), min 21, max 45: the square 21, the square
    sqrt(21 * 45), then 1/2 and 2 at 21 (w = 21 * sqrt(2), h = 21 / sqrt(2) first)."""
    gen = TASK_UTILS.build(SSD300)
    a = gen.base_anchors[0]
    big = 21 * math.sqrt(45 / 21)
    w2, h2 = 21 * math.sqrt(2), 21 / math.sqrt(2)
    expected = torch.tensor([[4 - 10.5, 4 - 10.5, 4 + 10.5, 4 + 10.5],
                             [4 - big / 2, 4 - big / 2, 4 + big / 2, 4 + big / 2],
                             [4 - w2 / 2, 4 - h2 / 2, 4 + w2 / 2, 4 + h2 / 2],
                             [4 - h2 / 2, 4 - w2 / 2, 4 + h2 / 2, 4 + w2 / 2]])
    torch.testing.assert_close(a, expected)
    priors = gen.grid_priors([(38, 38), (19, 19), (10, 10), (5, 5), (3, 3), (1, 1)])
    assert [len(p) for p in priors] == [38 * 38 * 4, 19 * 19 * 6, 600, 150, 36, 4]
    # the second position of level 0 is shifted by one stride in x
    torch.testing.assert_close(priors[0][4:8], expected + torch.tensor([8., 0, 8, 0]))


def test_manual_min_max_sizes():
    gen = SSDAnchorGenerator(strides=[16, 32], ratios=[[2, 3], [2, 3]], min_sizes=[48, 100],
                             max_sizes=[100, 150], scale_major=False)
    assert gen.num_base_priors == [6, 6] and gen.base_sizes == [48, 100]
    torch.testing.assert_close(gen.base_anchors[0][0], torch.tensor([-16., -16., 32., 32.]))


def test_legacy_ssd_anchors_are_rounded_v1_boxes():
    cfg = dict(SSD300, type='LegacySSDAnchorGenerator')
    cfg.pop('scale_major')
    gen = TASK_UTILS.build(dict(cfg, scale_major=False))
    a = gen.base_anchors[0]
    # centre 3.5, square 21: 3.5 -+ 10 -> [-6.5, 13.5] rounded half to even
    torch.testing.assert_close(a[0], torch.tensor([-6., -6., 14., 14.]))
    assert torch.equal(a, a.round())


def test_bad_arguments():
    with pytest.raises(ValueError, match='min_sizes and max_sizes'):
        SSDAnchorGenerator(strides=[8, 16], ratios=[[2], [2]], min_sizes=[1, 2])
    with pytest.raises(ValueError, match='input_size 300 or 512'):
        SSDAnchorGenerator(strides=[8] * 6, ratios=[[2]] * 6, input_size=320)
    with pytest.raises(ValueError, match=r'basesize_ratio_range\[0\] must be one of'):
        SSDAnchorGenerator(strides=[8] * 6, ratios=[[2]] * 6, basesize_ratio_range=(0.3, 0.9))
    with pytest.raises(ValueError, match='one entry per level'):
        SSDAnchorGenerator(strides=[8] * 6, ratios=[[2]] * 5)
