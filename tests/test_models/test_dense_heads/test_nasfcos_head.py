"""NASFCOSHead: the searched towers (dconv3x3, conv3x3, dconv3x3, conv1x1), mmdet's keys and
init, FCOS's outputs, levels as units."""
import pytest
import torch

from ckptzoo.models.dense_heads import FCOSHead, NASFCOSHead
from ckptzoo.ops import ModulatedDeformConv2dPack
from ckptzoo.registry import build_head


def _head(**kw):
    cfg = dict(type='NASFCOSHead', num_classes=3, in_channels=8, feat_channels=8,
               strides=(8, 16), regress_ranges=((-1, 16), (16, 1e8)),
               norm_cfg=dict(type='GN', num_groups=2))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def test_towers_and_keys_as_mmdet():
    head = _head()
    assert isinstance(head, NASFCOSHead) and isinstance(head, FCOSHead)
    for tower in (head.cls_convs, head.reg_convs):
        assert len(tower) == 4
        dconvs = [tower[0].conv, tower[2].conv]
        assert all(isinstance(c, ModulatedDeformConv2dPack) and c.deform_groups == 2 and
                   c.bias is not None for c in dconvs)
        assert type(tower[1].conv) is torch.nn.Conv2d and tower[1].conv.kernel_size == (3, 3)
        assert type(tower[3].conv) is torch.nn.Conv2d and tower[3].conv.kernel_size == (1, 1)
        assert tower[1].conv.bias is None and tower[3].conv.bias is None
    keys = list(head.state_dict())
    assert keys[:9] == ['cls_convs.0.conv.weight', 'cls_convs.0.conv.bias',
                        'cls_convs.0.conv.conv_offset.weight',
                        'cls_convs.0.conv.conv_offset.bias', 'cls_convs.0.gn.weight',
                        'cls_convs.0.gn.bias', 'cls_convs.1.conv.weight',
                        'cls_convs.1.gn.weight', 'cls_convs.1.gn.bias']
    assert keys[-8:] == ['conv_cls.weight', 'conv_cls.bias', 'conv_reg.weight',
                         'conv_reg.bias', 'conv_centerness.weight', 'conv_centerness.bias',
                         'scales.0.scale', 'scales.1.scale']
    # stacked_convs does not change the searched towers
    assert list(_head(stacked_convs=2).state_dict()) == keys


def test_init_as_mmdet():
    """Caffe2Xavier on the convs (kaiming uniform, fan_in, a=1: bound sqrt(3 / fan_in)),
    Normal(0.01) predictions with the focal prior on conv_cls, zero offsets."""
    head = _head(in_channels=64, feat_channels=64)
    conv = head.cls_convs[1].conv
    bound = (3 / (64 * 9)) ** 0.5
    assert conv.weight.abs().max() <= bound and conv.weight.std() > 0.8 * bound / 3 ** 0.5
    assert (head.cls_convs[0].conv.conv_offset.weight == 0).all()
    assert head.conv_reg.weight.std() < 0.02 and (head.conv_reg.bias == 0).all()
    torch.testing.assert_close(head.conv_cls.bias, torch.full((3, ), -4.59511985013459))


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_forward_and_every_mode_exact(mode):
    plain = _head()
    with torch.no_grad():  # offsets away from zero: the deformable path matters
        for m in plain.modules():
            if hasattr(m, 'conv_offset'):
                m.conv_offset.weight.normal_(0, 0.1)
    feats = [torch.randn(2, 8, 6, 5), torch.randn(2, 8, 3, 3)]

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
    assert [o.shape for o in ref[0]] == [(2, 3, 6, 5), (2, 3, 3, 3), (2, 4, 6, 5),
                                         (2, 4, 3, 3), (2, 1, 6, 5), (2, 1, 3, 3)]
    cp = _head()
    cp.load_state_dict(plain.state_dict())
    cp.set_checkpoint_plan({'level*': mode})
    got = run(cp)
    for a, b in zip(got[0] + got[1], ref[0] + ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, g in ref[2].items():
        torch.testing.assert_close(got[2][name], g, rtol=0, atol=0, msg=name)
