"""mmdet 2.28.2's ``reppoints/`` configs build their models unchanged, walked from the installed
config tree (moment / minmax / partial-minmax point sets, the grid-point box variants with a
PointAssigner or a MaxIoUAssigner on the initial stage, R-50 / R-101 / X-101, DCN backbones)."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('reppoints', )) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_10_reppoints_configs_are_found():
    assert len(CONFIGS) == 10 and not NOT_YET


@pytest.mark.parametrize('name', CONFIGS)
def test_reppoints_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', CONFIGS)
def test_the_head_follows_the_config(name):
    from mmengine.config import Config

    from ckptzoo.core.bbox.assigners import MaxIoUAssigner, PointAssigner
    from ckptzoo.registry import build_head
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False).model
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        head = build_head(dict(cfg.bbox_head, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg))
    assert head.transform_method == cfg.bbox_head.transform_method
    assert head.reppoints_pts_init_out.out_channels == \
        (4 if cfg.bbox_head.get('use_grid_points') else 18)
    assert hasattr(head, 'moment_transfer') == (head.transform_method == 'moment')
    init = MaxIoUAssigner if cfg.train_cfg.init.assigner.type == 'MaxIoUAssigner' \
        else PointAssigner
    assert type(head.init_assigner) is init and type(head.refine_assigner) is MaxIoUAssigner
    assert head.checkpoint_plan() == {f'level{i}': None for i in range(5)}
