import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import ATSSHead, FCOSHead, VFNetHead
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _head(**kw):
    cfg = dict(type='VFNetHead', num_classes=2, in_channels=4, stacked_convs=1, feat_channels=8,
               strides=[8, 16], regress_ranges=((-1, 64), (64, 1e8)),
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, center_offset=0.0, strides=[8, 16]),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _feats(batch=2, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 4, 4, 4, generator=g), torch.randn(batch, 4, 2, 2, generator=g)]


GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def test_keys_classes_and_init_as_mmdet():
    head = _head(dcn_on_last_conv=True)
    assert isinstance(head, ATSSHead) and isinstance(head, FCOSHead)
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert {'cls_convs.0.conv.weight': (8, 4, 3, 3), 'cls_convs.0.conv.conv_offset.weight':
            (27, 4, 3, 3), 'vfnet_reg_conv.conv.weight': (8, 8, 3, 3),
            'vfnet_reg_conv.gn.weight': (8, ), 'vfnet_reg.weight': (4, 8, 3, 3),
            'scales.1.scale': (), 'vfnet_reg_refine_dconv.weight': (8, 8, 3, 3),
            'vfnet_reg_refine.bias': (4, ), 'scales_refine.0.scale': (),
            'vfnet_cls_dconv.weight': (8, 8, 3, 3), 'vfnet_cls.weight': (2, 8, 3, 3)}.items() \
        <= shapes.items()
    assert not any(k.startswith(('conv_cls', 'conv_reg', 'atss_')) for k in shapes)
    torch.testing.assert_close(head.vfnet_cls.bias, torch.full((2, ), math.log(0.01 / 0.99)))
    assert (head.cls_convs[0].conv.conv_offset.weight == 0).all()
    assert head.reg_denoms == [64, 128] and head.prior_generator.offset == 0.0
    assert _head(use_atss=False).prior_generator.offset == 0.5
    assert head.checkpoint_plan() == {'level0': None, 'level1': None}


def test_star_offsets_put_the_kernel_on_the_box():
    """A box with distances (l, t, r, b) = (2, 1, 3, 4) strides: the nine sampling points
    (kernel point + offset) are the corners, side midpoints and centre of the star."""
    head = _head()
    bbox = torch.tensor([2., 1., 3., 4.]).view(1, 4, 1, 1) * 8
    offset = head.star_dcn_offset(bbox, 0.1, 8)
    points = (offset + head.dcn_base_offset.float()).view(9, 2)
    # (y, x) row-major: top row at -t, middle at 0, bottom at +b; columns -l, 0, +r
    expected = [[y, x] for y in (-1., 0., 4.) for x in (-2., 0., 3.)]
    torch.testing.assert_close(points, torch.tensor(expected))


def test_forward_outputs_and_gradient_mul():
    head = _head()
    cls, reg, reg_rf = head(_feats())
    assert [c.shape for c in cls] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)] and (reg[0] > 0).all()
    head.eval()
    with torch.no_grad():
        cls_e, reg_e = head(_feats())
    torch.testing.assert_close(reg_e[1], reg_rf[1].detach())
    # bbox_norm_type='stride': exp(pred) in strides
    assert _head(bbox_norm_type='stride')(_feats())[1][0].mean() < reg[0].mean()


def test_loss_reaches_every_parameter_with_atss_and_fcos_targets():
    for kw in (dict(), dict(use_atss=False), dict(use_vfl=False)):
        head = _head(**kw)
        losses = head.loss(*head(_feats()), GTS, LABELS, [_meta(), _meta()])
        assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_bbox_rf'}
        assert all(torch.isfinite(v) and v > 0 for v in losses.values()), kw
        sum(losses.values()).backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all()
                   for p in head.parameters()), kw
    head = _head()
    losses = head.loss(*head(_feats()), [torch.zeros(0, 4)] * 2,
                       [torch.zeros(0, dtype=torch.long)] * 2, [_meta(), _meta()])
    assert losses['loss_bbox'] == 0 and losses['loss_bbox_rf'] == 0 and losses['loss_cls'] > 0


def test_get_bboxes_decodes_the_refined_distances():
    head = _head()
    cls = [torch.full((1, 2, 2, 2), -10.), torch.full((1, 2, 1, 1), -10.)]
    cls[0][0, 1, 1, 0] = 2.  # the point (0, 8), class 1
    dist = [torch.zeros(1, 4, 2, 2), torch.zeros(1, 4, 1, 1)]
    dist[0][0, :, 1, 0] = torch.tensor([3., 2., 5., 6.])
    (dets, labels), = head.get_bboxes(cls, dist, img_metas=[_meta(16, 16)])
    assert labels.tolist() == [1]
    torch.testing.assert_close(dets, torch.tensor([[0., 6., 5., 14., torch.tensor(2.).sigmoid()]]))


def test_every_checkpoint_mode_is_exact():
    feats = _feats()

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        losses = head.loss(*head(xs), GTS, LABELS, [_meta(), _meta()])
        sum(losses.values()).backward()
        return [float(v) for v in losses.values()], [x.grad for x in xs], \
            {n: p.grad for n, p in head.named_parameters()}

    ref = run(_head(dcn_on_last_conv=True))
    for mode in ('full', 'selective', 'offload'):
        head = _head(dcn_on_last_conv=True, with_cp=mode == 'full')
        head.set_checkpoint_plan({'level*': mode})
        got = run(head)
        assert got[0] == ref[0]
        for a, b in zip(got[1], ref[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for name, g in ref[2].items():
            torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="bbox_norm_type must be one of 'reg_denom'"):
        _head(bbox_norm_type='log')
    with pytest.raises(ValueError, match='regress range per stride'):
        _head(regress_ranges=((-1, 64), ))
    with pytest.raises(ValueError, match='PseudoSampler'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8)))
    with pytest.raises(Exception, match='assigne'):
        _head(train_cfg=dict(TRAIN_CFG, assigne=1))
    assert isinstance(_head(), VFNetHead)
