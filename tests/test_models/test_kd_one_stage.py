"""KnowledgeDistillationSingleStageDetector (LD, mmdet 2.28.2's): a tiny GFL teacher and LD
student from mmdet-schema configs; the teacher outside the student's state dict, units and
parameters but moved with it and kept in eval mode; its checkpoint loaded (a missing file or
another model's checkpoint refused, naming the file); a train step, simple_test format."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from ckptzoo.runner.checkpoint import save_checkpoint
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)

HEAD = dict(in_channels=16, stacked_convs=1, feat_channels=16,
            norm_cfg=dict(type='GN', num_groups=4, requires_grad=True),
            anchor_generator=dict(type='AnchorGenerator', ratios=[1.0], octave_base_scale=8,
                                  scales_per_octave=1, strides=[8, 16, 32, 64, 128]),
            loss_cls=dict(type='QualityFocalLoss', use_sigmoid=True, beta=2.0, loss_weight=1.0),
            loss_dfl=dict(type='DistributionFocalLoss', loss_weight=0.25), reg_max=16,
            loss_bbox=dict(type='GIoULoss', loss_weight=2.0))
TRAIN_CFG = dict(assigner=dict(type='ATSSAssigner', topk=9), allowed_border=-1, pos_weight=-1,
                 debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.6), max_per_img=20)


def _one_stage(head_type, base, **head):
    return dict(
        backbone=dict(type='ResNet', depth=18, base_channels=base, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), style='pytorch'),
        neck=dict(type='FPN', in_channels=[base, 2 * base, 4 * base, 8 * base],
                  out_channels=16, start_level=1, add_extra_convs='on_output', num_outs=5),
        bbox_head=dict(HEAD, type=head_type, num_classes=3, **head),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def teacher_model_cfg():
    return dict(type='GFL', **_one_stage('GFLHead', 16))


def ld_cfg(teacher_ckpt=None, teacher_config=None):
    return dict(type='KnowledgeDistillationSingleStageDetector',
                teacher_config=teacher_config or dict(model=teacher_model_cfg()),
                teacher_ckpt=teacher_ckpt,
                **_one_stage('LDHead', 8, loss_ld=dict(type='KnowledgeDistillationKLDivLoss',
                                                       loss_weight=0.25, T=10)))


def test_teacher_outside_the_student():
    torch.manual_seed(0)
    model = build_detector(ld_cfg())
    assert not any(k.startswith('teacher') for k in model.state_dict())
    assert not any(n.startswith('teacher') for n, _ in model.named_parameters())
    assert not any(u.startswith('teacher') for u in model.checkpoint_units())
    model.train()
    assert model.training and not model.teacher_model.training
    model.double()
    assert next(model.teacher_model.parameters()).dtype == torch.float64


def test_train_step_and_simple_test():
    torch.manual_seed(0)
    model = build_detector(ld_cfg())
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss_dfl', 'loss_ld', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert model.bbox_head.gfl_reg.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.teacher_model.parameters())
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.dtype == np.float32 and d.shape[1] == 5 for r in results for d in r)


def test_teacher_checkpoint_loaded_or_refused(tmp_path):
    torch.manual_seed(1)
    teacher = build_detector(teacher_model_cfg())
    path = tmp_path / 'teacher.pth'
    save_checkpoint(dict(state_dict=teacher.state_dict()), str(path))
    torch.manual_seed(0)
    model = build_detector(ld_cfg(teacher_ckpt=str(path)))
    for k, v in teacher.state_dict().items():
        torch.testing.assert_close(model.teacher_model.state_dict()[k], v)
    with pytest.raises(FileNotFoundError, match='nowhere.pth'):
        build_detector(ld_cfg(teacher_ckpt=str(tmp_path / 'nowhere.pth')))
    other = build_detector(dict(type='GFL', **_one_stage('GFLHead', 8)))  # another model
    wrong = tmp_path / 'student_sized.pth'
    save_checkpoint(dict(state_dict=other.state_dict()), str(wrong))
    with pytest.raises(Exception, match='student_sized.pth'):
        build_detector(ld_cfg(teacher_ckpt=str(wrong)))


def test_teacher_config_file_and_errors(tmp_path):
    cfg_file = tmp_path / 'teacher_cfg.py'
    cfg_file.write_text(f'model = {teacher_model_cfg()!r}\n')
    model = build_detector(ld_cfg(teacher_config=str(cfg_file)))
    assert type(model.teacher_model).__name__ == 'GFL'
    with pytest.raises(FileNotFoundError, match='no_such_teacher.py'):
        build_detector(ld_cfg(teacher_config='configs/gfl/no_such_teacher.py'))
    with pytest.raises(ValueError, match='needs a model'):
        build_detector(ld_cfg(teacher_config=dict(other=1)))
    copy.deepcopy(model)  # the hidden teacher survives a copy
