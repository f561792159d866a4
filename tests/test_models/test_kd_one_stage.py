"""KnowledgeDistillationSingleStageDetector (LD): a tiny GFL teacher and LDHead student."""
import copy
import os
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.models.detectors.kd_one_stage import resolve_teacher_config
from ckptzoo.registry import build_detector
from ckptzoo.runner.checkpoint_match import CheckpointMismatch
from ckptzoo.utils.config_file import building_from
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.checkpointing import randomise_bn
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)

TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=100)


def _parts(head_type, depth=18, with_cp=False, channels=16):
    backbone = dict(type='ResNet', depth=depth, base_channels=8, out_indices=(0, 1, 2, 3),
                    norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                    style='pytorch', with_cp=with_cp)
    neck = dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=channels, start_level=1,
                add_extra_convs='on_output', num_outs=5)
    head = dict(type=head_type, num_classes=3, in_channels=channels, stacked_convs=1,
                feat_channels=channels, norm_cfg=dict(type='GN', num_groups=4,
                                                      requires_grad=True),
                anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                      scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
                loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0,
                              loss_weight=1.0),
                loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25), reg_max=16,
                loss_bbox=dict(type='GIoULoss', loss_weight=2.0), with_cp=with_cp)
    if head_type == 'LDHead':
        head['loss_ld'] = dict(type='KnowledgeDistillationKLDivLoss', loss_weight=0.25, T=10)
    return dict(backbone=backbone, neck=neck, bbox_head=head, train_cfg=TRAIN_CFG,
                test_cfg=TEST_CFG)


def teacher_model_cfg():
    return dict(type='GFL', **_parts('GFLHead', channels=24))


def _cfg(teacher_config=None, teacher_ckpt=None, with_cp=False, **kw):
    if teacher_config is None:
        teacher_config = dict(model=teacher_model_cfg())
    return dict(type='KnowledgeDistillationSingleStageDetector', teacher_config=teacher_config,
                teacher_ckpt=teacher_ckpt, **_parts('LDHead', with_cp=with_cp), **kw)


def _model(**kw):
    torch.manual_seed(0)
    model = randomise_bn(build_detector(_cfg(**kw)))
    randomise_bn(model.teacher_model, seed=5)
    return model


def test_the_teacher_is_outside_the_state_dict_parameters_and_plan():
    model = _model()
    assert type(model.teacher_model).__name__ == 'GFL'
    assert not any(k.startswith('teacher') for k in model.state_dict())
    assert not any(n.startswith('teacher') for n, _ in model.named_parameters())
    assert not any(n.startswith('teacher') for n in model.checkpoint_units())
    assert all(m is not model.teacher_model for m in model.modules())
    assert model.train() is model
    assert not model.teacher_model.training and model.bbox_head.training
    model.eval()
    assert not model.teacher_model.training
    free = _model(eval_teacher=False)
    free.train()
    assert free.teacher_model.training
    model.double()
    assert model.teacher_model.bbox_head.gfl_reg.weight.dtype == torch.float64


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


def test_train_step_every_checkpoint_mode_and_simple_test():
    batch = det_batch()
    plain = _model()
    buffers = {n: b.clone() for n, b in plain.named_buffers()}
    teacher_buffers = {n: b.clone() for n, b in plain.teacher_model.named_buffers()}
    log_ref, grads_ref = _loss_and_grads(plain, batch)
    assert set(log_ref) == {'loss_cls', 'loss_bbox', 'loss_dfl', 'loss_ld', 'loss'}
    assert all(np.isfinite(v) for v in log_ref.values()) and log_ref['loss_ld'] > 0
    assert set(grads_ref) == {n for n, p in plain.named_parameters() if p.requires_grad}
    assert all(p.grad is None for p in plain.teacher_model.parameters())
    for n, b in plain.teacher_model.named_buffers():  # eval mode: BN statistics untouched
        torch.testing.assert_close(b, teacher_buffers[n], rtol=0, atol=0)
    for mode in ('full', 'selective', 'offload'):
        cp = _model(with_cp=mode == 'full')
        cp.load_state_dict(dict(plain.state_dict(), **buffers))
        cp.teacher_model.load_state_dict(dict(plain.teacher_model.state_dict(),
                                              **teacher_buffers))
        if mode != 'full':
            cp.set_checkpoint_plan({'bbox_head.*': mode, 'backbone.*': mode, 'neck.*': mode})
        log, grads = _loss_and_grads(cp, batch)
        assert log == log_ref, mode
        for name, g in grads_ref.items():
            torch.testing.assert_close(grads[name], g, rtol=0, atol=0, msg=f'{mode} {name}')
        for name, b in plain.named_buffers():
            torch.testing.assert_close(dict(cp.named_buffers())[name], b, rtol=0, atol=0)
    plain.eval()
    with torch.no_grad():
        results = plain.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.shape[1] == 5 and d.dtype == np.float32 for r in results for d in r)
    assert sum(len(d) for d in results[0]) > 0


