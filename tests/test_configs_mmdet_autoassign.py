"""mmdet 2.28.2's ``autoassign/`` config builds its model unchanged, walked from the installed
config tree (AutoAssign: caffe ResNet-50, FPN, AutoAssignHead with GIoU)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('autoassign', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_autoassign_config_is_found():
    assert len(CONFIGS) == 1


@pytest.mark.parametrize('name', CONFIGS)
def test_autoassign_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
