"""mmdet 2.28.2's ``timm_example/`` configs build their models unchanged, walked from the
installed config tree (RetinaNet over ``mmcls.TIMMBackbone``: timm's ``tv_resnet50`` and
``efficientnet_b1``): the file loads with its ``custom_imports = dict(imports=['mmcls.models'])``
(mmcls is not installed; its models are ckptzoo's), the ``mmcls.`` type resolves, the model
builds on ``meta`` with ``pretrained=True`` (loaded by ``init_weights``, never in the
constructor), and the timm model's feature channels are the ``in_channels`` its FPN expects."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('timm_example', )) if ROOT else []

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_2_timm_example_configs_are_found():
    assert len(CONFIGS) == 2


@pytest.mark.parametrize('name', CONFIGS)
def test_timm_config_builds_on_meta(name):
    assert try_build(osp.join(ROOT, name)) is None


@pytest.mark.parametrize('name', CONFIGS)
def test_config_loads_with_its_custom_imports_and_channels_match_the_neck(name):
    from ckptzoo.apis.config import load_config
    from ckptzoo.models import TIMMBackbone
    from ckptzoo.registry import build_model
    cfg = load_config(osp.join(ROOT, name))
    assert cfg.custom_imports == dict(imports=['mmcls.models'], allow_failed_imports=False)
    assert cfg.model.backbone.type == 'mmcls.TIMMBackbone' and cfg.model.backbone.pretrained
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_model(cfg.model)
    assert isinstance(model.backbone, TIMMBackbone)
    assert model.backbone.timm_model.feature_info.channels() == list(cfg.model.neck.in_channels)
    assert len(model.backbone.checkpoint_units()) > 10  # blocks, not one coarse unit
