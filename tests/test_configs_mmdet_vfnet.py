"""mmdet 2.28.2's ``vfnet/`` configs build their models unchanged, walked from the installed
config tree (R-50 / R-101 / X-101 / Res2Net-101, with and without DCNv2 backbones and the
head's ``dcn_on_last_conv``)."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('vfnet', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_13_vfnet_configs_are_found():
    assert len(CONFIGS) == 13 and sum('mdconv' in n for n in CONFIGS) == 5


@pytest.mark.parametrize('name', CONFIGS)
def test_vfnet_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if 'r50' in n])
def test_the_head_follows_the_config(name):
    from mmengine.config import Config

    from ckptzoo.ops import ModulatedDeformConv2dPack
    from ckptzoo.registry import build_head
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False).model
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        head = build_head(dict(cfg.bbox_head, train_cfg=cfg.train_cfg, test_cfg=cfg.test_cfg))
    assert type(head.loss_cls).__name__ == 'VarifocalLoss'
    assert head.reg_denoms == [64, 128, 256, 512, 1024]
    last = head.cls_convs[-1].conv
    assert isinstance(last, ModulatedDeformConv2dPack) == bool(cfg.bbox_head.dcn_on_last_conv)
    assert head.checkpoint_plan() == {f'level{i}': None for i in range(5)}
