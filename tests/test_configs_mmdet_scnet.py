"""mmdet 2.28.2's ``scnet/`` configs build their models unchanged, walked from the installed
config tree (SCNet R-50 / R-101 / X-101-64x4d FPN, ``SCNetRoIHead`` with its semantic, global
context and feature relay heads)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('scnet', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_5_scnet_configs_are_found():
    assert len(CONFIGS) == 5


@pytest.mark.parametrize('name', CONFIGS)
def test_scnet_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
