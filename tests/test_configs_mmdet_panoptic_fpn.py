"""mmdet 2.28.2's ``panoptic_fpn/`` configs (R-50 / R-101 / Res2Net-50 fp16, 1x and 3x) and
the panoptic ones of ``rfnext/`` build their models unchanged, walked from the installed config
tree; each model is a PanopticFPN with the semantic head's four level units."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('panoptic_fpn', )) if ROOT else []
RFNEXT = [n for n in model_configs(ROOT, ('rfnext', )) if 'panoptic' in n] if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_5_panoptic_fpn_and_3_rfnext_panoptic_configs_are_found():
    assert len(CONFIGS) == 5 and len(RFNEXT) == 3 and not NOT_YET


@pytest.mark.parametrize('name', CONFIGS + RFNEXT)
def test_panoptic_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if name in NOT_YET:
        assert reason is not None, f'{name} builds now: remove it from NOT_YET'
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None, reason


@pytest.mark.parametrize('name', CONFIGS[:1] + RFNEXT[:1])
def test_the_model_is_a_panoptic_fpn_with_semantic_units(name):
    from mmengine.config import Config

    from ckptzoo.models import PanopticFPN
    from ckptzoo.registry import build_detector
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(cfg.model)
    assert isinstance(model, PanopticFPN)
    units = [u for u in model.checkpoint_units() if u.startswith('semantic_head.')]
    assert units == [f'semantic_head.level{i}' for i in range(4)]
    assert model.panoptic_fusion_head.test_cfg['mask_thr_binary'] == 0.5
