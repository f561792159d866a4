"""SOLOv2 end to end on tiny models (SOLOV2Head, its light and DCNv2 forms): built from an
mmdet-schema config dict, mmdet's loss and state-dict keys, a train step with and without
instances, every checkpoint mode on the mask feature branch and the levels, the result
format."""
import numpy as np
import pytest

from ckptzoo.models import SOLOv2
from ckptzoo.ops import ModulatedDeformConv2dPack
from tests.helpers.plans import plan_midway
from tests.helpers.checkpointing import one_thread
from tests.helpers.solo import (MASK_FEATURE_HEAD, assert_every_mode_exact,
                                assert_result_format, batch, build, detector_cfg, head_cfg,
                                head_units, run_test, step, trained_looking)

one_thread = pytest.fixture(autouse=True)(one_thread)

VARIANTS = {
    'plain': {},
    'dcn': dict(dcn_cfg=dict(type='DCNv2'),
                mask_feature_head=dict(MASK_FEATURE_HEAD, conv_cfg=dict(type='DCNv2'))),
    'light_dcn': dict(dcn_cfg=dict(type='DCNv2'), dcn_apply_to_all_conv=False)}


def _cfg(variant='plain', with_cp=False):
    return detector_cfg('SOLOv2', head_cfg('SOLOV2Head', **VARIANTS[variant]), with_cp)


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_train_step_with_and_without_instances(variant):
    model = build(_cfg(variant))
    assert isinstance(model, SOLOv2)
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_mask', 'loss_cls', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_mask'] > 0
    assert set(grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    log, _, _ = step(model, batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())


def test_state_dict_keys_and_dcn_placement():
    keys = set(build(_cfg()).state_dict())
    assert {'mask_head.kernel_convs.0.conv.weight', 'mask_head.cls_convs.1.gn.weight',
            'mask_head.conv_kernel.weight', 'mask_head.conv_cls.bias',
            'mask_head.mask_feature_head.convs_all_levels.0.conv0.conv.weight',
            'mask_head.mask_feature_head.convs_all_levels.3.conv2.gn.bias',
            'mask_head.mask_feature_head.conv_pred.conv.weight'} <= keys
    assert 'mask_head.kernel_convs.0.conv.bias' not in keys  # bias only without a norm
    head = build(_cfg('light_dcn')).mask_head
    dcn = sorted(n for n, m in head.named_modules() if isinstance(m, ModulatedDeformConv2dPack))
    assert dcn == ['cls_convs.1.conv', 'kernel_convs.1.conv']
    head = build(_cfg('dcn')).mask_head
    dcn = [n for n, m in head.named_modules() if isinstance(m, ModulatedDeformConv2dPack)]
    assert len(dcn) == 4 + (1 + 1 + 2 + 3) + 1  # the towers, every mask-feature conv


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('variant', ['plain', 'dcn'])
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_units_equals_plain(monkeypatch, variant, mode):
    assert_every_mode_exact(monkeypatch, _cfg(variant), mode)


def test_with_cp_checkpoints_the_mask_features_and_every_level():
    model = build(_cfg(with_cp=True))
    plan = model.checkpoint_plan()
    units = head_units(model)
    assert units == ['mask_head.mask_feature_head'] + [f'mask_head.level{i}' for i in range(5)]
    assert [plan[u] for u in units] == ['full'] * 6


@pytest.mark.parametrize('variant', list(VARIANTS))
def test_results_format(variant):
    model = trained_looking(build(_cfg(variant)))
    results, metas = run_test(model)
    assert assert_result_format(results, metas) > 0


def test_results_feed_the_coco_segm_evaluation(tmp_path):
    """A synthetic COCO val split through mmdet's test pipeline, ``single_gpu_test`` (masks
    RLE-encoded) and ``CocoDataset.evaluate(metric='segm')``: the results' format is the one
    the evaluation reads."""
    import os.path as osp

    from ckptzoo.datasets import CocoDataset, build_dataloader, generate_coco
    from ckptzoo.runner.test import single_gpu_test
    root = generate_coco(str(tmp_path / 'coco'), num_train=2, num_val=8,
                         img_size=((64, 96), (64, 96)), crowd_ratio=0.0)
    norm = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], to_rgb=True)
    pipeline = [dict(type='LoadImageFromFile'),
                dict(type='MultiScaleFlipAug', img_scale=(128, 96), flip=False,
                     transforms=[dict(type='Resize', keep_ratio=True),
                                 dict(type='RandomFlip'), dict(type='Normalize', **norm),
                                 dict(type='Pad', size_divisor=32),
                                 dict(type='ImageToTensor', keys=['img']),
                                 dict(type='Collect', keys=['img'])])]
    ds = CocoDataset(ann_file=osp.join(root, 'annotations', 'instances_val2017.json'),
                     img_prefix=osp.join(root, 'val2017'), pipeline=pipeline, test_mode=True,
                     classes=('circle', 'square', 'triangle'))
    cfg = detector_cfg('SOLOv2', head_cfg('SOLOV2Head', num_classes=len(ds.CLASSES)))
    model = trained_looking(build(cfg)).eval()
    results = single_gpu_test(model, build_dataloader(ds, 1, 0, dist=False, shuffle=False))
    assert len(results) == 8 and all(isinstance(r, tuple) for r in results)
    assert sum(len(m) for r in results for m in r[1]) > 0
    metrics = ds.evaluate(results, metric='segm')
    assert 'segm_mAP' in metrics and 0 <= metrics['segm_mAP'] <= 1


def test_the_planner_plans_the_head_units(tmp_path):
    """A tiny SOLOv2 training run on synthetic COCO masks, planned at a budget between the
    all-'full' and the plain peaks: the mask feature branch and the levels are in the cost
    table, the measured peak within the budget and the prediction within 5 %."""
    import logging
    import os.path as osp

    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.apis.config import load_config
    from ckptzoo.apis.train import build_train_model
    from ckptzoo.datasets import generate_coco
    from ckptzoo.memory.measure.step import probe_batch, worst_case_shape
    root = generate_coco(str(tmp_path / 'coco'), num_train=4, num_val=0, img_size=(64, 64),
                         classes=('circle', 'square', 'triangle'), seed=0)
    cfg = load_config(osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))),
                               'configs/coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py'))
    cfg.model = _cfg(with_cp=True)
    for t in cfg.data.train.pipeline:
        if t['type'] == 'Resize':
            t.update(img_scale=[(64, 64)], multiscale_mode='value')
    cfg.data.train.update(ann_file=osp.join(root, 'annotations/instances_train2017.json'),
                          img_prefix=osp.join(root, 'train2017/'))
    cfg.data.update(samples_per_gpu=2)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.checkpoint_config = cfg.lr_config = cfg.custom_hooks = cfg.evaluation = None
    cfg.log_config = None
    cfg.runner = dict(type='IterBasedRunner', max_iters=1)
    cfg.optimizer = dict(type='SGD', lr=0.01, momentum=0.9)
    cfg.optimizer_config = dict()
    set_random_seed(0)
    model = build_train_model(cfg)
    run = build_training(cfg, model=model, logger=logging.getLogger('ckptzoo.test.solov2'))
    batch = probe_batch(run, worst_case_shape(cfg), boxes_per_image=3)
    table, result, budget = plan_midway(run, cfg, batch, head_units(model))
