"""mmdet 2.28.2's ``paa/`` configs build their models unchanged, walked from the installed
config tree (R-50 / R-101, 1x to 3x, multi-scale)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('paa', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_7_paa_configs_are_found():
    assert len(CONFIGS) == 7


@pytest.mark.parametrize('name', CONFIGS)
def test_paa_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
