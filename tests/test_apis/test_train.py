"""The optimizer hook chosen from optimizer_config x fp16, auto_scale_lr, synthetic data."""
import os

import pytest

from ckptzoo.apis import select_optimizer_hook
from ckptzoo.registry import build_hook


@pytest.mark.parametrize('optimizer_config,fp16,expected', [
    (dict(grad_clip=None), None, 'OptimizerHook'),
    (None, None, 'OptimizerHook'),
    (dict(grad_clip=None), dict(loss_scale=512.), 'Fp16OptimizerHook'),
    (dict(cumulative_iters=2), None, 'GradientCumulativeOptimizerHook'),
    (dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2), None,
     'GradientCumulativeOptimizerHook'),
    (dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2), dict(loss_scale=512.),
     'GradientCumulativeFp16OptimizerHook'),
    (dict(cumulative_iters=4, grad_clip=dict(max_norm=35)), dict(loss_scale='dynamic'),
     'GradientCumulativeFp16OptimizerHook'),
    (dict(type='Fp16OptimizerHook', loss_scale=512.), None, 'Fp16OptimizerHook'),
])
def test_selection_rule_builds_the_hook(optimizer_config, fp16, expected):
    cfg = select_optimizer_hook(optimizer_config, fp16)
    assert cfg['type'] == expected
    hook = build_hook(cfg)
    assert type(hook).__name__ == expected
    if 'cumulative_iters' in (optimizer_config or {}):
        assert hook.cumulative_iters == optimizer_config['cumulative_iters']
    if fp16:
        assert hook.loss_scale == fp16['loss_scale']


def test_custom_hook_type_and_fp16_conflict():
    assert select_optimizer_hook(dict(type='MyHook', x=1)) == dict(type='MyHook', x=1)
    with pytest.raises(ValueError, match="fp16 cannot be combined with the custom optimizer "
                       "hook 'MyHook'"):
        select_optimizer_hook(dict(type='MyHook'), dict(loss_scale=512.))
    with pytest.raises(TypeError, match='fp16 must be a dict'):
        select_optimizer_hook(dict(), 512.)


def test_auto_scale_lr():
    from mmengine.config import Config

    from ckptzoo.apis import auto_scale_lr
    cfg = Config(dict(optimizer=dict(type='SGD', lr=0.02), data=dict(samples_per_gpu=2),
                      auto_scale_lr=dict(enable=False, base_batch_size=16)))
    assert auto_scale_lr(cfg, world_size=4) is None and cfg.optimizer.lr == 0.02
    cfg.auto_scale_lr.enable = True
    assert auto_scale_lr(cfg, world_size=4) == pytest.approx(0.01)  # batch 8 of 16
    cfg.auto_scale_lr.base_batch_size = 0
    with pytest.raises(ValueError, match='base_batch_size must be a positive int, got 0'):
        auto_scale_lr(cfg, world_size=1)


def test_prepare_synthetic_data_coco_and_unknown_format(tmp_path):
    from mmengine.config import Config

    from ckptzoo.apis import prepare_synthetic_data
    root = str(tmp_path / 'coco')
    cfg = Config(dict(synthetic_data=dict(format='coco', root=root, num_train=2, num_val=1,
                                          img_size=32)))
    assert prepare_synthetic_data(cfg) == root
    assert os.path.isfile(os.path.join(root, 'annotations', 'instances_val2017.json'))
    with pytest.raises(ValueError, match="'coco', 'coco_panoptic', 'voc'"):
        prepare_synthetic_data(Config(dict(synthetic_data=dict(format='yolo', root=root))))


def test_auto_scale_lr_counts_the_training_loaders_batch():
    """The batch is the one the training loader gives: ``data.train_dataloader``'s
    ``samples_per_gpu`` wins over ``data.samples_per_gpu`` (as in the loader and in mmdet 2.x's
    auto_scale_lr), and the loader's default of 2 counts when neither is set."""
    from mmengine.config import Config

    from ckptzoo.apis import auto_scale_lr
    cfg = Config(dict(optimizer=dict(type='SGD', lr=0.02),
                      data=dict(samples_per_gpu=2, train_dataloader=dict(samples_per_gpu=4)),
                      auto_scale_lr=dict(enable=True, base_batch_size=16)))
    assert auto_scale_lr(cfg, world_size=2) == pytest.approx(0.01)  # 2 x 4 = 8 of 16
    cfg = Config(dict(optimizer=dict(type='SGD', lr=0.02), data=dict(),
                      auto_scale_lr=dict(enable=True, base_batch_size=16)))
    assert auto_scale_lr(cfg, world_size=4) == pytest.approx(0.01)  # 4 x 2 = 8 of 16
