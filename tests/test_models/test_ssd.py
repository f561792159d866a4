"""SSD end to end: mmdet 2.x's SSD is a ``SingleStageDetector`` with an ``SSDHead`` (here on a
tiny ResNet-18 and SSDNeck, 64 px images)."""
import copy
import warnings

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                               min_pos_iou=0., ignore_iof_thr=-1, gt_max_assign_all=False),
                 smoothl1_beta=1., allowed_border=-1, pos_weight=-1, neg_pos_ratio=3,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, nms=dict(type='nms', iou_threshold=0.45), min_bbox_size=0,
                score_thr=0.02, max_per_img=200)


def _cfg(with_cp=False, depthwise=False):
    head = dict(type='SSDHead', num_classes=3, in_channels=(16, 32, 16, 16),
                anchor_generator=dict(type='SSDAnchorGenerator', scale_major=False,
                                      strides=[8, 16, 32, 64], ratios=[[2], [2, 3], [2], [2]],
                                      min_sizes=[8, 16, 32, 48], max_sizes=[16, 32, 48, 64]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                                target_stds=[0.1, 0.1, 0.2, 0.2]), with_cp=with_cp)
    if depthwise:
        head.update(use_depthwise=True, norm_cfg=dict(type='BN'), act_cfg=dict(type='ReLU6'))
    return dict(
        type='SingleStageDetector',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='SSDNeck', in_channels=(16, 32), out_channels=(16, 32, 16, 16),
                  level_strides=(2, 2), level_paddings=(1, 1), l2_norm_scale=20),
        bbox_head=head, train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_keys_as_mmdet_and_units():
    model = _model(depthwise=True)
    keys = set(model.state_dict())
    assert {'neck.l2_norm.weight', 'bbox_head.cls_convs.0.0.conv.weight',
            'bbox_head.cls_convs.3.1.weight', 'bbox_head.reg_convs.1.0.bn.running_mean'} <= keys
    units = list(model.checkpoint_units())
    assert [u for u in units if u.startswith('bbox_head')] == [
        f'bbox_head.level{i}' for i in range(4)]


@pytest.mark.parametrize('depthwise', [False, True])
def test_train_step_and_simple_test(depthwise):
    model = _model(depthwise=depthwise)
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_bbox'] > 0
    out['loss'].backward()
    grads = {n: p.grad for n, p in model.named_parameters()
             if not n.startswith('backbone.layer4')}  # past the last output: never run
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    model.eval()
    model.bbox_head.test_cfg = dict(TEST_CFG, score_thr=0.0)
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    for per_image in results:
        assert sum(len(d) for d in per_image) > 0
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5


def test_with_cp_gives_identical_losses_and_grads():
    batch = det_batch()
    plain, cp = _model(), _model(with_cp=True)
    cp.load_state_dict(plain.state_dict())
    results = []
    for model in (plain, cp):
        model.zero_grad()
        out = model.train_step(copy.deepcopy(batch), None)
        out['loss'].backward()
        results.append((out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                                          if p.grad is not None}))
    (log_p, g_p), (log_c, g_c) = results
    assert log_c == pytest.approx(log_p, rel=1e-6, abs=0)
    assert g_c.keys() == g_p.keys()
    for name, grad in g_p.items():
        torch.testing.assert_close(g_c[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    for (name, buf), buf_cp in zip(plain.named_buffers(), cp.buffers()):
        torch.testing.assert_close(buf_cp, buf, rtol=1e-6, atol=0, msg=name)


def test_overfits_one_batch():
    model = _model()
    batch = det_batch()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(15):
        out = model.train_step(copy.deepcopy(batch), opt)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        first = out['log_vars']['loss'] if first is None else first
    assert out['log_vars']['loss'] < 0.7 * first


def test_fp16_train_step_is_finite():
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_model())
    assert model.bbox_head.fp16_enabled
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_of_the_whole_model_is_exact(mode):
    """Losses, every gradient and BN buffers under ``{'*': mode}`` equal the plain run's
    (float64)."""
    batch = det_batch()
    batch['img'] = batch['img'].double()
    plain = _model().double()
    planned = copy.deepcopy(plain)
    planned.set_checkpoint_plan({'*': mode})
    runs = []
    for model in (plain, planned):
        model.zero_grad()
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            out = model.train_step(copy.deepcopy(batch), None)
        out['loss'].backward()
        runs.append((out['log_vars'], {n: p.grad for n, p in model.named_parameters()},
                     {n: b.clone() for n, b in model.named_buffers()}))
    (log_p, g_p, b_p), (log_c, g_c, b_c) = runs
    assert log_c == pytest.approx(log_p, rel=1e-12, abs=0)
    for name, grad in g_p.items():
        if grad is None:
            assert g_c[name] is None, name
        else:
            torch.testing.assert_close(g_c[name], grad, rtol=0, atol=1e-10, msg=name)
    for name, buf in b_p.items():
        torch.testing.assert_close(b_c[name], buf, rtol=0, atol=0, msg=name)
