import pytest
import torch

from ckptzoo.models.dense_heads import AnchorFreeHead, BaseDenseHead
from ckptzoo.models.utils import Scale
from ckptzoo.registry import build_head


def _head(**kw):
    cfg = dict(type='AnchorFreeHead', num_classes=3, in_channels=4, feat_channels=4,
               stacked_convs=2, strides=(8, 16))
    cfg.update(kw)
    return build_head(cfg)


def test_keys_as_mmdet_and_focal_prior():
    head = _head(norm_cfg=dict(type='GN', num_groups=2))
    keys = set(head.state_dict())
    assert {'cls_convs.0.conv.weight', 'cls_convs.1.gn.bias', 'reg_convs.1.conv.weight',
            'conv_cls.weight', 'conv_cls.bias', 'conv_reg.bias'} <= keys
    # 'auto' bias: none before a norm
    assert 'cls_convs.0.conv.bias' not in keys
    assert torch.allclose(head.conv_cls.bias, torch.full((3, ), -4.59511985013459))
    assert isinstance(head, BaseDenseHead)


def test_forward_gives_scores_and_distances_per_level():
    head = _head()
    cls, reg = head([torch.randn(2, 4, 6, 5), torch.randn(2, 4, 3, 3)])
    assert [c.shape for c in cls] == [(2, 3, 6, 5), (2, 3, 3, 3)]
    assert [r.shape for r in reg] == [(2, 4, 6, 5), (2, 4, 3, 3)]
    assert len(head.forward_single(torch.randn(1, 4, 2, 2))) == 4


def test_levels_are_units_and_every_mode_is_exact():
    torch.manual_seed(0)
    plain = _head()
    feats = [torch.randn(2, 4, 6, 5), torch.randn(2, 4, 3, 3)]

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl], [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters()})

    ref = run(plain)
    for mode in ('full', 'selective', 'offload'):
        cp = _head()
        cp.load_state_dict(plain.state_dict())
        assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
        got = run(cp)
        for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        for name, g in ref[2].items():
            torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)
    assert _head(with_cp=True).checkpoint_plan() == {'level0': 'full', 'level1': 'full'}


def test_base_class_has_no_loss_and_bad_arguments_are_named():
    with pytest.raises(NotImplementedError, match='base class'):
        _head().loss(None, None, None, None, None)
    with pytest.raises(ValueError, match='conv_bias'):
        _head(conv_bias='yes')
    with pytest.raises(ValueError, match='levels'):
        _head()([torch.randn(1, 4, 2, 2)])


def test_score_factors_multiply_the_scores_before_nms():
    """BaseDenseHead.get_bboxes with centerness-like factors: the kept score is
    sigmoid(cls) * sigmoid(factor), the box the point's decoded distances."""
    head = _head(strides=(8, ), test_cfg=dict(nms_pre=10, score_thr=0.05,
                                              nms=dict(type='nms', iou_threshold=0.5),
                                              max_per_img=5))
    cls = torch.full((1, 3, 1, 2), -20.)
    cls[0, 1, 0, 1] = 2.  # class 1 at the second point (x=12, y=4)
    reg = torch.zeros(1, 4, 1, 2)
    reg[0, :, 0, 1] = torch.tensor([2., 3., 4., 1.])
    factor = torch.full((1, 1, 1, 2), 0.5)
    meta = dict(img_shape=(8, 16, 3), scale_factor=torch.ones(4).numpy(), pad_shape=(8, 16, 3))
    (dets, labels), = head.get_bboxes([cls], [reg], [factor], img_metas=[meta])
    expected = torch.sigmoid(torch.tensor(2.)) * torch.sigmoid(torch.tensor(0.5))
    assert labels.tolist() == [1]
    torch.testing.assert_close(dets, torch.tensor([[10., 1., 16., 5., expected.item()]]))
    (plain, _), = head.get_bboxes([cls], [reg], img_metas=[meta])
    torch.testing.assert_close(plain[0, 4], torch.sigmoid(torch.tensor(2.)))


def test_scale_is_a_learnable_factor():
    s = Scale(2.)
    assert list(s.state_dict()) == ['scale'] and s(torch.ones(2)).tolist() == [2., 2.]
