"""mmdet 2.28.2's ``nas_fcos/`` configs build their models unchanged, walked from the installed
config tree: NASFCOS_FPN (DCNv2 convs) under an FCOSHead and under the searched NASFCOSHead."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('nas_fcos', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_2_nas_fcos_configs_are_found():
    assert len(CONFIGS) == 2


@pytest.mark.parametrize('name', CONFIGS)
def test_nas_fcos_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
