"""RegionAssigner (mmdet 2.x): positives by anchor centre in a ground truth's central region,
on the level its size picks; ignores around it and on the adjacent levels."""
import pytest
import torch

from ckptzoo.core.anchor import AnchorGenerator
from ckptzoo.core.bbox import RegionAssigner
from ckptzoo.core.bbox.assigners.region_assigner import (anchor_ctr_inside_region_flags,
                                                         calc_region)
from ckptzoo.registry import TASK_UTILS

STRIDES = [4, 8]


def _anchors(h=32, w=32):
    gen = AnchorGenerator(strides=STRIDES, ratios=[1.0], scales=[8])
    sizes = [(h // s, w // s) for s in STRIDES]
    return gen.grid_priors(sizes), gen.valid_flags(sizes, (h, w)), sizes


def _assign(gt, assigner=None, **kw):
    anchors, flags, sizes = _anchors()
    assigner = assigner or RegionAssigner()
    kw.setdefault('allowed_border', -1)
    return assigner.assign(anchors, flags, gt, dict(img_shape=(32, 32, 3)), sizes, 8, STRIDES,
                           **kw), sizes


def test_built_from_config_with_mmdet_defaults():
    a = TASK_UTILS.build(dict(type='RegionAssigner'))
    assert (a.center_ratio, a.ignore_ratio) == (0.2, 0.5)


def test_calc_region_and_centre_flags():
    box = torch.tensor([8., 8., 24., 24.])
    assert [float(v) for v in calc_region(box, 0.25, 4)] == [3., 3., 5., 5.]
    assert [float(v) for v in calc_region(box, 0.0, 4, (4, 5))] == [2., 2., 5., 4.]
    anchors = torch.tensor([[0., 0., 8., 8.], [12., 12., 20., 20.]])
    assert anchor_ctr_inside_region_flags(anchors, 4, (2, 2, 4, 4)).tolist() == [False, True]


def test_small_box_positive_on_level0_centre_only():
    gt = torch.tensor([[8., 8., 24., 24.]])  # scale 16 < 8 * 4 * 1.41: level 0
    res, sizes = _assign(gt)
    n0 = sizes[0][0] * sizes[0][1]
    inds = res.gt_inds[:n0].view(sizes[0])
    pos = (inds == 1).nonzero().tolist()
    assert pos and all(3 <= y <= 5 and 3 <= x <= 5 for y, x in pos)
    assert res.max_overlaps is None and res.labels is None and res.num_gts == 1
    assert (res.gt_inds[n0:] <= 0).all()  # nothing positive on level 1


def test_big_box_goes_to_level1_and_mmdet_adjacent_quirk():
    res, sizes = _assign(torch.tensor([[0., 0., 64., 64.]]))  # scale 64: level 1
    n0 = sizes[0][0] * sizes[0][1]
    assert (res.gt_inds[n0:] == 1).any() and not (res.gt_inds[:n0] == 1).any()
    # mmdet indexes with 0/1 long flags: positions 0 and 1 of the adjacent level ignored
    assert res.gt_inds[:2].tolist() == [-1, -1] and (res.gt_inds[2:n0] == 0).all()


def test_outside_anchors_ignored_labels_and_empty():
    anchors, flags, sizes = _anchors()
    flags = [f.clone() for f in flags]
    flags[1][:] = False
    res = RegionAssigner().assign(anchors, flags, torch.tensor([[8., 8., 24., 24.]]),
                                  dict(img_shape=(32, 32, 3)), sizes, 8, STRIDES,
                                  gt_labels=torch.tensor([4]))
    n0 = sizes[0][0] * sizes[0][1]
    assert (res.gt_inds[n0:] == -1).all()
    assert (res.labels[res.gt_inds > 0] == 4).all() and (res.labels[res.gt_inds <= 0] == 0).all()
    empty, _ = _assign(torch.zeros(0, 4))
    assert (empty.gt_inds == 0).all() and empty.max_overlaps.shape == empty.gt_inds.shape


def test_gt_bboxes_ignore_not_supported():
    with pytest.raises(NotImplementedError):
        _assign(torch.tensor([[8., 8., 24., 24.]]), gt_bboxes_ignore=torch.zeros(0, 4))
