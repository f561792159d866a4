import numpy as np
import pytest
import torch

from ckptzoo.models.utils import bias_init_with_prob
from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(initial_epoch=4, initial_assigner=dict(type='ATSSAssigner', topk=9),
                 assigner=dict(type='TaskAlignedAssigner', topk=13), alpha=1, beta=6,
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)
GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def _head(**kw):
    cfg = dict(type='TOODHead', num_classes=2, in_channels=8, stacked_convs=2, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[0.1, 0.1, 0.2, 0.2]),
               loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, activated=True,
                             beta=2.0, loss_weight=1.0),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _feats(batch=2, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 8, 4, 4, generator=g), torch.randn(batch, 8, 2, 2, generator=g)]


def test_keys_shapes_and_mmdets_init():
    head = _head()
    keys = set(head.state_dict())
    assert {'inter_convs.1.conv.weight', 'inter_convs.1.gn.weight',
            'cls_decomp.layer_attention.0.weight', 'cls_decomp.layer_attention.2.bias',
            'reg_decomp.reduction_conv.conv.weight', 'reg_decomp.reduction_conv.gn.weight',
            'tood_cls.weight', 'tood_reg.bias', 'cls_prob_module.2.bias',
            'reg_offset_module.2.weight', 'scales.1.scale'} <= keys
    assert not any(k.startswith(('atss_', 'cls_convs', 'reg_convs')) for k in keys)
    assert head.cls_decomp.layer_attention[0].out_channels == 16 // 16  # la_down_rate 8 * 2
    prior = bias_init_with_prob(0.01)
    torch.testing.assert_close(head.tood_cls.bias, torch.full((2, ), prior))
    torch.testing.assert_close(head.cls_prob_module[2].bias, torch.full((1, ), prior))
    assert head.reg_offset_module[2].weight.std() < 0.005
    assert (head.tood_reg.bias == 0).all() and (head.reg_offset_module[2].bias == 0).all()
    cls, reg = head(_feats())
    assert [c.shape for c in cls] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
    assert ((cls[0] > 0) & (cls[0] < 1)).all()  # probabilities
    assert list(head.checkpoint_units()) == ['level0', 'level1']


@pytest.mark.parametrize('anchor_type', ['anchor_free', 'anchor_based'])
def test_boxes_are_in_strides_around_the_anchor_centres(anchor_type):
    """With zero regression and offsets: anchor_free gives distances exp(0) = 1 stride around
    each anchor centre, anchor_based the anchor itself (2 strides wide here)."""
    head = _head(anchor_type=anchor_type)
    with torch.no_grad():
        for m in (head.tood_reg, head.reg_offset_module[2]):
            m.weight.zero_()
            m.bias.zero_()
    _, reg = head(_feats(batch=1))
    cx = torch.arange(4.)  # the anchor centres of level 0, in strides
    torch.testing.assert_close(reg[0][0, 0], (cx - 1)[None, :].expand(4, 4))
    torch.testing.assert_close(reg[0][0, 3], (cx + 1)[:, None].expand(4, 4))


@pytest.mark.parametrize('epoch', [0, 4])
def test_loss_before_and_after_the_initial_epochs(epoch):
    head = _head()
    head.epoch = epoch
    feats = [f.requires_grad_() for f in _feats()]
    losses = head.loss(*head(feats), GTS, LABELS, [_meta(), _meta()])
    assert set(losses) == {'loss_cls', 'loss_bbox'}
    assert all(torch.isfinite(v) for vs in losses.values() for v in vs)
    assert sum(losses['loss_bbox']) > 0
    sum(sum(v) for v in losses.values()).backward()
    assert feats[0].grad.abs().sum() > 0
    assert head.assigner is head.initial_assigner
    assert type(head.alignment_assigner).__name__ == 'TaskAlignedAssigner'


