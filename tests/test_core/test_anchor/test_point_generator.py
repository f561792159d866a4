import pytest
import torch

from ckptzoo.core.anchor import MlvlPointGenerator, PointGenerator
from ckptzoo.registry import TASK_UTILS


def test_cell_centres_row_major_with_strides():
    gen = TASK_UTILS.build(dict(type='MlvlPointGenerator', strides=[8, (16, 12)]))
    assert gen.num_levels == 2 and gen.num_base_priors == [1, 1]
    p0, p1 = gen.grid_priors([(2, 3), (1, 2)], with_stride=True)
    assert p0.tolist() == [[4, 4, 8, 8], [12, 4, 8, 8], [20, 4, 8, 8],
                           [4, 12, 8, 8], [12, 12, 8, 8], [20, 12, 8, 8]]
    # (w, h) strides: x steps by 16, y by 12
    assert p1.tolist() == [[8, 6, 16, 12], [24, 6, 16, 12]]
    q0, _ = gen.grid_priors([(2, 3), (1, 2)])
    assert torch.equal(q0, p0[:, :2])


def test_offset_zero_and_dtype():
    gen = MlvlPointGenerator([4], offset=0.)
    pts, = gen.grid_priors([(1, 2)], dtype=torch.float64)
    assert pts.dtype == torch.float64 and pts.tolist() == [[0, 0], [4, 0]]


def test_valid_flags_cover_the_padded_image_only():
    gen = MlvlPointGenerator([8])
    # a 10 x 17 padded image covers ceil(10/8)=2 rows and ceil(17/8)=3 columns of a 3 x 4 map
    flags, = gen.valid_flags([(3, 4)], (10, 17))
    assert flags.view(3, 4).tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]


def test_sparse_priors_equal_the_grid():
    gen = MlvlPointGenerator([8, 16])
    grid = gen.grid_priors([(4, 5), (2, 3)])
    idx = torch.tensor([0, 4, 5])
    assert torch.equal(gen.sparse_priors(idx, (2, 3), 1), grid[1][idx])


def test_levels_must_match_strides():
    with pytest.raises(ValueError, match='2 strides'):
        MlvlPointGenerator([8, 16]).grid_priors([(2, 2)])


def test_point_generator_points_carry_the_stride():
    pts = PointGenerator().grid_points((2, 2), stride=4)
    assert pts.tolist() == [[0, 0, 4], [4, 0, 4], [0, 4, 4], [4, 4, 4]]
