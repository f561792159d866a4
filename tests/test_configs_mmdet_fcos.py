"""mmdet 2.28.2's ``fcos/`` configs build their models unchanged, walked from the installed
config tree (plain, centre sampling, the norm_on_bbox / centerness_on_reg / GIoU tricks,
``dcn_on_last_conv`` with a DCN backbone, ResNeXt, fp16), each head with mmdet's five
regress ranges and one Scale per level."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('fcos', )) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_10_fcos_configs_are_found():
    assert len(CONFIGS) == 10 and not NOT_YET
    assert sum('dcn' in name for name in CONFIGS) == 1


@pytest.mark.parametrize('name', CONFIGS)
def test_fcos_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if 'centeronreg' in n])
def test_the_tricks_reach_the_head(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_head
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False).model
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        head = build_head(dict(cfg.bbox_head, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg))
    assert head.norm_on_bbox and head.centerness_on_reg and head.center_sampling
    assert len(head.scales) == len(head.regress_ranges) == 5
    assert head.dcn_on_last_conv == ('dcn' in name)
    assert type(head.loss_bbox).__name__ == 'GIoULoss'
