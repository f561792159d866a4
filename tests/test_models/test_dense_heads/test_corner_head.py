"""CornerHead and CentripetalHead (mmdet 2.28.2's): keys, targets by hand, losses per level,
decoding of a planted pair, the levels as checkpoint units in every mode, bad input refused."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import build_head
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.level_heads import assert_head_mode_exact

TEST_CFG = dict(corner_topk=10, local_maximum_kernel=3, distance_threshold=0.5, score_thr=0.05,
                max_per_img=20, nms=dict(type='soft_nms', iou_threshold=0.5,
                                         method='gaussian'))


def _head(type='CornerHead', **kw):
    cfg = dict(type=type, num_classes=3, in_channels=8, num_feat_levels=2, test_cfg=TEST_CFG)
    if type == 'CentripetalHead':
        cfg.update(corner_emb_channels=0, loss_embedding=None)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta():
    return dict(pad_shape=(32, 32, 3), img_shape=(32, 32, 3), batch_input_shape=(32, 32),
                scale_factor=np.ones(4, dtype=np.float32), border=np.zeros(4))


def test_keys_as_mmdet():
    keys = set(_head().state_dict())
    assert {'tl_pool.0.direction1_conv.conv.weight', 'br_pool.1.aftpool_conv.bn.running_var',
            'tl_pool.0.conv1.bn.weight', 'tl_heat.1.0.conv.weight', 'tl_heat.1.1.conv.bias',
            'br_emb.0.1.conv.weight', 'br_off.1.1.conv.bias'} <= keys
    assert not any(k.startswith('tl_emb') for k in _head(corner_emb_channels=0).state_dict())
    cent = set(_head('CentripetalHead').state_dict())
    assert {'tl_feat_adaption.0.weight', 'br_dcn_offset.1.conv.weight',
            'tl_guiding_shift.0.1.conv.bias', 'br_centripetal_shift.1.0.conv.weight'} <= cent
    assert not any('emb' in k for k in cent)
    assert list(_head().checkpoint_units()) == ['level0', 'level1']


def test_targets_by_hand():
    head = _head()
    gt = torch.tensor([[4., 6., 20., 14.]])  # on a 16x16 grid of a 32x32 input
    t = head.get_targets([gt], [torch.tensor([1])], (1, 3, 16, 16), (32, 32),
                         with_corner_emb=True, with_guiding_shift=True,
                         with_centripetal_shift=True)
    assert t['topleft_heatmap'][0, 1, 3, 2] == 1 and t['bottomright_heatmap'][0, 1, 7, 10] == 1
    assert t['corner_embedding'] == [[[[3, 2], [7, 10]]]]
    assert t['topleft_guiding_shift'][0, :, 3, 2].tolist() == [4.0, 2.0]
    torch.testing.assert_close(t['bottomright_centripetal_shift'][0, :, 7, 10],
                               torch.log(torch.tensor([4.0, 2.0])))


@pytest.mark.parametrize('kind', ['CornerHead', 'CentripetalHead'])
def test_losses_per_level_and_backward(kind):
    head = _head(kind)
    feats = [torch.randn(2, 8, 16, 16, requires_grad=True) for _ in range(2)]
    outs = head(feats)
    gts = [torch.tensor([[4., 6., 20., 14.], [10., 2., 30., 30.]]), torch.zeros(0, 4)]
    labels = [torch.tensor([1, 2]), torch.zeros(0, dtype=torch.long)]
    losses = head.loss(*outs, gts, labels, [_meta(), _meta()])
    expected = {'det_loss', 'off_loss', 'pull_loss', 'push_loss'} if kind == 'CornerHead' \
        else {'det_loss', 'off_loss', 'guiding_loss', 'centripetal_loss'}
    assert set(losses) == expected and all(len(v) == 2 for v in losses.values())
    sum(sum(v) for v in losses.values()).backward()
    assert all(torch.isfinite(f.grad).all() and f.grad.abs().sum() > 0 for f in feats)


def test_decoding_a_planted_pair():
    head = _head()
    tl, br = torch.full((1, 3, 8, 8), -9.), torch.full((1, 3, 8, 8), -9.)
    tl[0, 2, 1, 2], br[0, 2, 5, 6] = 5., 5.  # class 2: (2, 1) - (6, 5) on the 8x8 grid
    emb = torch.zeros(1, 1, 8, 8)
    off = torch.zeros(1, 2, 8, 8)
    (dets, labels), = head.get_bboxes([tl] * 2, [br] * 2, [emb] * 2, [emb] * 2, [off] * 2,
                                      [off] * 2, [_meta()])
    assert labels[0] == 2
    torch.testing.assert_close(dets[0, :4], torch.tensor([8., 4., 24., 20.]))
    assert dets[0, 4] == pytest.approx(float(torch.sigmoid(torch.tensor(5.))))


@pytest.mark.parametrize('kind', ['CornerHead', 'CentripetalHead'])
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(kind, mode, monkeypatch):
    head = _head(kind).double().train()
    randomise_bn(head)
    feats = [torch.randn(2, 8, 6, 6, dtype=torch.float64) for _ in range(2)]
    assert_head_mode_exact(head, feats, monkeypatch, mode)
    assert set(_head(kind, with_cp=True).checkpoint_plan().values()) == {'full'}


def test_bad_input():
    with pytest.raises(ValueError, match='init_cfg'):
        _head(init_cfg=dict(type='Normal'))
    with pytest.raises(ValueError, match='expects 2 levels'):
        _head()([torch.zeros(1, 8, 4, 4)])
    with pytest.raises(ValueError, match='== 2'):
        _head('CentripetalHead', guiding_shift_channels=3)
    with pytest.raises(ValueError, match='test_cfg.nms'):
        _head(test_cfg=dict(corner_topk=2))._bboxes_nms(torch.zeros(1, 5), torch.zeros(1),
                                                        dict(max_per_img=1))
