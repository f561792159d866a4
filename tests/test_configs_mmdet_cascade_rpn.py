"""mmdet 2.28.2's ``cascade_rpn/`` configs build their models unchanged, walked from the
installed config tree: the Cascade RPN alone (``RPN``), and CRPN Faster / Fast R-CNN."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('cascade_rpn', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_3_cascade_rpn_configs_are_found():
    assert len(CONFIGS) == 3


@pytest.mark.parametrize('name', CONFIGS)
def test_cascade_rpn_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
