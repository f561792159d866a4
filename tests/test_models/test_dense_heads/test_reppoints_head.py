import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import AnchorFreeHead, RepPointsHead
from ckptzoo.registry import build_head

TRAIN_CFG = dict(
    init=dict(assigner=dict(type='PointAssigner', scale=4, pos_num=1), allowed_border=-1,
              pos_weight=-1, debug=False),
    refine=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                              min_pos_iou=0, ignore_iof_thr=-1),
                allowed_border=-1, pos_weight=-1, debug=False))
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _head(**kw):
    cfg = dict(type='RepPointsHead', num_classes=3, in_channels=4, feat_channels=4,
               point_feat_channels=6, stacked_convs=2, point_strides=[8, 16],
               loss_bbox_init=dict(type='SmoothL1Loss', beta=0.11, loss_weight=0.5),
               loss_bbox_refine=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=16, w=16, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _feats():
    g = torch.Generator().manual_seed(3)
    return [torch.randn(2, 4, 8, 8, generator=g), torch.randn(2, 4, 4, 4, generator=g)]


def test_keys_shapes_and_init_as_mmdet():
    head = _head(norm_cfg=dict(type='GN', num_groups=2))
    assert isinstance(head, AnchorFreeHead)
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes == {
        'cls_convs.0.conv.weight': (4, 4, 3, 3), 'cls_convs.0.gn.weight': (4, ),
        'cls_convs.0.gn.bias': (4, ), 'cls_convs.1.conv.weight': (4, 4, 3, 3),
        'cls_convs.1.gn.weight': (4, ), 'cls_convs.1.gn.bias': (4, ),
        'reg_convs.0.conv.weight': (4, 4, 3, 3), 'reg_convs.0.gn.weight': (4, ),
        'reg_convs.0.gn.bias': (4, ), 'reg_convs.1.conv.weight': (4, 4, 3, 3),
        'reg_convs.1.gn.weight': (4, ), 'reg_convs.1.gn.bias': (4, ),
        'reppoints_cls_conv.weight': (6, 4, 3, 3), 'reppoints_cls_out.weight': (3, 6, 1, 1),
        'reppoints_cls_out.bias': (3, ), 'reppoints_pts_init_conv.weight': (6, 4, 3, 3),
        'reppoints_pts_init_conv.bias': (6, ), 'reppoints_pts_init_out.weight': (18, 6, 1, 1),
        'reppoints_pts_init_out.bias': (18, ), 'reppoints_pts_refine_conv.weight': (6, 4, 3, 3),
        'reppoints_pts_refine_out.weight': (18, 6, 1, 1), 'reppoints_pts_refine_out.bias': (18, ),
        'moment_transfer': (2, )}
    torch.testing.assert_close(head.reppoints_cls_out.bias,
                               torch.full((3, ), math.log(0.01 / 0.99)))
    assert (head.moment_transfer == 0).all()
    grid = _head(use_grid_points=True, transform_method='minmax')
    assert 'moment_transfer' not in grid.state_dict()
    assert grid.reppoints_pts_init_out.out_channels == 4
    assert head.prior_generator.offset == 0 and head.prior_generator.num_levels == 2
    assert head.checkpoint_plan() == {'level0': None, 'level1': None}
    assert _head(with_cp=True).checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    # kernel grid offsets (y, x) row-major, as mmdet's dcn_base_offset
    assert head.dcn_base_offset.flatten().tolist() == [
        -1, -1, -1, 0, -1, 1, 0, -1, 0, 0, 0, 1, 1, -1, 1, 0, 1, 1]


@pytest.mark.parametrize('kw', [dict(), dict(use_grid_points=True, transform_method='minmax'),
                                dict(center_init=False, transform_method='partial_minmax')])
def test_forward_outputs_in_train_and_eval(kw):
    head = _head(**kw)
    cls, init, refine = head(_feats())
    assert [c.shape for c in cls] == [(2, 3, 8, 8), (2, 3, 4, 4)]
    assert [p.shape for p in init] == [(2, 18, 8, 8), (2, 18, 4, 4)]
    assert [p.shape for p in refine] == [(2, 18, 8, 8), (2, 18, 4, 4)]
    head.eval()
    with torch.no_grad():
        cls_e, boxes = head(_feats())
    assert [b.shape for b in boxes] == [(2, 4, 8, 8), (2, 4, 4, 4)]
    torch.testing.assert_close(cls_e, [c.detach() for c in cls])
    torch.testing.assert_close(boxes[1], head.points2bbox(refine[1].detach()))


def test_points2bbox_by_hand():
    head = _head()
    # points (x, y): (0, 0), (2, 0), (0, 4), (6, 8), (1, 1), ... as y, x pairs
    xy = torch.tensor([[0., 0.], [2., 0.], [0., 4.], [6., 8.], [1., 1.], [1., 1.], [1., 1.],
                       [1., 1.], [1., 1.]])
    yx = xy.flip(1).reshape(1, 18)
    head.transform_method = 'minmax'
    assert head.points2bbox(yx).tolist() == [[0., 0., 6., 8.]]
    assert head.points2bbox(xy.reshape(1, 18), y_first=False).tolist() == [[0., 0., 6., 8.]]
    head.transform_method = 'partial_minmax'  # the first four points only
    assert head.points2bbox(yx).tolist() == [[0., 0., 6., 8.]]
    assert head.points2bbox(yx[:, [0, 1] * 9]).tolist() == [[0., 0., 0., 0.]]
    head.transform_method = 'moment'
    with torch.no_grad():
        head.moment_transfer.copy_(torch.tensor([math.log(2.), 0.]))
    mean, std = xy.mean(0), xy.std(0)
    expected = torch.cat([mean - std * torch.tensor([2., 1.]), mean + std * torch.tensor([2., 1.])])
    torch.testing.assert_close(head.points2bbox(yx)[0], expected)
    # moment_transfer learns at moment_mul (0.01) of the rate
    (head.points2bbox(yx) * torch.tensor([-1., -1., 1., 1.])).sum().backward()
    torch.testing.assert_close(head.moment_transfer.grad,
                               0.01 * 2 * std * torch.tensor([2., 1.]))


def test_gradient_mul_scales_what_the_offsets_pass_back():
    feats = _feats()

    def init_grad(mul):
        head = _head(gradient_mul=mul)
        cls, init, refine = head(feats)
        # only through the deformable convs' offsets
        (sum(c.sum() for c in cls) + sum(r.sum() for r in refine)).backward()
        return head.reppoints_pts_init_out.weight.grad

    g1, g2 = init_grad(0.1), init_grad(0.2)
    torch.testing.assert_close(g2, 2 * g1, rtol=1e-4, atol=1e-7)
    assert g1.abs().sum() > 0


def test_loss_by_hand_and_with_grid_points():
    """One level, stride 8, 16x16 image: the points are (0,0), (8,0), (0,8), (8,8). The gt
    [0,0,16,16] maps to level 2, clamped to 3: its nearest point (8,8) is the one positive.
    With zero predictions every set is its location, so the box is (8,8,8,8): the initial
    loss is 4 SmoothL1(8 / 32) * 0.5; the refined sets have no area, overlap nothing, and give
    no positive."""
    head = _head(point_strides=[8])
    cls = torch.zeros(1, 3, 2, 2, requires_grad=True)
    pts = torch.zeros(1, 18, 2, 2, requires_grad=True)
    losses = head.loss([cls], [pts], [pts + 0], [torch.tensor([[0., 0., 16., 16.]])],
                       [torch.tensor([1])], [_meta()])
    assert set(losses) == {'loss_cls', 'loss_pts_init', 'loss_pts_refine'}
    torch.testing.assert_close(losses['loss_pts_init'][0],
                               torch.tensor(0.5 * 4 * (0.25 - 0.11 / 2)))
    assert losses['loss_pts_refine'][0].item() == 0
    # every one of the 12 (location, class) scores is a negative: 12 * 0.75 * 0.25 * log 2
    torch.testing.assert_close(losses['loss_cls'][0],
                               torch.tensor(12 * 0.75 * 0.25 * math.log(2)))
    # grid points, MaxIoUAssigner on the initial stage's boxes of 4 strides
    head = _head(use_grid_points=True, transform_method='minmax',
                 train_cfg=dict(TRAIN_CFG, init=dict(TRAIN_CFG['refine'])))
    cls, init, refine = head(_feats())
    gts = [torch.tensor([[0., 0., 40., 30.]]), torch.tensor([[8., 8., 60., 60.]])]
    losses = head.loss(cls, init, refine, gts, [torch.tensor([0]), torch.tensor([2])],
                       [_meta(64, 64), _meta(64, 64)])
    total = sum(sum(v) for v in losses.values())
    assert torch.isfinite(total) and losses['loss_pts_init'][0] > 0
    total.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in head.parameters())


