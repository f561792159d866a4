import copy

import numpy as np
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.detectors import det_batch

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.1, neg_iou_thr=0.1,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _model(with_cp=False):
    torch.manual_seed(0)
    model = build_detector(dict(
        type='PAA',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_output', num_outs=5),
        bbox_head=dict(
            type='PAAHead', reg_decoded_bbox=True, score_voting=True, topk=9, num_classes=3,
            in_channels=16, stacked_convs=2, feat_channels=16,
            norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
            anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                  scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                            target_stds=[0.1, 0.1, 0.2, 0.2]),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type='GIoULoss', loss_weight=1.3),
            loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=0.5),
            with_cp=with_cp),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG))
    return randomise_bn(model)


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


def test_train_step_reaches_every_parameter_and_every_mode_is_exact():
    batch = det_batch()
    plain = _model()
    buffers = {n: b.clone() for n, b in plain.named_buffers()}
    log_ref, grads_ref = _loss_and_grads(plain, batch)
    assert set(log_ref) == {'loss_cls', 'loss_bbox', 'loss_iou', 'loss'}
    assert all(np.isfinite(v) for v in log_ref.values()) and log_ref['loss_bbox'] > 0
    assert set(grads_ref) == {n for n, p in plain.named_parameters() if p.requires_grad}
    for mode in ('full', 'selective', 'offload'):
        cp = _model(with_cp=mode == 'full')
        cp.load_state_dict(dict(plain.state_dict(), **buffers))
        if mode != 'full':
            cp.set_checkpoint_plan({'bbox_head.*': mode, 'backbone.*': mode})
        log, grads = _loss_and_grads(cp, batch)
        assert log == log_ref, mode
        for name, g in grads_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=0, atol=0, msg=f'{mode} {name}')
        for name, b in cp.named_buffers():
            torch.testing.assert_close(b, dict(plain.named_buffers())[name], rtol=0, atol=0)


def test_simple_test_format():
    model = _model()
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2
    for per_image in results:
        assert len(per_image) == 3 and sum(len(r) for r in per_image) > 0
        assert all(d.dtype == np.float32 and d.shape[1] == 5 for d in per_image)
