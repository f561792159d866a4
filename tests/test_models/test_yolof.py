"""YOLOF end to end on a tiny caffe-style ResNet-18 C5 / DilatedEncoder from an mmdet-schema
config (mmdet 2.28.2's ``yolof/`` settings): losses, backward, ``simple_test`` format, and
the head's level unit exact under ``with_cp``."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def yolof_cfg(with_cp=False):
    return dict(
        type='YOLOF',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(3, ),
                      frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=False),
                      norm_eval=True, style='caffe'),
        neck=dict(type='DilatedEncoder', in_channels=64, out_channels=32,
                  block_mid_channels=8, num_residual_blocks=2, block_dilations=[2, 4]),
        bbox_head=dict(
            type='YOLOFHead', num_classes=3, in_channels=32, reg_decoded_bbox=True,
            with_cp=with_cp,
            anchor_generator=dict(type='AnchorGenerator', ratios=[1.0],
                                  scales=[1, 2, 4, 8, 16], strides=[32]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                            target_stds=[1.] * 4, add_ctr_clamp=True, ctr_clamp=32),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type='GIoULoss', loss_weight=1.0)),
        train_cfg=dict(assigner=dict(type='UniformAssigner', pos_ignore_thr=0.15,
                                     neg_ignore_thr=0.7),
                       allowed_border=-1, pos_weight=-1, debug=False),
        test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                      nms=dict(type='nms', iou_threshold=0.6), max_per_img=100))


def test_train_step_and_simple_test():
    torch.manual_seed(0)
    model = build_detector(yolof_cfg())
    assert 'bbox_head.level0' in model.checkpoint_units()
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert model.bbox_head.bbox_pred.weight.grad.abs().sum() > 0
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.dtype == np.float32 and d.shape[1] == 5 for r in results for d in r)


def test_with_cp_is_exact():
    batch = det_batch()
    runs = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        model = build_detector(yolof_cfg(with_cp))
        out = model.train_step(batch, None)
        out['loss'].backward()
        runs.append(({n: p.grad for n, p in model.named_parameters() if p.grad is not None},
                     {n: b.clone() for n, b in model.named_buffers()}))
    for a, b in zip(*runs):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_fp16_train_step_is_finite():
    """mmdet's 1e8 clamp of the exponentials fails in half precision; ours clamps at the
    dtype's largest value."""
    from ckptzoo.runner.fp16 import wrap_fp16_model
    torch.manual_seed(0)
    model = wrap_fp16_model(build_detector(yolof_cfg()))
    out = model.train_step(det_batch(), None)
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
