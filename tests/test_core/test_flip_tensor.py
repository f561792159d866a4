"""core.utils.flip_tensor (mmdet's)."""
import pytest
import torch

from ckptzoo.core.utils import flip_tensor


def test_flip_directions():
    x = torch.arange(6.).reshape(1, 1, 2, 3)
    assert flip_tensor(x, 'horizontal')[0, 0].tolist() == [[2., 1., 0.], [5., 4., 3.]]
    assert flip_tensor(x, 'vertical')[0, 0].tolist() == [[3., 4., 5.], [0., 1., 2.]]
    assert flip_tensor(x, 'diagonal')[0, 0].tolist() == [[5., 4., 3.], [2., 1., 0.]]
    with pytest.raises(ValueError, match='flip_direction'):
        flip_tensor(x, 'sideways')
    with pytest.raises(ValueError, match='B, C, H, W'):
        flip_tensor(x[0], 'horizontal')
