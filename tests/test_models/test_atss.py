import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _cfg(with_cp=False, num_classes=3):
    """mmdet's atss_r50_fpn_1x_coco.py model with tiny channels."""
    return dict(
        type='ATSS',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_output', num_outs=5),
        bbox_head=dict(
            type='ATSSHead', num_classes=num_classes, in_channels=16, stacked_convs=2,
            feat_channels=16, norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
            anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                  scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                            target_stds=[0.1, 0.1, 0.2, 0.2]),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type='GIoULoss', loss_weight=2.0),
            loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
            with_cp=with_cp),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_state_dict_keys_match_mmdet():
    keys = set(_model().state_dict())
    assert {'backbone.conv1.weight', 'neck.fpn_convs.4.conv.weight',
            'bbox_head.cls_convs.0.conv.weight', 'bbox_head.cls_convs.0.gn.weight',
            'bbox_head.atss_cls.weight', 'bbox_head.atss_reg.bias',
            'bbox_head.atss_centerness.weight', 'bbox_head.scales.4.scale'} <= keys


def test_train_step_with_and_without_boxes():
    model = _model()
    batch = det_batch()
    out = model.train_step(batch, None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss_centerness', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_bbox'] > 0 and out['log_vars']['loss_centerness'] > 0
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.zero_grad()
    empty = {k: v[1:] for k, v in batch.items()}
    out = model.train_step(empty, None)
    assert out['log_vars']['loss_bbox'] == 0 and np.isfinite(out['log_vars']['loss_cls'])
    out['loss'].backward()


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


def test_with_cp_gives_identical_losses_grads_and_buffers():
    batch = det_batch()
    plain, cp = _model(), _model(with_cp=True)
    cp.load_state_dict(plain.state_dict())
    assert 'bbox_head.level4' in cp.checkpoint_plan()
    log_plain, grads_plain = _loss_and_grads(plain, batch)
    log_cp, grads_cp = _loss_and_grads(cp, batch)
    assert log_cp == pytest.approx(log_plain, rel=1e-6, abs=0)
    assert grads_cp.keys() == grads_plain.keys()
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_cp[name], grad, rtol=1e-5, atol=1e-7, msg=name)
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


def test_overfits_one_batch():
    model = _model()
    batch = det_batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    first = None
    for _ in range(8):
        opt.zero_grad()
        out = model.train_step(copy.deepcopy(batch), None)
        out['loss'].backward()
        opt.step()
        first = first if first is not None else out['log_vars']['loss']
    assert out['log_vars']['loss'] < first


def test_fp16_train_step_is_finite():
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_model())
    dtypes = []
    model.bbox_head.atss_reg.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = model.train_step(det_batch(), None)
    assert set(dtypes) == {torch.float16} and out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_with_a_dyhead_neck_as_mmdets_dyhead_configs():
    """dyhead/atss_*: the FPN then a DyHead, the head without its own convs."""
    cfg = _cfg()
    cfg['neck'] = [cfg['neck'], dict(type='DyHead', in_channels=16, out_channels=16,
                                     num_blocks=2)]
    cfg['bbox_head'].update(stacked_convs=0, pred_kernel_size=1)
    torch.manual_seed(0)
    model = build_detector(cfg)
    units = list(model.checkpoint_units())
    assert 'neck.1.block0' in units and 'neck.1.block1' in units
    assert 'bbox_head.cls_convs.0.conv.weight' not in model.state_dict()
    out = model.train_step(det_batch(), None)
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert model.neck[1].dyhead_blocks[0].spatial_conv_offset.weight.grad.abs().sum() > 0
