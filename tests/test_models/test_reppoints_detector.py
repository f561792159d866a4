import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.detectors import det_batch

TRAIN_CFG = dict(
    init=dict(assigner=dict(type='PointAssigner', scale=4, pos_num=1), allowed_border=-1,
              pos_weight=-1, debug=False),
    refine=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                              min_pos_iou=0, ignore_iof_thr=-1),
                allowed_border=-1, pos_weight=-1, debug=False))
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _cfg(with_cp=False, **head):
    return dict(
        type='RepPointsDetector',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='RepPointsHead', num_classes=3, in_channels=16, feat_channels=16,
            point_feat_channels=16, stacked_convs=2, num_points=9, gradient_mul=0.1,
            point_strides=[8, 16, 32, 64, 128], point_base_scale=4,
            norm_cfg=dict(type='BN', requires_grad=True),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox_init=dict(type='SmoothL1Loss', beta=0.11, loss_weight=0.5),
            loss_bbox_refine=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0),
            **dict(dict(transform_method='moment', with_cp=with_cp), **head)),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    model = build_detector(_cfg(**kw))
    # spread the point sets: the refinement then finds positives
    with torch.no_grad():
        model.bbox_head.reppoints_pts_init_out.bias.normal_(0, 1)
    return randomise_bn(model)


def test_state_dict_keys_match_mmdet():
    keys = set(_model().state_dict())
    assert {'backbone.layer1.0.conv1.weight', 'neck.fpn_convs.4.conv.weight',
            'bbox_head.cls_convs.0.conv.weight', 'bbox_head.cls_convs.0.bn.running_var',
            'bbox_head.reppoints_cls_conv.weight', 'bbox_head.reppoints_pts_refine_out.bias',
            'bbox_head.moment_transfer'} <= keys
    assert [n for n in _model().checkpoint_units() if n.startswith('bbox_head')] == \
        [f'bbox_head.level{i}' for i in range(5)]


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


@pytest.mark.parametrize('head', [dict(), dict(use_grid_points=True, transform_method='minmax')])
def test_train_step_reaches_every_parameter(head):
    model = _model(**head)
    log, grads = _loss_and_grads(model, det_batch())
    assert set(log) == {'loss_cls', 'loss_pts_init', 'loss_pts_refine', 'loss'}
    assert all(np.isfinite(v) for v in log.values())
    assert log['loss_pts_init'] > 0 and log['loss_pts_refine'] > 0
    assert set(grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_every_checkpoint_mode_is_exact():
    batch = det_batch()
    plain = _model()
    buffers_before = {n: b.clone() for n, b in plain.named_buffers()}
    log_ref, grads_ref = _loss_and_grads(plain, batch)
    buffers_ref = {n: b.clone() for n, b in plain.named_buffers()}
    for mode in ('full', 'selective', 'offload'):
        cp = _model(with_cp=mode == 'full')
        cp.load_state_dict(dict(plain.state_dict(), **buffers_before))
        if mode != 'full':
            cp.set_checkpoint_plan({'bbox_head.*': mode, 'backbone.*': mode})
        log, grads = _loss_and_grads(cp, batch)
        assert log == log_ref, mode
        assert grads.keys() == grads_ref.keys()
        for name, g in grads_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=0, atol=0, msg=f'{mode} {name}')
        for name, b in cp.named_buffers():
            torch.testing.assert_close(b, buffers_ref[name], rtol=0, atol=0, msg=name)


def test_fp16_train_step_is_finite():
    model = wrap_fp16_model(_model())
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_simple_test_format():
    model = _model()
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2
    for per_image, meta in zip(results, batch['img_metas']):
        assert len(per_image) == 3 and sum(len(r) for r in per_image) > 0
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5
            h, w = meta['img_shape'][:2]
            assert (dets[:, :4] >= 0).all() and (dets[:, [0, 2]] <= w).all() \
                and (dets[:, [1, 3]] <= h).all()
