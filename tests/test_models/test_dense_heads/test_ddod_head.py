import numpy as np
import pytest
import torch

from ckptzoo.models.utils import bias_init_with_prob
from ckptzoo.registry import build_head
from tests.helpers.checkpointing import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9, alpha=0.8),
                 reg_assigner=dict(type='ATSSAssigner', topk=9, alpha=0.5),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)
GTS = [torch.tensor([[2., 3., 20., 18.], [12., 10., 30., 31.]]), torch.tensor([[4., 4., 28., 26.]])]
LABELS = [torch.tensor([0, 1]), torch.tensor([1])]


def _head(**kw):
    cfg = dict(type='DDODHead', num_classes=2, in_channels=4, stacked_convs=2, feat_channels=8,
               norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
               anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=2,
                                     scales_per_octave=1, strides=[8, 16]),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[0.1, 0.1, 0.2, 0.2]),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                             loss_weight=1.0),
               loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
               loss_iou=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
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


def test_keys_shapes_dcn_and_mmdets_init():
    head = _head()
    keys = set(head.state_dict())
    assert {'cls_convs.0.conv.weight', 'cls_convs.0.conv.conv_offset.weight',
            'reg_convs.1.gn.weight', 'atss_cls.bias', 'atss_reg.weight', 'atss_iou.weight',
            'scales.1.scale'} <= keys
    assert type(head.cls_convs[0].conv).__name__ == 'DeformConv2dPack'
    assert type(head.cls_convs[1].conv).__name__ == 'Conv2d'
    assert type(_head(use_dcn=False).reg_convs[0].conv).__name__ == 'Conv2d'
    torch.testing.assert_close(head.atss_cls.bias, torch.full((2, ), bias_init_with_prob(0.01)))
    assert (head.atss_iou.bias == 0).all() and head.atss_reg.weight.std() < 0.02
    cls, reg, iou = head(_feats())
    assert [c.shape for c in cls] == [(2, 2, 4, 4), (2, 2, 2, 2)]
    assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
    assert [i.shape for i in iou] == [(2, 1, 4, 4), (2, 1, 2, 2)]
    assert list(head.checkpoint_units()) == ['level0', 'level1']


def test_reweight_factors_accumulate_over_calls():
    head = _head()
    labels = [torch.tensor([[0, 2, 2], [1, 1, 2]]), torch.tensor([[2, 0]])]  # 3 and 1 positives
    assert head.calc_reweight_factor(labels) == pytest.approx([1.0, 2.0])
    assert head.cls_num_pos_samples_per_level == [3, 1]
    more = [torch.tensor([[2, 2, 2]]), torch.tensor([[0, 1]])]  # counts now 3 and 3
    assert head.calc_reweight_factor(more) == pytest.approx([2.0, 2.0])


def test_loss_two_assignments_and_iou_targets():
    head = _head()
    feats = [f.requires_grad_() for f in _feats()]
    losses = head.loss(*head(feats), GTS, LABELS, [_meta(), _meta()])
    assert set(losses) == {'loss_cls', 'loss_bbox', 'loss_iou'}
    assert all(torch.isfinite(v) for vs in losses.values() for v in vs)
    assert sum(losses['loss_bbox']) > 0 and sum(losses['loss_iou']) > 0
    sum(sum(v) for v in losses.values()).backward()
    assert feats[0].grad.abs().sum() > 0
    # both branches counted into the running per-level positives
    assert sum(head.cls_num_pos_samples_per_level) >= 2 * 3
    assert head.reg_num_pos_samples_per_level == [0., 0.]  # unused, as in mmdet


def test_without_gt_the_box_losses_are_zero():
    head = _head()
    losses = head.loss(*head(_feats()), [torch.zeros(0, 4)] * 2, [torch.zeros(0).long()] * 2,
                       [_meta(), _meta()])
    assert all(v.item() == 0 for v in losses['loss_bbox'] + losses['loss_iou'])


def test_get_bboxes_multiplies_by_the_iou_prediction():
    head = _head()
    cls = [torch.full((1, 2, 4, 4), -10.), torch.full((1, 2, 2, 2), -10.)]
    cls[0][0, 0, 1, 2] = 3.
    reg = [torch.zeros(1, 4, 4, 4), torch.zeros(1, 4, 2, 2)]
    iou = [torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 2, 2)]
    iou[0][0, 0, 1, 2] = 2.
    (dets, labels), = head.get_bboxes(cls, reg, iou, img_metas=[_meta()])
    assert labels.tolist() == [0]
    score = torch.tensor(3.).sigmoid() * torch.tensor(2.).sigmoid()
    torch.testing.assert_close(dets, torch.tensor([[8., 0., 24., 16., score]]))


@pytest.mark.parametrize('mode,reentrant', [('full', False), ('full', True),
                                            ('selective', False), ('offload', False)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    def run(head):
        head.zero_grad()
        feats = [f.clone().double().requires_grad_() for f in base]
        losses = head.forward_train(feats, metas, GTS, LABELS)
        loss = sum(sum(v) for v in losses.values())
        loss.backward()
        return (loss.detach(), [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()})

    base, metas = _feats(), [_meta(), _meta(28, 30)]
    plain = _head().double()
    with torch.no_grad():  # offsets away from their zero init, so the DCN path is exercised
        for convs in (plain.cls_convs, plain.reg_convs):
            convs[0].conv.conv_offset.weight.normal_(0, 0.05)
    ref = run(plain)
    cp = _head(cp_use_reentrant=reentrant).double()
    cp.load_state_dict(plain.state_dict())
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=1e-12)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert all(g.abs().sum() > 0 for g in ref[2].values())
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=1e-12, msg=name)


def test_with_cp_flag_checkpoints_every_level(count_cp):
    head = _head(with_cp=True)
    assert head.checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    head([f.requires_grad_() for f in _feats()])
    assert count_cp['checkpoints'] == 2


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="needs 'reg_assigner'"):
        _head(train_cfg={k: v for k, v in TRAIN_CFG.items() if k != 'reg_assigner'})
    with pytest.raises(ValueError, match='samples no anchors'):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='RandomSampler', num=8)))
    with pytest.raises(ValueError, match='stacked_convs must be a positive int, got 0'):
        _head(stacked_convs=0)


def test_the_planners_probe_steps_do_not_count():
    from ckptzoo.core.bbox.samplers import restore_sampling_at_capacity, set_sampling_at_capacity
    head = _head()
    labels = [torch.tensor([[0, 2, 2], [1, 1, 2]]), torch.tensor([[2, 0]])]
    states = set_sampling_at_capacity(head, True)
    assert head.level_positives in [s for s, _ in states]
    assert head.calc_reweight_factor(labels) == pytest.approx([1.0, 2.0])
    assert head.cls_num_pos_samples_per_level == [0., 0.]
    restore_sampling_at_capacity(states)
    head.calc_reweight_factor(labels)
    assert head.cls_num_pos_samples_per_level == [3, 1]
