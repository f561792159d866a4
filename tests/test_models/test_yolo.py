"""YOLOV3 end to end (a tiny ResNet-18, YOLOV3Neck and YOLOV3Head, 64 px images)."""
import copy
import warnings

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_CFG = dict(assigner=dict(type='GridAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5,
                               min_pos_iou=0))
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05, conf_thr=0.005,
                nms=dict(type='nms', iou_threshold=0.45), max_per_img=100)


def _cfg(with_cp=False):
    return dict(
        type='YOLOV3',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='YOLOV3Neck', num_scales=3, in_channels=[64, 32, 16],
                  out_channels=[16, 8, 4]),
        bbox_head=dict(
            type='YOLOV3Head', num_classes=3, in_channels=[16, 8, 4], out_channels=[16, 8, 8],
            anchor_generator=dict(type='YOLOAnchorGenerator',
                                  base_sizes=[[(40, 30), (50, 60), (64, 64)],
                                              [(12, 20), (20, 15), (20, 40)],
                                              [(4, 5), (6, 10), (11, 8)]],
                                  strides=[32, 16, 8]),
            bbox_coder=dict(type='YOLOBBoxCoder'), featmap_strides=[32, 16, 8],
            loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0,
                          reduction='sum'),
            loss_conf=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0,
                           reduction='sum'),
            loss_xy=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=2.0,
                         reduction='sum'),
            loss_wh=dict(type='MSELoss', loss_weight=2.0, reduction='sum'), with_cp=with_cp),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_keys_as_mmdet_and_units():
    model = _model()
    keys = set(model.state_dict())
    assert {'neck.detect1.conv1.conv.weight', 'bbox_head.convs_bridge.0.conv.weight',
            'bbox_head.convs_bridge.2.bn.running_var', 'bbox_head.convs_pred.1.bias'} <= keys
    assert [u for u in model.checkpoint_units() if u.startswith('bbox_head')] == [
        'bbox_head.level0', 'bbox_head.level1', 'bbox_head.level2']


def test_train_step_and_simple_test():
    model = _model()
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_conf', 'loss_xy', 'loss_wh', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters() if p.requires_grad)
    model.eval()
    model.bbox_head.test_cfg = dict(TEST_CFG, score_thr=0.0, conf_thr=0.0)
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
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            out = model.train_step(copy.deepcopy(batch), None)
        out['loss'].backward()
        results.append((out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                                          if p.grad is not None}))
    (log_p, g_p), (log_c, g_c) = results
    assert log_c == pytest.approx(log_p, rel=1e-6, abs=0)
    assert g_c.keys() == g_p.keys()
    for name, grad in g_p.items():
        torch.testing.assert_close(g_c[name], grad, rtol=1e-5, atol=1e-6, msg=name)
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
    assert out['log_vars']['loss'] < 0.85 * first


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
