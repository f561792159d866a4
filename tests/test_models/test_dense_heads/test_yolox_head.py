"""YOLOXHead (mmdet 2.x): keys, prior init, SimOTA losses (with and without ``use_l1``),
decoding and NMS, every checkpoint mode exact per level."""
import math

import numpy as np
import pytest
import torch

from ckptzoo.models.utils import bias_init_with_prob
from ckptzoo.registry import UnknownKeyError, build_head
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='SimOTAAssigner', center_radius=2.5))
TEST_CFG = dict(score_thr=0.01, nms=dict(type='nms', iou_threshold=0.65))


def _head(**kw):
    cfg = dict(type='YOLOXHead', num_classes=3, in_channels=4, feat_channels=4,
               strides=[8, 16], train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    torch.manual_seed(0)
    return build_head(cfg)


def _meta(h=32, w=32, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(h, w, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def _feats(n=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 4, 4, 4, generator=g), torch.randn(n, 4, 2, 2, generator=g)]


GT = [torch.tensor([[2., 3., 20., 25.], [15., 14., 26., 25.]]),
      torch.tensor([[0., 0., 16., 16.], [2., 17., 14., 30.]])]
LABELS = [torch.tensor([0, 2]), torch.tensor([1, 0])]


def test_state_dict_keys_and_prior_init_as_mmdet():
    head = _head(stacked_convs=2)
    keys = list(head.state_dict())
    level = ['multi_level_cls_convs.{}.0.conv.weight', 'multi_level_cls_convs.{}.0.bn.weight']
    for i in range(2):
        for k in level:
            assert k.format(i) in keys
        for k in ('multi_level_reg_convs.{}.1.bn.running_var', 'multi_level_conv_cls.{}.weight',
                  'multi_level_conv_reg.{}.bias', 'multi_level_conv_obj.{}.bias'):
            assert k.format(i) in keys
    assert 'multi_level_cls_convs.0.0.conv.bias' not in keys  # conv_bias 'auto' with BN
    assert len(keys) == 2 * (2 * 2 * 6 + 6)
    assert head.multi_level_conv_cls[0].out_channels == 3
    assert head.multi_level_conv_reg[1].out_channels == 4
    assert head.multi_level_conv_obj[1].out_channels == 1
    prior = bias_init_with_prob(0.01)
    for conv in (*head.multi_level_conv_cls, *head.multi_level_conv_obj):
        torch.testing.assert_close(conv.bias, torch.full_like(conv.bias, prior))
    assert (head.multi_level_conv_reg[0].bias == 0).all()
    bn = head.multi_level_cls_convs[0][0].bn
    assert (bn.momentum, bn.eps) == (0.03, 0.001)
    assert head.prior_generator.offset == 0 and head.use_l1 is False


def test_forward_shapes_and_depthwise():
    for kw in ({}, dict(use_depthwise=True, stacked_convs=1)):
        cls, reg, obj = _head(**kw)(_feats())
        assert [c.shape for c in cls] == [(2, 3, 4, 4), (2, 3, 2, 2)]
        assert [r.shape for r in reg] == [(2, 4, 4, 4), (2, 4, 2, 2)]
        assert [o.shape for o in obj] == [(2, 1, 4, 4), (2, 1, 2, 2)]


def test_losses_finite_and_l1_switch():
    head = _head()
    losses = head.forward_train(_feats(), [_meta(), _meta()], GT, LABELS)
    assert list(losses) == ['loss_cls', 'loss_bbox', 'loss_obj']
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    head.use_l1 = True
    losses_l1 = head.forward_train(_feats(), [_meta(), _meta()], GT, LABELS)
    assert list(losses_l1) == ['loss_cls', 'loss_bbox', 'loss_obj', 'loss_l1']
    for k in losses:
        torch.testing.assert_close(losses_l1[k], losses[k])
    sum(losses_l1.values()).backward()
    assert all(p.grad is not None for p in head.parameters())


def test_l1_target_is_the_gt_in_raw_output_units():
    head = _head()
    priors = torch.tensor([[8., 8., 8., 8.]])
    target = head._get_l1_target(torch.zeros(1, 4), torch.tensor([[4., 8., 20., 16.]]), priors)
    torch.testing.assert_close(target, torch.tensor([[0.5, 0.5, math.log(2 + 1e-8),
                                                      math.log(1 + 1e-8)]]))


def test_images_without_gt_train_objectness_only():
    head = _head()
    empty = [torch.zeros(0, 4), torch.zeros(0, 4)]
    no_labels = [torch.zeros(0, dtype=torch.long)] * 2
    cls, reg, obj = head(_feats())
    losses = head.loss(cls, reg, obj, empty, no_labels, [_meta(), _meta()])
    assert losses['loss_cls'] == 0 and losses['loss_bbox'] == 0
    # every prior a negative, one positive assumed: the summed BCE against 0
    flat = torch.cat([o.permute(0, 2, 3, 1).reshape(-1) for o in obj])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        flat, torch.zeros_like(flat), reduction='sum')
    torch.testing.assert_close(losses['loss_obj'], expected)


def test_decode_and_get_bboxes_by_hand():
    head = _head(strides=[8], num_classes=2)
    cls = torch.full((1, 2, 2, 2), -10.)
    cls[0, 1, 1, 0] = 10.  # prior (0, 8), class 1
    reg = torch.zeros(1, 4, 2, 2)
    reg[0, 2:, 1, 0] = math.log(2.)  # 16 x 16 around the point
    obj = torch.full((1, 1, 2, 2), 10.)
    (dets, labels), = head.get_bboxes([cls], [reg], [obj], img_metas=[_meta(16, 16)])
    assert labels.tolist() == [1]
    score = torch.sigmoid(torch.tensor(10.)) ** 2
    torch.testing.assert_close(dets, torch.tensor([[-8., 0., 8., 16., float(score)]]))
    (dets2, _), = head.get_bboxes([cls], [reg], [obj], img_metas=[_meta(16, 16, scale=2.)],
                                  rescale=True)
    torch.testing.assert_close(dets2[:, :4], dets[:, :4] / 2)
    meta = dict(_meta(16, 16), scale_factor=2.0)  # one float, as some pipelines give it
    (dets3, _), = head.get_bboxes([cls], [reg], [obj], img_metas=[meta], rescale=True)
    torch.testing.assert_close(dets3, dets2)
    # before NMS: every prior scoring at least score_thr, its best class
    bboxes, scores, labels = head.get_bboxes([cls], [reg], [obj], img_metas=[_meta(16, 16)],
                                             with_nms=False)[0]
    assert bboxes.shape == (1, 4) and scores.shape == (1, ) and labels.tolist() == [1]
    cls[:] = -10.
    (dets, labels), = head.get_bboxes([cls], [reg], [obj], img_metas=[_meta(16, 16)])
    assert dets.shape == (0, 5) and labels.shape == (0, )


def test_max_per_img_where_set():
    head = _head(test_cfg=dict(TEST_CFG, score_thr=0.0, max_per_img=3))
    (dets, labels), = head.simple_test([f[:1] for f in _feats()], [_meta()])
    assert len(dets) == 3 and len(labels) == 3


@pytest.mark.parametrize('mode,reentrant', [('full', False), ('full', True),
                                            ('selective', False), ('offload', False)])
def test_every_checkpoint_mode_is_exact(mode, reentrant):
    def run(head):
        head.zero_grad()
        feats = [f.clone().requires_grad_() for f in base]
        losses = head.forward_train(feats, [_meta(), _meta()], GT, LABELS)
        loss = sum(losses.values())
        loss.backward()
        return (loss.detach(), [f.grad for f in feats],
                {n: p.grad.clone() for n, p in head.named_parameters()},
                {n: b.clone() for n, b in head.named_buffers()})

    base = _feats()
    plain = _head()
    plain.use_l1 = True
    cp = _head(cp_use_reentrant=reentrant)
    cp.use_l1 = True
    cp.load_state_dict(plain.state_dict())
    ref = run(plain)
    assert cp.set_checkpoint_plan({'level*': mode}) == {'level0': mode, 'level1': mode}
    got = run(cp)
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    for a, b in zip(got[1], ref[1]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert all(g.abs().sum() > 0 for g in ref[2].values())
    for name, grad in ref[2].items():
        torch.testing.assert_close(got[2][name], grad, rtol=0, atol=0, msg=name)
    for name, buf in ref[3].items():
        torch.testing.assert_close(got[3][name], buf, rtol=0, atol=0, msg=name)


def test_with_cp_flag_checkpoints_every_level(count_cp):
    head = _head(with_cp=True)
    assert head.checkpoint_plan() == {'level0': 'full', 'level1': 'full'}
    head([f.requires_grad_() for f in _feats()])
    assert count_cp['checkpoints'] == 2


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match='stacked_convs must be a positive int, got 0'):
        _head(stacked_convs=0)
    with pytest.raises(ValueError, match="conv_bias must be 'auto' or a bool, got 'yes'"):
        _head(conv_bias='yes')
    with pytest.raises(UnknownKeyError, match="'test_cfg.nms_pre'"):
        _head(test_cfg=dict(TEST_CFG, nms_pre=10))
    with pytest.raises(UnknownKeyError, match="'train_cfg.sampler'"):
        _head(train_cfg=dict(TRAIN_CFG, sampler=dict(type='PseudoSampler')))
    with pytest.raises(ValueError, match='expects 2 levels'):
        _head()(_feats()[:1])
    with pytest.raises(ValueError, match='needs train_cfg'):
        head = _head(train_cfg=None)
        head.loss(*head(_feats()), GT, LABELS, [_meta(), _meta()])


def test_aug_test_merges_the_views_before_nms():
    """mmdet's YOLOXHead ignored with_nms=False, so its test-time augmentation could not merge
    views; here one view twice gives the single view's detections."""
    head = _head(test_cfg=dict(TEST_CFG, score_thr=0.0))
    feats = [f[:1] for f in _feats()]
    (single, labels), = head.simple_test(feats, [_meta()])
    (merged, merged_labels), = head.aug_test([feats, feats], [[_meta()], [_meta()]])
    torch.testing.assert_close(merged, single)
    assert merged_labels.tolist() == labels.tolist()