def _teacher_file(tmp_path, bump=1.):
    teacher = _model().teacher_model
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(bump)
    path = str(tmp_path / 'teacher.pth')
    torch.save({'state_dict': teacher.state_dict()}, path)
    return teacher, path


def test_init_weights_or_the_first_step_loads_teacher_ckpt(tmp_path):
    teacher, path = _teacher_file(tmp_path)
    loaded = _model(teacher_ckpt=path)
    loaded.init_weights()
    torch.testing.assert_close(loaded.teacher_model.bbox_head.gfl_reg.weight,
                               teacher.bbox_head.gfl_reg.weight)
    lazy = _model(teacher_ckpt=path)  # no init_weights: the first forward_train reads it
    assert not lazy.teacher_loaded
    lazy.train_step(det_batch(), None)
    assert lazy.teacher_loaded
    torch.testing.assert_close(lazy.teacher_model.bbox_head.gfl_reg.weight,
                               teacher.bbox_head.gfl_reg.weight)


def test_a_missing_teacher_ckpt_fails_only_when_weights_are_loaded(tmp_path):
    missing = str(tmp_path / 'nowhere' / 'gfl.pth')
    with torch.device('meta'):
        build_detector(_cfg(teacher_ckpt=missing))  # a config builds without the file
    model = _model(teacher_ckpt=missing)
    with pytest.raises(FileNotFoundError, match='teacher_ckpt.*nowhere/gfl.pth.*put the file'):
        model.init_weights()
    with pytest.raises(FileNotFoundError, match='teacher_ckpt'):
        model.train_step(det_batch(), None)
    url = 'https://download.openmmlab.com/mmdetection/v2.0/gfl/no_such_gfl_teacher.pth'
    with pytest.raises(FileNotFoundError, match='no_such_gfl_teacher.pth.*torch hub cache'):
        _model(teacher_ckpt=url).init_weights()


def test_a_checkpoint_of_another_model_names_the_keys(tmp_path):
    student = _model()
    path = str(tmp_path / 'student.pth')  # the student's weights: other head, other widths
    torch.save({'state_dict': student.state_dict()}, path)
    with pytest.raises(CheckpointMismatch, match='student.pth is not a checkpoint of the '
                       'teacher.*shape mismatches: neck.lateral_convs.0.conv.weight'):
        _model(teacher_ckpt=path).init_weights()
    partial = {k: v for k, v in _model().teacher_model.state_dict().items()
               if not k.startswith('bbox_head.gfl_reg')}
    torch.save(partial, path)
    with pytest.raises(CheckpointMismatch, match='missing.*bbox_head.gfl_reg.weight'):
        _model(teacher_ckpt=path).init_weights()


def _write_configs(root):
    os.makedirs(osp.join(root, 'configs', 'gfl'))
    os.makedirs(osp.join(root, 'configs', 'ld'))
    with open(osp.join(root, 'configs', 'gfl', 'teacher.py'), 'w') as f:
        f.write(f'model = {teacher_model_cfg()!r}\n')
    student = osp.join(root, 'configs', 'ld', 'student.py')
    with open(student, 'w') as f:
        f.write(f"model = {_cfg(teacher_config='configs/gfl/teacher.py')!r}\n")
    return student


def test_teacher_config_paths_relative_to_the_repository(tmp_path, monkeypatch):
    student = _write_configs(str(tmp_path / 'repo'))
    cfg = Config.fromfile(student)
    monkeypatch.chdir(tmp_path)  # not the repository root: cwd-relative fails
    with pytest.raises(FileNotFoundError, match="teacher_config 'configs/gfl/teacher.py' not "
                       'found.*absolute path'):
        build_detector(copy.deepcopy(cfg.model))
    with building_from(student), torch.device('meta'):
        model = build_detector(copy.deepcopy(cfg.model))
    assert type(model.teacher_model).__name__ == 'GFL'
    from ckptzoo.apis.train import build_train_model  # marks the build with cfg.filename
    assert build_train_model(cfg).teacher_model.bbox_head.feat_channels == 24
    monkeypatch.chdir(tmp_path / 'repo')  # as mmdet: relative to the working directory
    assert resolve_teacher_config('configs/gfl/teacher.py') == 'configs/gfl/teacher.py'
    assert build_detector(copy.deepcopy(cfg.model)).teacher_model is not None


def test_bad_teacher_config():
    with pytest.raises(TypeError, match='teacher_config must be a config file path or a '
                       'config'):
        build_detector(_cfg(teacher_config=dict(type='GFL')))
    with pytest.raises(FileNotFoundError, match='teacher_config'):
        build_detector(_cfg(teacher_config='/no/such/teacher.py'))
    with pytest.raises(TypeError, match='one-stage detector'):
        build_detector(_cfg(teacher_config=dict(model=dict(type='ResNet', depth=18))))