def test_get_bboxes_decodes_in_strides_from_the_points():
    head = _head(point_strides=[8])
    head.eval()
    cls = torch.full((1, 3, 2, 2), -10.)
    cls[0, 2, 1, 0] = 3.  # point (0, 8), class 2
    boxes = torch.zeros(1, 4, 2, 2)
    boxes[0, :, 1, 0] = torch.tensor([-1., -0.5, 1.5, 2.])  # (-8, 4, 12, 24) -> clipped
    (dets, labels), = head.get_bboxes([cls], [boxes], img_metas=[_meta(20, 16, scale=2.)],
                                      rescale=True)
    assert labels.tolist() == [2]
    torch.testing.assert_close(dets, torch.tensor([[0., 2., 6., 10., torch.tensor(3.).sigmoid()]]))


def test_levels_are_units_and_every_mode_is_exact():
    feats = _feats()

    def run(head, train=True):
        head.train(train)
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl], [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters()})

    for kw in (dict(norm_cfg=dict(type='GN', num_groups=2)),
               dict(use_grid_points=True, transform_method='minmax')):
        plain = _head(**kw)
        for train in (True, False):
            ref = run(plain, train)
            for mode in ('full', 'selective', 'offload'):
                cp = _head(**kw)
                cp.load_state_dict(plain.state_dict())
                cp.set_checkpoint_plan({'level*': mode})
                got = run(cp, train)
                for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
                    torch.testing.assert_close(a, b, rtol=0, atol=0)
                for name, g in ref[2].items():
                    if g is None:
                        assert got[2][name] is None, name
                    else:
                        torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='odd square'):
        _head(num_points=4)
    with pytest.raises(ValueError, match='odd square'):
        _head(num_points=8)
    with pytest.raises(ValueError, match="transform_method.*'moment'"):
        _head(transform_method='mean')
    with pytest.raises(ValueError, match='train_cfg.refine needs an assigner'):
        _head(train_cfg=dict(init=TRAIN_CFG['init']))
    with pytest.raises(Exception, match='pos_weigth'):
        _head(train_cfg=dict(TRAIN_CFG, init=dict(TRAIN_CFG['init'], pos_weigth=1)))
    with pytest.raises(Exception, match='score_thrs'):
        _head(test_cfg=dict(TEST_CFG, score_thrs=0.1))
    with pytest.raises(NotImplementedError, match='sampler'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8)))
    with pytest.raises(ValueError, match='train_cfg'):
        _head(train_cfg=None).loss(*_head()(_feats()), [torch.zeros(0, 4)] * 2,
                                   [torch.zeros(0).long()] * 2, [_meta(), _meta()])
    assert isinstance(_head(num_points=25), RepPointsHead)
