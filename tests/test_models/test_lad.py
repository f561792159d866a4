import copy

import numpy as np
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.detectors import det_batch

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.1, neg_iou_thr=0.1,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0, score_voting=True,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _head():
    return dict(type='LADHead', reg_decoded_bbox=True, score_voting=True, topk=9, num_classes=3,
                in_channels=16, stacked_convs=1, feat_channels=16,
                norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
                anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                      scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                                target_stds=[0.1, 0.1, 0.2, 0.2]),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                              loss_weight=1.0),
                loss_bbox=dict(type='GIoULoss', loss_weight=1.3),
                loss_centerness=dict(type='CrossEntropyLoss', use_sigmoid=True,
                                     loss_weight=0.5))


def _cfg(teacher_ckpt=None, with_cp=False):
    backbone = dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                    norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                    style='pytorch')
    neck = dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                add_extra_convs='on_output', num_outs=5)
    return dict(type='LAD', backbone=dict(backbone, with_cp=with_cp), neck=neck,
                bbox_head=dict(_head(), with_cp=with_cp),
                teacher_backbone=backbone, teacher_neck=neck, teacher_bbox_head=_head(),
                teacher_ckpt=teacher_ckpt, train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return randomise_bn(build_detector(_cfg(**kw)))


def test_the_teacher_is_frozen_outside_the_state_dict(tmp_path):
    model = _model()
    assert not any(k.startswith('teacher') for k in model.state_dict())
    assert all(not n.startswith('teacher') for n, _ in model.named_parameters())
    assert not any(n.startswith('teacher') for n in model.checkpoint_units())
    model.train()
    assert not model.teacher_model.training and model.bbox_head.training
    model.double()
    assert model.teacher_model.bbox_head.atss_cls.weight.dtype == torch.float64
    # init_weights loads teacher_ckpt
    teacher = _model().teacher_model
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(1.)
    torch.save({'state_dict': teacher.state_dict()}, tmp_path / 'teacher.pth')
    loaded = _model(teacher_ckpt=str(tmp_path / 'teacher.pth'))
    loaded.init_weights()
    torch.testing.assert_close(loaded.teacher_model.bbox_head.atss_cls.weight,
                               teacher.bbox_head.atss_cls.weight)


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


def test_train_step_and_every_checkpoint_mode_is_exact():
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
        cp.teacher_model.load_state_dict(plain.teacher_model.state_dict())
        if mode != 'full':
            cp.set_checkpoint_plan({'bbox_head.*': mode, 'backbone.*': mode})
        log, grads = _loss_and_grads(cp, batch)
        assert log == log_ref, mode
        for name, g in grads_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=0, atol=0, msg=f'{mode} {name}')


def test_simple_test_is_the_students():
    model = _model()
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert sum(len(d) for d in results[0]) > 0


def test_a_bad_teacher_ckpt_fails_when_weights_are_loaded(tmp_path):
    import pytest
    from ckptzoo.runner.checkpoint_match import CheckpointMismatch
    missing = str(tmp_path / 'paa_teacher.pth')
    with torch.device('meta'):
        build_detector(_cfg(teacher_ckpt=missing))  # builds without the file
    with pytest.raises(FileNotFoundError, match='LAD teacher_ckpt.*paa_teacher.pth'):
        _model(teacher_ckpt=missing).init_weights()
    student = _model()
    torch.save({'state_dict': {k: v for k, v in student.state_dict().items()
                               if not k.startswith('bbox_head.atss_cls')}}, missing)
    with pytest.raises(CheckpointMismatch, match='missing.*bbox_head.atss_cls.weight'):
        _model(teacher_ckpt=missing).init_weights()
    torch.save({'state_dict': student.teacher_model.state_dict()}, missing)
    lazy = _model(teacher_ckpt=missing)  # without init_weights: read by the first step
    lazy.train_step(det_batch(), None)
    assert lazy.teacher_loaded
