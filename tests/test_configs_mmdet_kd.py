"""mmdet 2.28.2's knowledge-distillation configs build their models unchanged, walked from the
installed config tree: ``ld/`` (KnowledgeDistillationSingleStageDetector with an LDHead; the
teacher from ``teacher_config='configs/gfl/...'``, a path relative to the repository, found
from the config's own location) and ``lad/`` (LAD). The teachers' checkpoints, URLs, are only
read by ``init_weights``, so nothing is downloaded or needed here."""
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.registry import build_model
from ckptzoo.utils.config_file import building_from
from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('ld', 'lad')
CONFIGS = model_configs(ROOT, FOLDERS) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_4_ld_and_2_lad_configs_are_found():
    assert sum(c.startswith('ld' + osp.sep) for c in CONFIGS) == 4
    assert sum(c.startswith('lad' + osp.sep) for c in CONFIGS) == 2


@pytest.mark.parametrize('name', CONFIGS)
def test_kd_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


def test_the_ld_teacher_is_the_gfl_config_it_names():
    path = osp.join(ROOT, 'ld', 'ld_r101_gflv1_r101dcn_fpn_coco_2x.py')
    cfg = Config.fromfile(path, import_custom_modules=False)
    with building_from(path), torch.device('meta'):
        model = build_model(cfg.model)
    teacher = model.teacher_model
    assert type(teacher).__name__ == 'GFL' and teacher.backbone.depth == 101
    assert teacher.backbone.dcn is not None  # gfl_r101_fpn_dconv_c3-c5_mstrain_2x_coco
    assert not any(k.startswith('teacher') for k in model.state_dict())
    assert model.teacher_ckpt.startswith('https://download.openmmlab.com/mmdetection/v2.0/gfl/')
