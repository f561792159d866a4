"""Tiny training configs the tests build on.

``TINY``: a ResNet-18 classifier (width 8) on synthetic images, four iterations, the probe and
planner tests' run. ``tiny_voc_retinanet``: the tiny RetinaNet the memory tests probe and train:
the shipped RetinaNet config with its model shrunk (ResNet-18 at width 8 with a frozen stage, FPN
and head at 16 channels), on generated VOC images resized to a square, batches of 2, one
iteration, no hooks beyond the optimizer's. ``TOY_CFG``: ``tools/train.py``'s toy regressor
config (text), with accumulation, warmup, checkpoints and a text log."""
import logging
import os.path as osp

from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.datasets import generate_voc
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def shrink_retinanet(cfg: Config, num_classes: int = len(SYNTHETIC_CLASSES)) -> Config:
    """``cfg`` (a RetinaNet config) with the tiny model."""
    cfg.model.backbone = dict(type='ResNet', depth=18, base_channels=8, out_indices=(1, 2, 3),
                              frozen_stages=1, norm_eval=True, init_cfg=None,
                              norm_cfg=dict(type='BN', requires_grad=True))
    cfg.model.neck.update(in_channels=[16, 32, 64], out_channels=16, start_level=0)
    cfg.model.bbox_head.update(num_classes=num_classes, in_channels=16, feat_channels=16)
    return cfg


def tiny_voc_retinanet(tmp, size: int = 64, num_trainval: int = 4) -> Config:
    """The tiny RetinaNet on ``num_trainval`` generated VOC images of ``size`` x ``size``
    (written under ``tmp``), resized to that size, work dir ``tmp/work``."""
    devkit = generate_voc(str(tmp / 'data'), num_trainval=num_trainval, num_test=0,
                          img_size=(size, size), seed=0)
    cfg = shrink_retinanet(
        Config.fromfile(osp.join(ROOT, 'configs/voc/retinanet_r50_fpn_1x_voc0712.py')))
    pipeline = [dict(t) for t in cfg.data.train.dataset.pipeline]
    for t in pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=(size, size), keep_ratio=False)
    cfg.data.train = dict(type='VOCDataset', classes=SYNTHETIC_CLASSES, pipeline=pipeline,
                          ann_file=osp.join(devkit, 'VOC2007/ImageSets/Main/trainval.txt'),
                          img_prefix=osp.join(devkit, 'VOC2007') + '/')
    cfg.data.update(samples_per_gpu=2, workers_per_gpu=0)
    cfg.work_dir = str(tmp / 'work')
    cfg.checkpoint_config = cfg.log_config = cfg.lr_config = cfg.custom_hooks = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    return cfg


TINY = dict(
    model=dict(type='ImageClassifier',
               backbone=dict(type='ResNet', depth=18, base_channels=8, norm_eval=False,
                             zero_init_residual=False),
               head=dict(type='LinearClsHead', num_classes=4, in_channels=64, topk=(1,))),
    data=dict(samples_per_gpu=4, workers_per_gpu=0,
              train=dict(type='SyntheticClassificationDataset', num_samples=16, num_classes=4,
                         img_size=48, seed=0)),
    optimizer=dict(type='SGD', lr=0.01, momentum=0.9, weight_decay=1e-4),
    optimizer_config=dict(grad_clip=None), lr_config=None, checkpoint_config=None,
    log_config=None, runner=dict(type='IterBasedRunner', max_iters=4),
    workflow=[('train', 1)], seed=0)


def build_tiny(tmp_path, **overrides):
    set_random_seed(0)
    cfg = Config(dict(TINY, work_dir=str(tmp_path), **overrides))
    return cfg, build_training(cfg, logger=logging.getLogger('test_planner'))


TOY_CFG = """
custom_imports = dict(imports=['tests.helpers.toy'], allow_failed_imports=False)
model = dict(type='ToyRegressor')
data = dict(samples_per_gpu=1, workers_per_gpu=0,
            train=dict(type='ToyDataset', num_samples=8))
optimizer = dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-3)
optimizer_config = dict(type='GradientCumulativeOptimizerHook', cumulative_iters=3,
                        grad_clip=dict(max_norm=1.0))
lr_config = dict(policy='step', by_epoch=False, step=[5], warmup='linear', warmup_iters=2,
                 warmup_ratio=0.5)
checkpoint_config = dict(interval=1, by_epoch=False)
log_config = dict(interval=1, hooks=[dict(type='TextLoggerHook')])
workflow = [('train', 1)]
seed = 0
"""


def one_step_on_generated_coco(cfg: Config, root: str, work_dir: str,
                               optimizer: dict | None = None) -> Config:
    """``cfg`` (a synthetic-COCO config, its model already set) trained one iteration of
    batch 2 on the generated COCO data under ``root``, its images resized to 64x64, with no
    hooks beyond the optimizer's (the planner tests' run); ``optimizer`` defaults to SGD."""
    for t in cfg.data.train.pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=[(64, 64)], multiscale_mode='value')
    cfg.data.train.update(ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=2)
    cfg.work_dir = work_dir
    cfg.checkpoint_config = cfg.lr_config = cfg.custom_hooks = cfg.evaluation = None
    cfg.log_config = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    cfg.optimizer = optimizer or dict(type='SGD', lr=0.01, momentum=0.9)
    return cfg
