"""The tiny RetinaNet the memory tests probe and train: the shipped RetinaNet config with its
model shrunk (ResNet-18 at width 8 with a frozen stage, FPN and head at 16 channels), on
generated VOC images resized to a square, batches of 2, one iteration, no hooks beyond the
optimizer's."""
import os.path as osp

from mmengine.config import Config

from ckptzoo.datasets import generate_voc
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))


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
