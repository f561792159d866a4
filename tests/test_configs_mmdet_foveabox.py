"""mmdet 2.28.2's ``foveabox/`` configs build their models unchanged, walked from the installed
config tree (FOVEA on ResNet-50 / 101, plain and ``with_deform`` GN heads)."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('foveabox', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_8_foveabox_configs_are_found():
    assert len(CONFIGS) == 8 and sum('align' in n for n in CONFIGS) == 4


@pytest.mark.parametrize('name', CONFIGS)
def test_foveabox_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if 'align' in n])
def test_align_configs_have_the_feature_align(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_head
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False).model
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        head = build_head(dict(cfg.bbox_head, test_cfg=cfg.test_cfg))
    assert head.with_deform and head.feature_adaption.conv_adaption.deform_groups == 4
    assert head.conv_cls.in_channels == 4 * 256
