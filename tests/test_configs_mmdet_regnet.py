"""mmdet 2.28.2's ``regnet/`` configs build their models unchanged, walked from the installed
config tree (RegNetX 400MF ... 12GF under Faster / Mask / Cascade Mask R-CNN and RetinaNet, the
mdconv one with ``dcn=DCNv2``), and each RegNet's stage widths are the ``in_channels`` its FPN
expects."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('regnet', )) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_26_regnet_configs_are_found():
    assert len(CONFIGS) == 26 and not NOT_YET
    assert sum('mdconv' in name for name in CONFIGS) == 1


@pytest.mark.parametrize('name', CONFIGS)
def test_regnet_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if name in NOT_YET:
        assert reason is not None and 'RegNet dcn is not supported' in reason, reason
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if n not in NOT_YET])
def test_stage_widths_are_the_necks_in_channels(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_backbone
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        backbone = build_backbone(cfg.model.backbone)
    assert [backbone.stage_widths[i] for i in backbone.out_indices] == \
        list(cfg.model.neck.in_channels)
