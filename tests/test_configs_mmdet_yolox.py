"""mmdet 2.28.2's ``yolox/`` configs build their models unchanged, walked from the installed
config tree (YOLOX nano / tiny / s / m / l / x), and each head's levels are the neck's
outputs."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('yolox', )) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_6_yolox_configs_are_found():
    assert len(CONFIGS) == 6 and not NOT_YET


@pytest.mark.parametrize('name', CONFIGS)
def test_yolox_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', CONFIGS)
def test_head_levels_and_input_size(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_detector
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(cfg.model)
    assert model.bbox_head.prior_generator.num_levels == len(cfg.model.neck.in_channels)
    assert model._input_size == tuple(cfg.model.input_size)
    assert model.bbox_head.use_depthwise == ('nano' in name)
