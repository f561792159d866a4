"""CenterNetHead (mmdet 2.28.2's): keys, targets and losses by hand, decoding by hand, the
level as a checkpoint unit in every mode, bad input refused."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.level_heads import assert_head_mode_exact

TEST_CFG = dict(topk=5, local_maximum_kernel=3, max_per_img=5)


def _head(**kw):
    cfg = dict(type='CenterNetHead', num_classes=3, in_channel=4, feat_channel=6,
               test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32, sf=1.0, border=(0, 0, 0, 0)):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), batch_input_shape=(h, w),
                scale_factor=np.full(4, sf, dtype=np.float32), border=np.array(border))


def test_keys_and_init_as_mmdet():
    head = _head()
    assert sorted(head.state_dict()) == sorted(
        f'{b}.{i}.{p}' for b in ('heatmap_head', 'wh_head', 'offset_head') for i in (0, 2)
        for p in ('weight', 'bias'))
    assert head.heatmap_head[2].out_channels == 3 and head.wh_head[2].out_channels == 2
    torch.testing.assert_close(head.heatmap_head[2].bias.sigmoid(), torch.full((3, ), 0.1))
    assert head.wh_head[0].weight.std() < 0.003 and (head.offset_head[2].bias == 0).all()
    assert list(head.checkpoint_units()) == ['level0']
    heat, wh, off = head([torch.randn(2, 4, 8, 8)])
    assert heat[0].shape == (2, 3, 8, 8) and ((heat[0] > 0) & (heat[0] < 1)).all()
    assert wh[0].shape == off[0].shape == (2, 2, 8, 8)


def test_targets_and_losses_by_hand():
    head = _head()
    gt = torch.tensor([[4., 6., 20., 14.]])  # on a 16x16 map of a 32x32 input: centre (6, 5)
    targets, avg = head.get_targets([gt], [torch.tensor([2])], (1, 3, 16, 16), (32, 32, 3))
    heat = targets['center_heatmap_target']
    assert avg == 1 and heat[0, 2, 5, 6] == 1 and heat[0, :2].eq(0).all()
    assert targets['wh_target'][0, :, 5, 6].tolist() == [8.0, 4.0]
    assert targets['offset_target'][0, :, 5, 6].tolist() == [0.0, 0.0]
    assert targets['wh_offset_target_weight'].sum() == 2
    torch.manual_seed(1)
    pred = torch.rand(1, 3, 16, 16) * 0.9 + 0.05
    wh, off = torch.randn(1, 2, 16, 16), torch.randn(1, 2, 16, 16)
    losses = head.loss([pred], [wh], [off], [gt], [torch.tensor([2])], [_meta()])
    pos = heat.eq(1)
    focal = (-(pred + 1e-12).log() * (1 - pred) ** 2 * pos
             - (1 - pred + 1e-12).log() * pred ** 2 * (1 - heat) ** 4).sum()
    torch.testing.assert_close(losses['loss_center_heatmap'], focal)
    l1_wh = ((wh[0, :, 5, 6] - torch.tensor([8., 4.])).abs().sum()) / 2 * 0.1
    torch.testing.assert_close(losses['loss_wh'], l1_wh)
    torch.testing.assert_close(losses['loss_offset'], off[0, :, 5, 6].abs().sum() / 2)


def test_decoding_by_hand():
    head = _head()
    heat = torch.zeros(1, 3, 8, 8)
    heat[0, 1, 2, 3] = 0.9
    wh = torch.zeros(1, 2, 8, 8)
    wh[0, :, 2, 3] = torch.tensor([4., 2.])
    off = torch.zeros(1, 2, 8, 8)
    off[0, :, 2, 3] = torch.tensor([0.5, 0.25])
    (dets, labels), = head.get_bboxes([heat], [wh], [off], [_meta(border=(1, 0, 2, 0), sf=2.)],
                                      rescale=True)
    assert dets.shape == (5, 5) and labels[0] == 1
    # centre (3.5, 2.25) on the 8x8 map, x4 to the 32x32 input, less the border, / 2
    box = torch.tensor([(3.5 - 2) * 4 - 2, (2.25 - 1) * 4 - 1, (3.5 + 2) * 4 - 2,
                        (2.25 + 1) * 4 - 1]) / 2
    torch.testing.assert_close(dets[0], torch.cat([box, torch.tensor([0.9])]))
    (nms_dets, _), = _head(test_cfg=dict(TEST_CFG, nms=dict(type='nms', iou_threshold=0.5))) \
        .get_bboxes([heat], [wh], [off], [_meta()], with_nms=True)
    assert len(nms_dets) <= 5


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    head = _head().double()
    assert_head_mode_exact(head, [torch.randn(2, 4, 6, 6, dtype=torch.float64)], monkeypatch,
                           mode)
    assert set(_head(with_cp=True).checkpoint_plan().values()) == {'full'}


def test_bad_input():
    with pytest.raises(UnknownKeyError, match='topkk'):
        _head(test_cfg=dict(topkk=3))
    with pytest.raises(ValueError, match='num_classes'):
        _head(num_classes=0)
    with pytest.raises(ValueError, match='expects 1 levels'):
        _head()([torch.zeros(1, 4, 4, 4)] * 2)
    with pytest.raises(ValueError, match='one feature level'):
        _head().get_bboxes([torch.rand(1, 3, 4, 4)] * 2, [torch.rand(1, 2, 4, 4)] * 2,
                           [torch.rand(1, 2, 4, 4)] * 2, [_meta()])
    with pytest.raises(ValueError, match='test_cfg.nms'):
        _head().get_bboxes([torch.rand(1, 3, 4, 4)], [torch.rand(1, 2, 4, 4)],
                           [torch.rand(1, 2, 4, 4)], [_meta()], with_nms=True)
