"""mmdet 2.28.2's ``detr/`` (DETR R50) and ``deformable_detr/`` (plain, box refinement,
two-stage) configs build their models unchanged, walked from the installed config tree, with
mmdet's state-dict layout, and every encoder / decoder layer a checkpoint unit."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('detr', 'deformable_detr')) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def test_the_4_configs_are_found():
    assert len(CONFIGS) == 4 and not NOT_YET
    assert sum(name.startswith('deformable_detr/') for name in CONFIGS) == 3


@pytest.mark.parametrize('name', CONFIGS)
def test_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    assert reason is None, reason


@pytest.mark.parametrize('name', CONFIGS)
def test_layers_are_units_and_keys_are_mmdets(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_detector
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(cfg.model)
    head = cfg.model.bbox_head
    units = [n for n in model.checkpoint_units() if n.startswith('bbox_head.')]
    assert units == [f'bbox_head.transformer.{part}.layers.{i}' for part in ('encoder', 'decoder')
                     for i in range(6)]
    keys = set(model.state_dict())
    assert 'bbox_head.transformer.decoder.layers.5.ffns.0.layers.1.weight' in keys
    if head.type == 'DETRHead':
        assert 'bbox_head.transformer.decoder.post_norm.weight' in keys
        ffn = model.bbox_head.transformer.encoder.layers[0].ffns[0]
        assert ffn.feedforward_channels == 2048 and ffn.layers[-1].p == 0.1
    else:
        num_pred = 7 if head.as_two_stage else 6
        assert f'bbox_head.cls_branches.{num_pred - 1}.weight' in keys
        assert f'bbox_head.cls_branches.{num_pred}.weight' not in keys
        assert ('bbox_head.transformer.enc_output.weight' in keys) is head.as_two_stage


@pytest.mark.parametrize('name', CONFIGS)
def test_config_passes_the_config_check(name):
    """Every key of the configs (AdamW with custom_keys, grad_clip, AutoAugment, ...) is one
    ckptzoo reads."""
    from ckptzoo.apis.config import check_config, load_config
    cfg = load_config(osp.join(ROOT, name))
    check_config(cfg)
    types = {t['type'] for t in cfg.data.train.pipeline}
    assert {'AutoAugment', 'RandomFlip'} <= types


@pytest.mark.parametrize('name', ['detr/detr_r50_8x2_150e_coco.py',
                                  'deformable_detr/deformable_detr_r50_16x2_50e_coco.py'])
def test_project_coco_configs_mean_what_mmdets_do(name):
    """configs/coco/ carries them in the same schema; the effective settings agree."""
    from mmengine.config import Config
    ours = Config.fromfile(osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                                    'configs', 'coco', osp.basename(name)))
    theirs = Config.fromfile(osp.join(ROOT, name))

    def plain(value):
        return value.to_dict() if hasattr(value, 'to_dict') else value

    for key in ('model', 'optimizer', 'optimizer_config', 'lr_config', 'runner',
                'checkpoint_config', 'custom_hooks'):
        assert plain(ours.get(key)) == plain(theirs.get(key)), key
    for split in ('train', 'val', 'test'):
        assert ours.data[split].to_dict() == theirs.data[split].to_dict(), split
    assert ours.evaluation.to_dict() == dict(theirs.evaluation.to_dict(), save_best='auto')
