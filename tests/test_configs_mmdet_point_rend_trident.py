"""mmdet 2.28.2's ``point_rend/`` and ``tridentnet/`` configs build their models unchanged (found by walking the
installed config tree, not a hand-kept list)."""
import os.path as osp

import pytest

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('point_rend', 'tridentnet')
CONFIGS = model_configs(ROOT, FOLDERS) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_configs_are_found():
    assert CONFIGS == ['point_rend/point_rend_r50_caffe_fpn_mstrain_1x_coco.py',
                       'point_rend/point_rend_r50_caffe_fpn_mstrain_3x_coco.py',
                       'tridentnet/tridentnet_r50_caffe_1x_coco.py',
                       'tridentnet/tridentnet_r50_caffe_mstrain_1x_coco.py',
                       'tridentnet/tridentnet_r50_caffe_mstrain_3x_coco.py']


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    assert try_build(osp.join(ROOT, name)) is None
