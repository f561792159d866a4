"""mmdet 2.28.2's ``centernet/`` configs build their models unchanged, walked from the installed
config tree (CenterNet on ResNet-18 with CTResNetNeck, with and without its DCNv2 convs)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('centernet', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_2_centernet_configs_are_found():
    assert len(CONFIGS) == 2 and sum('dcnv2' in n for n in CONFIGS) == 1


@pytest.mark.parametrize('name', CONFIGS)
def test_centernet_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason
