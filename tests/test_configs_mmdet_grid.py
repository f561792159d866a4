"""mmdet 2.28.2's Grid R-CNN configs build their models unchanged: the ``grid_rcnn/`` folder
and every config of the tree that names ``GridRCNN`` / ``GridRoIHead`` or inherits a
``grid_rcnn/`` config (found by reading the files, GRoIE's among them)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
NOT_YET = {}


def _names_grid(rel):
    text = open(osp.join(ROOT, rel)).read()
    return any(key in text for key in ("'GridRCNN'", "'GridRoIHead'", 'grid_rcnn/'))


CONFIGS = sorted(set(model_configs(ROOT, ('grid_rcnn', ))) | {
    r for r in model_configs(ROOT) if _names_grid(r)}) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_grid_configs_are_found():
    assert len(model_configs(ROOT, ('grid_rcnn', ))) == 5
    assert set(NOT_YET) <= set(CONFIGS)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if reason is not None and name in NOT_YET:
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None, reason
