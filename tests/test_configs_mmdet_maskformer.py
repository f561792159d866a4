"""mmdet 2.28.2's ``maskformer/`` (2) and ``mask2former/`` (11: panoptic and instance, R50 /
R101 / Swin) configs build their models unchanged, walked from the installed config tree; each
model's transformer layers are checkpoint units (every pixel-decoder encoder layer and every
transformer-decoder layer)."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('maskformer', 'mask2former')) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_13_configs_are_found():
    assert len(CONFIGS) == 13 and not NOT_YET
    assert sum(n.startswith('maskformer/') for n in CONFIGS) == 2
    assert sum(n.endswith('-panoptic.py') for n in CONFIGS) == 7


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', ['maskformer/maskformer_r50_mstrain_16x1_75e_coco.py',
                                  'mask2former/mask2former_r50_lsj_8x2_50e_coco-panoptic.py'])
def test_transformer_layers_are_units(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_detector
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    cfg.model.backbone.init_cfg = None
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(cfg.model)
    units = list(model.checkpoint_units())
    head = cfg.model.panoptic_head
    enc = [u for u in units if u.startswith('panoptic_head.pixel_decoder.encoder.layers.')]
    dec = [u for u in units if u.startswith('panoptic_head.transformer_decoder.layers.')]
    assert len(enc) == head.pixel_decoder.encoder.num_layers == 6
    assert len(dec) == head.transformer_decoder.num_layers
    assert len(units) == len(set(units))


def test_project_config_means_what_mmdets_does():
    """configs/coco/mask2former_r50_lsj_8x2_50e_coco-panoptic.py (mmdet's schema, the panoptic
    data settings written out) has mmdet's effective settings, and its model builds (the
    dataset types come with the panoptic data, zoo-panoptic-data)."""
    from mmengine.config import Config

    from ckptzoo.registry import build_detector
    name = 'mask2former_r50_lsj_8x2_50e_coco-panoptic.py'
    ours = Config.fromfile(osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'configs',
                                    'coco', name), import_custom_modules=False)
    theirs = Config.fromfile(osp.join(ROOT, 'mask2former', name), import_custom_modules=False)
    for key in ('model', 'optimizer', 'optimizer_config', 'lr_config', 'runner',
                'checkpoint_config', 'log_config', 'workflow', 'evaluation', 'custom_hooks'):
        assert ours[key] == theirs[key], key
    for split in ('train', 'val', 'test'):
        assert ours.data[split].to_dict() == theirs.data[split].to_dict(), split
    ours.model.backbone.init_cfg = None
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(ours.model)
    assert type(model).__name__ == 'Mask2Former'
