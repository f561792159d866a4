import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector, build_hook
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)

TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _cfg(with_cp=False, num_classes=3, anchor_type='anchor_free'):
    """mmdet's tood_r50_fpn_1x_coco.py model with tiny channels."""
    return dict(
        type='TOOD',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_output', num_outs=5),
        bbox_head=dict(
            type='TOODHead', num_classes=num_classes, in_channels=16, stacked_convs=2,
            feat_channels=16, anchor_type=anchor_type,
            norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
            anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                  scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                            target_stds=[0.1, 0.1, 0.2, 0.2]),
            initial_loss_cls=dict(type='FocalLoss', use_sigmoid=True, activated=True,
                                  gamma=2.0, alpha=0.25, loss_weight=1.0),
            loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, activated=True, beta=2.0,
                          loss_weight=1.0),
            loss_bbox=dict(type='GIoULoss', loss_weight=2.0), with_cp=with_cp),
        train_cfg=dict(initial_epoch=4, initial_assigner=dict(type='ATSSAssigner', topk=9),
                       assigner=dict(type='TaskAlignedAssigner', topk=13), alpha=1, beta=6,
                       allowed_border=-1, pos_weight=-1, debug=False),
        test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_state_dict_keys_match_mmdet():
    keys = set(_model().state_dict())
    assert {'bbox_head.inter_convs.0.conv.weight', 'bbox_head.cls_decomp.layer_attention.0.weight',
            'bbox_head.tood_cls.weight', 'bbox_head.reg_offset_module.2.bias',
            'bbox_head.scales.4.scale'} <= keys


@pytest.mark.parametrize('anchor_type', ['anchor_free', 'anchor_based'])
def test_train_step_switches_at_the_initial_epoch(anchor_type, tmp_path):
    from tests.helpers.hook_fakes import FakeRunner
    model = _model(anchor_type=anchor_type)
    batch = det_batch()
    runner = FakeRunner(tmp_path, model=model)
    hook = build_hook(dict(type='SetEpochInfoHook'))
    logs = []
    for epoch in (0, 4):
        runner.epoch = epoch
        hook.before_train_epoch(runner)
        assert model.bbox_head.epoch == epoch
        model.zero_grad()
        out = model.train_step(copy.deepcopy(batch), None)
        assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss'}
        assert all(np.isfinite(v) for v in out['log_vars'].values())
        out['loss'].backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters()
                   if p.grad is not None)
        logs.append(out['log_vars'])
    assert logs[0]['loss_cls'] != logs[1]['loss_cls']  # another loss, other targets
    model.zero_grad()
    out = model.train_step({k: v[1:] for k, v in batch.items()}, None)
    assert out['log_vars']['loss_bbox'] == 0
    out['loss'].backward()


@pytest.mark.parametrize('epoch', [0, 4])
def test_with_cp_gives_identical_losses_grads_and_buffers(epoch):
    batch = det_batch()
    plain, cp = _model(), _model(with_cp=True)
    cp.load_state_dict(plain.state_dict())
    outs = []
    for model in (plain, cp):
        model.set_epoch(epoch)
        model.zero_grad()
        out = model.train_step(copy.deepcopy(batch), None)
        out['loss'].backward()
        outs.append((out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                                       if p.grad is not None}))
    assert outs[1][0] == pytest.approx(outs[0][0], rel=1e-6, abs=0)
    assert outs[1][1].keys() == outs[0][1].keys()
    for name, grad in outs[0][1].items():
        torch.testing.assert_close(outs[1][1][name], grad, rtol=1e-5, atol=1e-7, msg=name)
    for (name, buf), buf_cp in zip(plain.named_buffers(), cp.buffers()):
        torch.testing.assert_close(buf_cp, buf, rtol=1e-6, atol=0, msg=name)


def test_simple_test_format():
    model = _model()
    model.bbox_head.test_cfg = dict(TEST_CFG, score_thr=0.0)
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2
    for per_image in results:
        assert len(per_image) == 3 and sum(len(r) for r in per_image) > 0
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5


def test_fp16_train_step_is_finite():
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_model())
    model.set_epoch(4)
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
