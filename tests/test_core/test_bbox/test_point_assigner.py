import pytest
import torch

from ckptzoo.core.bbox.assigners import PointAssigner
from ckptzoo.registry import TASK_UTILS


def _points():
    """Level 3 (stride 8): a 4x4 grid at 0, 8, 16, 24; level 4 (stride 16): 2x2 at 0, 16."""
    rows = []
    for stride, n in ((8, 4), (16, 2)):
        for y in range(n):
            for x in range(n):
                rows.append([x * stride, y * stride, stride, stride])
    return torch.tensor(rows, dtype=torch.float)


def test_nearest_points_on_the_boxs_level():
    assigner = TASK_UTILS.build(dict(type='PointAssigner', scale=4, pos_num=2))
    # 32 x 32 box: level int(log2(8)) = 3, centre (12, 12): the nearest stride-8 points are
    # (8, 8), (16, 8), (8, 16), (16, 16) at equal distance; topk keeps two of them.
    # 64 x 64 box: level 4, centre (16, 16): (16, 16) then the three at distance 16.
    gts = torch.tensor([[-4., -4., 28., 28.], [-16., -16., 48., 48.]])
    result = assigner.assign(_points(), gts, gt_labels=torch.tensor([3, 1]))
    pos = result.gt_inds > 0
    assert result.num_gts == 2 and result.max_overlaps is None
    assert pos.sum() == 4
    first = torch.nonzero(result.gt_inds == 1).flatten().tolist()
    assert len(first) == 2 and set(first) <= {5, 6, 9, 10}
    second = torch.nonzero(result.gt_inds == 2).flatten().tolist()
    assert 19 in second and len(second) == 2 and all(i >= 16 for i in second)
    assert result.labels[pos].tolist() == [3 if i in first else 1 for i in range(20) if pos[i]]
    assert (result.labels[~pos] == -1).all()


def test_a_nearer_box_keeps_the_point():
    assigner = PointAssigner(scale=4, pos_num=1)
    # both boxes map to level 3 and both claim (16, 16): the second is nearer (0 against
    # |(2, 2)| / 32), the first gets nothing; in the other order the first keeps it
    gts = torch.tensor([[2., 2., 34., 34.], [0., 0., 32., 32.]])
    result = assigner.assign(_points(), gts)
    assert result.gt_inds.tolist() == [0] * 10 + [2] + [0] * 9
    assert result.labels is None
    result = assigner.assign(_points(), gts.flip(0))
    assert result.gt_inds.tolist() == [0] * 10 + [1] + [0] * 9


def test_levels_are_clamped_and_empty_inputs():
    assigner = PointAssigner(scale=4, pos_num=1)
    tiny = torch.tensor([[0., 0., 1., 1.]])  # level -2 -> 3
    huge = torch.tensor([[0., 0., 900., 900.]])  # level 7 -> 4
    assert assigner.assign(_points(), tiny).gt_inds[0] == 1
    assert assigner.assign(_points(), huge).gt_inds[16:].tolist().count(1) == 1
    none = assigner.assign(_points(), torch.zeros(0, 4), gt_labels=torch.zeros(0).long())
    assert (none.gt_inds == 0).all() and (none.labels == -1).all()
    # more points asked for than the level has: all of them (mmdet fails in topk)
    result = PointAssigner(scale=4, pos_num=9).assign(_points(), huge)
    assert (result.gt_inds[16:] == 1).all() and (result.gt_inds[:16] == 0).all()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='pos_num'):
        PointAssigner(pos_num=0)
    with pytest.raises(ValueError, match='scale'):
        PointAssigner(scale=-1)
    with pytest.raises(ValueError, match='x, y, stride'):
        PointAssigner().assign(torch.zeros(3, 2), torch.zeros(1, 4))
