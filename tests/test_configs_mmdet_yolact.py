"""mmdet 2.28.2's ``yolact/`` configs (R-50 1x8, R-50 8x8, R-101 1x8) build their models unchanged,
walked from the installed config tree, with mmdet's head shapes and the YOLACT checkpoint
units."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('yolact', )) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_3_yolact_configs_are_found():
    assert len(CONFIGS) == 3 and not NOT_YET


@pytest.mark.parametrize('name', CONFIGS)
def test_yolact_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


def test_r50_shapes_and_units_as_mmdet():
    from mmengine.config import Config

    from ckptzoo.registry import build_model
    cfg = Config.fromfile(osp.join(ROOT, 'yolact/yolact_r50_1x8_coco.py'),
                          import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_model(cfg.model)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes['bbox_head.conv_cls.weight'] == (3 * 81, 256, 3, 3)
    assert shapes['bbox_head.conv_coeff.weight'] == (3 * 32, 256, 3, 3)
    assert shapes['mask_head.protonet.10.weight'] == (32, 256, 1, 1)
    assert shapes['segm_head.segm_conv.weight'] == (80, 256, 1, 1)
    units = list(model.checkpoint_units())
    assert units[-6:] == [f'bbox_head.level{i}' for i in range(5)] + ['mask_head.protonet']
    assert model.bbox_head.test_cfg['top_k'] == 200
