"""Every shipped config parses, builds its model, and trains one step on a tiny input."""
import glob
import os.path as osp
import warnings

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis.config import check_config, load_config
from ckptzoo.registry import build_model
from ckptzoo.core.mask import BitmapMasks

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIGS = sorted(p for p in glob.glob(osp.join(ROOT, 'configs', '**', '*.py'), recursive=True)
                 if '_base_' not in p)


def _detection_batch(size=64, masks=False):
    meta = dict(img_shape=(size, size, 3), pad_shape=(size, size, 3), ori_shape=(size, size, 3),
                scale_factor=np.ones(4, dtype=np.float32), flip=False, flip_direction=None)
    batch = dict(img=torch.randn(2, 3, size, size), img_metas=[meta, dict(meta)],
                 gt_bboxes=[torch.tensor([[8., 8., 40., 36.]]), torch.zeros(0, 4)],
                 gt_labels=[torch.tensor([1]), torch.zeros(0, dtype=torch.long)])
    if masks:  # the box, filled
        mask = np.zeros((1, size, size), dtype=np.uint8)
        mask[0, 8:36, 8:40] = 1
        batch['gt_masks'] = [BitmapMasks(mask, size, size),
                             BitmapMasks(np.zeros((0, size, size), np.uint8), size, size)]
    return batch


def test_every_config_is_covered():
    names = {osp.relpath(p, ROOT) for p in CONFIGS}
    assert {'configs/retinanet_cp.py', 'configs/smoke/classifier_synthetic.py',
            'configs/voc/retinanet_r50_fpn_1x_voc0712.py'} <= names
    assert len(names) >= 15


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: osp.relpath(p, ROOT))
def test_config_builds_and_trains_one_step(path):
    cfg = Config.fromfile(path)
    assert cfg.optimizer.type and cfg.runner.type in ('EpochBasedRunner', 'IterBasedRunner')
    torch.manual_seed(0)
    model = build_model(cfg.model).train()
    if cfg.model.type == 'ImageClassifier':
        batch = dict(img=torch.randn(2, 3, 64, 64), gt_label=torch.tensor([0, 1]))
    else:
        panoptic_head = cfg.model.get('panoptic_head')  # MaskFormer / Mask2Former
        batch = _detection_batch(masks='mask_head' in cfg.model.get('roi_head', {})
                                 or 'mask_head' in cfg.model  # YOLACT, SOLO: no roi_head
                                 or panoptic_head is not None)
        if panoptic_head is not None:  # full-size labels: stuff after the things, 255 VOID
            things = panoptic_head.num_things_classes
            seg = torch.randint(things, things + panoptic_head.num_stuff_classes, (2, 1, 64, 64))
            seg[:, :, :4] = 255
            batch['gt_semantic_seg'] = seg.to(torch.int32)
        if 'semantic_head' in cfg.model.get('roi_head', {}):  # HTC: maps at stride 8
            batch['gt_semantic_seg'] = torch.randint(0, 183, (2, 1, 8, 8), dtype=torch.uint8)
        if cfg.model.type == 'PanopticFPN':  # panoptic labels (things, stuff, 255) at stride 4
            batch['gt_semantic_seg'] = torch.randint(0, 6, (2, 1, 16, 16), dtype=torch.int32)
    outputs = model.train_step(batch, None)
    assert torch.isfinite(outputs['loss'])
    outputs['loss'].backward()
    with_cp = cfg.model.backbone.get('with_cp', False)
    assert with_cp == ('_cp' in osp.basename(path) or 'smoke' in path), path


@pytest.mark.parametrize('path', CONFIGS, ids=lambda p: osp.relpath(p, ROOT))
def test_config_passes_the_config_check(path):
    """Every key of a shipped config is one ckptzoo reads (no warning either)."""
    with warnings.catch_warnings():
        warnings.simplefilter('error', UserWarning)
        cfg = load_config(path)
        check_config(cfg)
        check_config(cfg, distributed=True)