def test_aligned_targets_are_normalised_per_gt():
    """After the initial epochs each gt's positives get metric / max metric * max IoU."""
    head = _head()
    head.epoch = 4
    cls, reg = head(_feats())
    metas = [_meta(), _meta()]
    anchors, valid = head.get_anchors([c.shape[-2:] for c in cls], metas)
    flat_s = torch.cat([c.permute(0, 2, 3, 1).reshape(2, -1, 2) for c in cls], 1)
    flat_b = torch.cat([b.permute(0, 2, 3, 1).reshape(2, -1, 4) * s
                        for b, s in zip(reg, (8, 16))], 1)
    _, labels, _, _, metrics = head.get_targets(flat_s, flat_b, anchors, valid, GTS, metas,
                                                gt_labels_list=LABELS)
    labels, metrics = torch.cat(labels, 1), torch.cat(metrics, 1)
    assert ((labels < 2) == (metrics > 0)).all()
    assert metrics.max() <= 1
    # before: ATSS targets, the metric is the box weight (1 for positives)
    head.epoch = 0
    _, labels0, _, _, metrics0 = head.get_targets(flat_s, flat_b, anchors, valid, GTS, metas,
                                                  gt_labels_list=LABELS)
    labels0, metrics0 = torch.cat(labels0, 1), torch.cat(metrics0, 1)
    assert torch.equal(metrics0, (labels0 < 2).float())


def test_get_bboxes_takes_probabilities_and_boxes_in_strides():
    head = _head()
    cls = [torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 2, 2)]
    cls[1][0, 1, 0, 1] = 0.8
    reg = [torch.zeros(1, 4, 4, 4), torch.zeros(1, 4, 2, 2)]
    reg[1][0, :, 0, 1] = torch.tensor([0.5, -0.5, 1.5, 0.5])
    (dets, labels), = head.get_bboxes(cls, reg, img_metas=[_meta()])
    assert labels.tolist() == [1]
    torch.testing.assert_close(dets, torch.tensor([[8., -8., 24., 8., 0.8]]))  # not clipped


@pytest.mark.parametrize('mode,reentrant', [('full', False), ('full', True),
                                            ('selective', False), ('offload', False)])
@pytest.mark.parametrize('epoch', [0, 4])
def test_every_checkpoint_mode_is_exact(mode, reentrant, epoch):
    def run(head):
        head.zero_grad()
        head.epoch = epoch
        feats = [f.clone().double().requires_grad_() for f in base]
        losses = head.forward_train(feats, metas, GTS, LABELS)
        loss = sum(sum(v) for v in losses.values())
        loss.backward()
        return (loss.detach(), [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()})

    base, metas = _feats(), [_meta(), _meta(28, 30)]
    plain = _head().double()
    ref = run(plain)
    cp = _head(cp_use_reentrant=reentrant).double()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-12)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert sum(g.abs().sum() > 0 for g in ref[2].values()) >= len(ref[2]) - 1
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=1e-12, msg=name)


def test_with_cp_flag_checkpoints_every_level(count_cp):
    head = _head(with_cp=True)
    assert head.checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    head([f.requires_grad_() for f in _feats()])
    assert count_cp['checkpoints'] == 2


def test_dcn_tower_convs():
    head = _head(num_dcn=1)
    assert type(head.inter_convs[0].conv).__name__ == 'ModulatedDeformConv2dPack'
    assert type(head.inter_convs[1].conv).__name__ == 'Conv2d'
    assert 'inter_convs.0.conv.conv_offset.weight' in head.state_dict()


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="anchor_type must be one of .* got 'free'"):
        _head(anchor_type='free')
    with pytest.raises(ValueError, match="train_cfg needs 'initial_epoch'"):
        _head(train_cfg={k: v for k, v in TRAIN_CFG.items() if k != 'initial_epoch'})
    with pytest.raises(UnknownKeyError, match="'train_cfg.initial_epochs'"):
        _head(train_cfg=dict(TRAIN_CFG, initial_epochs=3))
    with pytest.raises(ValueError, match='num_dcn must be a non-negative int'):
        _head(num_dcn=-1)
