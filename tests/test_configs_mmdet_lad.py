"""mmdet 2.28.2's ``lad/`` configs build their models unchanged (the teacher's checkpoint, a
URL, is only read by ``init_weights``), walked from the installed config tree."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('lad', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_2_lad_configs_are_found():
    assert len(CONFIGS) == 2


@pytest.mark.parametrize('name', CONFIGS)
def test_lad_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
