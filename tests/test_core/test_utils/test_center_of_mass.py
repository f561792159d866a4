"""center_of_mass and generate_coordinate (mmdet 2.28.2's core/utils/misc.py)."""
import pytest
import torch

from ckptzoo.core.utils import center_of_mass, generate_coordinate


def test_center_of_mass():
    mask = torch.zeros(5, 7, dtype=torch.bool)
    mask[1:4, 2:6] = True
    h, w = center_of_mass(mask)
    assert h.item() == pytest.approx(2.0) and w.item() == pytest.approx(3.5)
    h, w = center_of_mass(torch.zeros(3, 3))
    assert h.item() == 0 and w.item() == 0
    with pytest.raises(ValueError, match='one'):
        center_of_mass(torch.zeros(1, 3, 3))


def test_generate_coordinate():
    coord = generate_coordinate((2, 8, 3, 5), device='cpu')
    assert coord.shape == (2, 2, 3, 5) and coord.dtype == torch.float32
    torch.testing.assert_close(coord[0, 0, 0], torch.linspace(-1, 1, 5))
    torch.testing.assert_close(coord[1, 1, :, 0], torch.linspace(-1, 1, 3))
    assert generate_coordinate((1, 1, 2, 2), 'cpu', torch.float64).dtype == torch.float64
