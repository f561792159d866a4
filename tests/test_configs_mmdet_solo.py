"""mmdet 2.28.2's ``solo/`` and ``solov2/`` configs build their models unchanged, walked from
the installed config tree (SOLO, decoupled SOLO and its light form, SOLOv2 and its light
forms, with DCNv2 in some), with mmdet's head types and units; the project's
configs/coco/solov2_r50_fpn_1x_coco.py means what mmdet's does."""
import os.path as osp
import warnings

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root, model_configs, try_build

ROOT = mmdet_configs_root()
CONFIGS = model_configs(ROOT, ('solo', 'solov2')) if ROOT else []
# what still fails, and why
NOT_YET = {}

pytestmark = pytest.mark.skipif(ROOT is None, reason='mmdet 2.28.2 (its configs) not installed')


def _model(name):
    from mmengine.config import Config

    from ckptzoo.registry import build_detector
    cfg = Config.fromfile(osp.join(ROOT, name), import_custom_modules=False).model
    cfg.backbone.init_cfg = None
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        return cfg, build_detector(cfg.to_dict())


def test_the_14_solo_configs_are_found():
    assert len(CONFIGS) == 14 and not NOT_YET
    assert sum(n.startswith('solo/') for n in CONFIGS) == 5
    assert sum('dcn' in n for n in CONFIGS) == 3


@pytest.mark.parametrize('name', CONFIGS)
def test_solo_config_builds_on_meta(name):
    reason = try_build(osp.join(ROOT, name))
    if name in NOT_YET:
        pytest.xfail(f'needs {NOT_YET[name]}: {reason}')
    assert reason is None, reason


@pytest.mark.parametrize('name', CONFIGS)
def test_heads_units_and_dcn_as_configured(name):
    """The config's head type, one unit per level (and SOLOv2's mask feature branch), and
    deformable convs exactly where ``dcn_cfg`` / ``conv_cfg`` put them."""
    from ckptzoo.ops import ModulatedDeformConv2dPack
    cfg, model = _model(name)
    head = model.mask_head
    assert type(head).__name__ == cfg.mask_head.type and model.bbox_head is None
    units = [u for u in model.checkpoint_units() if u.startswith('mask_head.')]
    levels = [f'mask_head.level{i}' for i in range(5)]
    assert units == (['mask_head.mask_feature_head'] + levels if 'solov2' in name else levels)
    dcn = [n for n, m in head.named_modules() if isinstance(m, ModulatedDeformConv2dPack)]
    if 'dcn' not in name:
        assert not dcn
    elif 'light' in name:  # the last tower conv only
        last = cfg.mask_head.stacked_convs - 1
        assert sorted(dcn) == sorted([f'kernel_convs.{last}.conv', f'cls_convs.{last}.conv'])
    else:  # every tower conv and the mask feature branch
        assert len([n for n in dcn if n.startswith(('kernel_convs', 'cls_convs'))]) == \
            2 * cfg.mask_head.stacked_convs
        assert any(n.startswith('mask_feature_head.') for n in dcn)


def test_solov2_r50_shapes_are_mmdets():
    _, model = _model('solov2/solov2_r50_fpn_1x_coco.py')
    sd = model.state_dict()
    assert tuple(sd['mask_head.conv_kernel.weight'].shape) == (256, 512, 3, 3)
    assert tuple(sd['mask_head.conv_cls.weight'].shape) == (80, 512, 3, 3)
    assert tuple(sd['mask_head.kernel_convs.0.conv.weight'].shape) == (512, 258, 3, 3)
    assert tuple(sd['mask_head.mask_feature_head.convs_all_levels.3.conv0.conv.weight']
                 .shape) == (128, 258, 3, 3)
    assert 'mask_head.mask_feature_head.convs_all_levels.3.conv2.gn.weight' in sd
    assert tuple(sd['mask_head.mask_feature_head.conv_pred.conv.weight'].shape) == \
        (256, 128, 1, 1)


def test_project_solov2_config_means_what_mmdets_does():
    from mmengine.config import Config
    ours = Config.fromfile(osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                                    'configs', 'coco', 'solov2_r50_fpn_1x_coco.py'))
    theirs = Config.fromfile(osp.join(ROOT, 'solov2', 'solov2_r50_fpn_1x_coco.py'))
    for key in ('model', 'optimizer', 'optimizer_config', 'lr_config', 'runner'):
        assert ours[key].to_dict() == theirs[key].to_dict(), key
    for split in ('train', 'val', 'test'):
        assert ours.data[split].to_dict() == theirs.data[split].to_dict(), split
    assert ours.evaluation.metric == theirs.evaluation.metric
