"""mmdet 2.28.2's ``sparse_rcnn/`` and ``queryinst/`` configs build their models unchanged,
walked from the installed config tree (R-50 / R-101, 100 or 300 learned proposals, six DII
stages, QueryInst's six dynamic mask heads), with mmdet's proposal counts, stage lists and the
``roi_head.bbox.{i}`` / ``roi_head.mask.{i}`` checkpoint units."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
FOLDERS = ('sparse_rcnn', 'queryinst')
CONFIGS = model_configs(ROOT, FOLDERS) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_10_configs_are_found():
    assert len(CONFIGS) == 10 and not NOT_YET
    assert sum(name.startswith('queryinst') for name in CONFIGS) == 5


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', [n for n in CONFIGS if 'r50' in n])
def test_built_model_has_mmdets_stages_and_units(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_model
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_model(cfg.model)
    proposals = 300 if '300_proposals' in name else 100
    sd = model.state_dict()
    assert sd['rpn_head.init_proposal_bboxes.weight'].shape == (proposals, 4)
    assert sd['rpn_head.init_proposal_features.weight'].shape == (proposals, 256)
    assert sd['roi_head.bbox_head.5.attention.attn.in_proj_weight'].shape == (768, 256)
    assert sd['roi_head.bbox_head.5.instance_interactive_conv.dynamic_layer.weight'].shape == \
        (2 * 256 * 64, 256)
    assert sd['roi_head.bbox_head.0.fc_cls.weight'].shape == (80, 256)
    with_mask = name.startswith('queryinst')
    assert model.roi_head.with_mask == with_mask
    units = [u for u in model.checkpoint_units() if u.startswith('roi_head.')]
    assert units == [f'roi_head.{kind}.{i}' for i in range(6)
                     for kind in (('bbox', 'mask') if with_mask else ('bbox', ))]
    if with_mask:
        assert sd['roi_head.mask_head.5.conv_logits.weight'].shape == (80, 256, 1, 1)
        assert sd['roi_head.mask_head.0.instance_interactive_conv.dynamic_layer.weight'].shape \
            == (2 * 256 * 64, 256)
        assert 'roi_head.mask_head.0.instance_interactive_conv.fc_layer.weight' not in sd
