"""mmdet 2.28.2's ``pvt/`` (PVT-t/s/m/l, PVTv2-b0 ... b5 RetinaNets) and ``convnext/``
(``mmcls.ConvNeXt`` Mask / Cascade Mask R-CNNs, with ``custom_imports=['mmcls.models']``)
configs build their models unchanged, walked from the installed config tree, and each
backbone's output channels are the ``in_channels`` its FPN expects."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('pvt', 'convnext')) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_13_pvt_and_convnext_configs_are_found():
    assert len(CONFIGS) == 13
    assert sum(name.startswith('convnext') for name in CONFIGS) == 3


@pytest.mark.parametrize('name', CONFIGS)
def test_pvt_convnext_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if name in NOT_YET:
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if n not in NOT_YET])
def test_output_channels_are_the_necks_in_channels(name):
    from ckptzoo.apis.config import load_config
    from ckptzoo.registry import build_backbone
    cfg = load_config(osp.join(ROOT, name))  # custom_imports: mmcls.models is ckptzoo's
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        backbone = build_backbone(cfg.model.backbone)
    assert list(backbone.out_channels) == list(cfg.model.neck.in_channels)
    units = backbone.checkpoint_units()
    if name.startswith('convnext'):
        assert type(backbone).__name__ == 'ConvNeXt' and cfg.model.backbone.type == 'mmcls.ConvNeXt'
        assert len(units) == 4 + sum(backbone.depths)
    else:
        stages = 4 + 4 + sum(backbone.num_layers) + (4 if 'pvtv2' not in name else 0)
        assert len(units) == stages  # embeddings, stage ends, layers (and position embeddings)
