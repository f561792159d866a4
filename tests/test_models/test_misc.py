"""interpolate_as (mmdet 2.x models/utils/misc.py): 3-D and 4-D sources, ndarray targets,
untouched when the sizes agree, bad inputs named."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ckptzoo.models.utils import interpolate_as


def test_four_and_three_dimensional_sources():
    src = torch.randn(2, 3, 5, 7)
    out = interpolate_as(src, torch.zeros(1, 10, 14))
    torch.testing.assert_close(out, F.interpolate(src, size=(10, 14), mode='bilinear',
                                                  align_corners=False), rtol=0, atol=0)
    out3 = interpolate_as(src[:, 0], np.zeros((10, 14)), mode='nearest')
    torch.testing.assert_close(out3, F.interpolate(src[:, :1], size=(10, 14),
                                                   mode='nearest')[:, 0], rtol=0, atol=0)
    assert interpolate_as(src, torch.zeros(5, 7)) is src


def test_bad_inputs():
    with pytest.raises(ValueError, match='source'):
        interpolate_as(torch.zeros(3, 3), torch.zeros(4, 4))
    with pytest.raises(ValueError, match='target'):
        interpolate_as(torch.zeros(1, 3, 3), torch.zeros(4))
