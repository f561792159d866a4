"""CenterNetHead: mmdet's keys and init, Gaussian targets by hand, the losses, decoding (border,
rescale, NMS), the single level as a unit, errors."""
import math

import numpy as np
import pytest
import torch

from ckptzoo.models.dense_heads import CenterNetHead
from ckptzoo.registry import build_head

TEST_CFG = dict(topk=5, local_maximum_kernel=3, max_per_img=100)


def _head(**kw):
    cfg = dict(type='CenterNetHead', in_channel=4, feat_channel=4, num_classes=3,
               test_cfg=dict(TEST_CFG))
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def test_keys_and_init_as_mmdet():
    head = _head()
    assert list(head.state_dict()) == [f'{b}.{i}.{p}' for b in ('heatmap_head', 'wh_head',
                                                               'offset_head')
                                       for i in (0, 2) for p in ('weight', 'bias')]
    torch.testing.assert_close(head.heatmap_head[2].bias, torch.full((3, ), math.log(0.1 / 0.9)))
    assert head.wh_head[0].weight.std() < 0.002 and (head.offset_head[2].bias == 0).all()
    assert head.checkpoint_plan() == {'level0': None}
    assert _head(with_cp=True).checkpoint_plan() == {'level0': 'full'}


def test_targets_by_hand():
    """Input 32x32, feature 8x8 (ratio 1/4). Box [4,4,20,12]: centre (3, 2) in cells, size
    4 x 2 cells: radius int(gaussian_radius((2, 4), 0.3)) = 0, so one peak; wh (4, 2),
    offset (0, 0)."""
    head = _head()
    targets, avg = head.get_targets([torch.tensor([[4., 4., 20., 12.]])], [torch.tensor([2])],
                                    (1, 3, 8, 8), (32, 32, 3))
    heat = targets['center_heatmap_target']
    assert avg == 1 and heat[0, 2, 2, 3] == 1 and heat.sum() == 1
    assert targets['wh_target'][0, :, 2, 3].tolist() == [4., 2.]
    assert targets['offset_target'][0, :, 2, 3].tolist() == [0., 0.]
    assert targets['wh_offset_target_weight'].sum() == 2
    # a large box spreads a Gaussian; an off-grid centre gets its sub-cell offset
    targets, avg = head.get_targets([torch.tensor([[1., 2., 30., 31.]])], [torch.tensor([0])],
                                    (1, 3, 8, 8), (32, 32, 3))
    heat = targets['center_heatmap_target'][0, 0]
    assert avg == 1 and heat[4, 3] == 1 and 0 < heat[4, 4] < 1 and heat[3, 3] > 0
    torch.testing.assert_close(targets['offset_target'][0, :, 4, 3],
                               torch.tensor([31 / 8 - 3, 33 / 8 - 4]))


def _meta(h=32, w=32, scale=1.0, border=None):
    meta = dict(img_shape=(h, w, 3), pad_shape=(32, 32, 3), ori_shape=(h, w, 3),
                batch_input_shape=(32, 32), scale_factor=np.full(4, scale, np.float32),
                flip=False)
    if border is not None:
        meta['border'] = border
    return meta


def test_losses_and_their_gradients():
    head = _head()
    feats = [torch.randn(2, 4, 8, 8)]
    losses = head.loss(*head(feats), [torch.tensor([[4., 4., 20., 12.]]), torch.zeros(0, 4)],
                       [torch.tensor([2]), torch.zeros(0).long()], [_meta(), _meta()])
    assert list(losses) == ['loss_center_heatmap', 'loss_wh', 'loss_offset']
    assert all(v > 0 for v in losses.values())
    sum(losses.values()).backward()
    assert all(p.grad is not None for p in head.parameters())
    with pytest.raises(ValueError, match='one feature map'):
        head.loss([feats[0]] * 2, [feats[0]] * 2, [feats[0]] * 2, [], [], [])


def test_decoding_with_border_and_rescale():
    """A peak of class 1 at cell (x=2, y=3) of an 8x8 map, offset (0.5, 0.25), size 2 x 4
    cells: centre (2.5, 3.25) cells, box [1.5, 1.25, 3.5, 5.25] cells = x4 pixels; minus the
    border's left / top (3, 2); divided by the scale factor 2."""
    head = _head()
    heat = torch.zeros(1, 3, 8, 8)
    heat[0, 1, 3, 2] = 0.9
    wh = torch.zeros(1, 2, 8, 8)
    wh[0, :, 3, 2] = torch.tensor([2., 4.])
    offset = torch.zeros(1, 2, 8, 8)
    offset[0, :, 3, 2] = torch.tensor([0.5, 0.25])
    (dets, labels), = head.get_bboxes([heat], [wh], [offset],
                                      [_meta(scale=2.0, border=[2., 10., 3., 7.])])
    assert dets.shape == (5, 5) and labels[0] == 1
    torch.testing.assert_close(dets[0], torch.tensor([(6 - 3) / 2, (5 - 2) / 2, (14 - 3) / 2,
                                                      (21 - 2) / 2, 0.9]))
    # with NMS (test_cfg.nms): the zero-score duplicates at (0, 0) of each class collapse
    head.test_cfg = dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.5), max_per_img=0)
    (dets, labels), = head.get_bboxes([heat], [wh], [offset], [_meta()], with_nms=True)
    assert len(dets) == len(labels) and labels[0] == 1  # labels follow the kept boxes


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_the_level_is_a_unit_every_mode_exact(mode):
    plain = _head()
    feats = [torch.randn(2, 4, 8, 8)]

    def run(head):
        head.zero_grad()
        xs = [f.clone().requires_grad_() for f in feats]
        outs = head(xs)
        gen = torch.Generator().manual_seed(1)
        sum((o * torch.randn(o.shape, generator=gen)).sum() for lvl in outs for o in lvl
            ).backward()
        return ([o.detach() for lvl in outs for o in lvl] + [x.grad for x in xs],
                {n: p.grad for n, p in head.named_parameters()})

    ref = run(plain)
    cp = _head()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode}
    got = run(cp)
    for a, b in zip(got[0], ref[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    for name, g in ref[1].items():
        torch.testing.assert_close(got[1][name], g, rtol=0, atol=0, msg=name)
    assert isinstance(cp, CenterNetHead)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='num_classes'):
        _head(num_classes=0)
    with pytest.raises(ValueError, match='levels'):
        _head()([torch.randn(1, 4, 8, 8)] * 2)
