"""mmdet 2.28.2's own RetinaNet, Faster R-CNN and Mask R-CNN config files (from the installed
wheel, read, never imported) build in ckptzoo unchanged: model, datasets (on generated data in
their data_root), optimizer, runner and every hook the config names; the two-stage ones train
through tools/train.py with the three savers from the command line."""
import glob
import json
import importlib.util
import logging
import os.path as osp

import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, select_optimizer_hook
from ckptzoo.apis.config import check_config, load_config
from ckptzoo.datasets import build_dataloader, build_dataset, generate_coco, generate_voc
from ckptzoo.registry import build_model, build_optimizer, build_runner
from ckptzoo.runner.hooks import EvalHook

from tests.helpers.mmdet_config_count import model_configs, try_build


def _mmdet_configs():
    spec = importlib.util.find_spec('mmdet')  # finds the package folder, imports nothing
    if spec is None:
        return None
    return osp.join(spec.submodule_search_locations[0], '.mim', 'configs')


MMDET_CONFIGS = _mmdet_configs()
# every retinanet/ config builds (Ascend's batched head is RetinaHead under its name)
LEFT_OUT = set()
RETINANET = sorted(
    osp.relpath(p, MMDET_CONFIGS)
    for pattern in ('retinanet/*.py', 'swin/retinanet_*.py', 'pascal_voc/retinanet_*.py')
    for p in glob.glob(osp.join(MMDET_CONFIGS or '', pattern))) if MMDET_CONFIGS else []
# the two-stage detectors' configs the zoo carries (configs/coco/ has them anew)
TWO_STAGE = ['faster_rcnn/faster_rcnn_r50_fpn_1x_coco.py', 'mask_rcnn/mask_rcnn_r50_fpn_1x_coco.py',
             'swin/mask_rcnn_swin-t-p4-w7_fpn_1x_coco.py',
             'faster_rcnn/faster_rcnn_r50_fpn_mstrain_3x_coco.py',
             'cascade_rcnn/cascade_rcnn_r50_fpn_1x_coco.py',
             'cascade_rcnn/cascade_mask_rcnn_r50_fpn_1x_coco.py']
# HTC's, built with their datasets too (the semantic maps of data/coco/stuffthingmaps/)
HTC = ['htc/htc_without_semantic_r50_fpn_1x_coco.py', 'htc/htc_r50_fpn_1x_coco.py']
# every config of the folders whose model families the zoo has, built on the meta device (no
# weights allocated); the ones above also build their datasets, runner and hooks
FAMILY_FOLDERS = ('cascade_rcnn', )
FAMILY_CONFIGS = model_configs(MMDET_CONFIGS, FAMILY_FOLDERS) if MMDET_CONFIGS else []
# the R-CNN variants: Mask Scoring, Fast R-CNN (precomputed proposals), the C4 models
VARIANT_CONFIGS = (model_configs(MMDET_CONFIGS, ('ms_rcnn', 'fast_rcnn')) + sorted(
    r for r in model_configs(MMDET_CONFIGS, ('faster_rcnn', 'mask_rcnn')) if '_c4_' in r)
) if MMDET_CONFIGS else []
# HTC's folder: every config builds (its DCN one since ResNet's dcn)
HTC_LEFT_OUT = set()
HTC_CONFIGS = model_configs(MMDET_CONFIGS, ('htc', )) if MMDET_CONFIGS else []
COCO_NAMES = ('person', 'bicycle', 'car')
VOC_NAMES = ('aeroplane', 'bicycle', 'bird')

pytestmark = pytest.mark.skipif(
    MMDET_CONFIGS is None,
    reason='mmdet 2.28.2 (its config files) is not installed: pip install -c '
           '.ci/constraints.txt -e ".[test]"')


@pytest.fixture(scope='module')
def data_tree(tmp_path_factory):
    """The trees mmdet's configs point at (data/coco, data/VOCdevkit), tiny."""
    root = tmp_path_factory.mktemp('mmdet_data')
    generate_coco(str(root / 'data' / 'coco'), num_train=4, num_val=3, img_size=(48, 64),
                  names=COCO_NAMES, cat_ids=(1, 2, 3), stuff_maps=True)
    for year, seed in (('VOC2007', 0), ('VOC2012', 1)):
        generate_voc(str(root / 'data'), num_trainval=2, num_test=2, img_size=(48, 64),
                     seed=seed, year=year, names=VOC_NAMES)
    return root


def test_the_23_retinanet_configs_are_found():
    assert len(RETINANET) == 24, RETINANET
    assert LEFT_OUT <= set(RETINANET)


@pytest.mark.parametrize('name', [n for n in RETINANET if n not in LEFT_OUT] + TWO_STAGE + HTC)
def test_mmdet_config_builds(name, data_tree, tmp_path, monkeypatch):
    monkeypatch.chdir(data_tree)  # the configs' relative data_root: data/coco/, data/VOCdevkit/
    cfg = Config.fromfile(osp.join(MMDET_CONFIGS, name))

    # torch's default random init of R101-sized models takes seconds each and is not under
    # test here; tests/test_tools/test_coco.py builds and trains retinanet_r50_fpn_1x_coco.py
    for fn in ('kaiming_uniform_', 'uniform_'):
        monkeypatch.setattr(torch.nn.init, fn, lambda tensor, *args, **kwargs: tensor)
    model = build_model(cfg.model)
    if cfg.model.type in ('CascadeRCNN', 'HybridTaskCascade'):
        assert [h.num_classes for h in model.roi_head.bbox_head] == \
            [h.num_classes for h in cfg.model.roi_head.bbox_head]
        assert model.with_mask == ('mask_head' in cfg.model.roi_head)
    elif 'roi_head' in cfg.model:
        assert model.roi_head.bbox_head.num_classes == cfg.model.roi_head.bbox_head.num_classes
        assert model.with_mask == ('mask_head' in cfg.model.roi_head)
    else:
        assert model.bbox_head.num_classes == cfg.model.bbox_head.num_classes

    train_set = build_dataset(cfg.data.train)
    assert len(train_set) > 0 and train_set[0]['img'].data.dim() == 3
    val_cfg = dict(cfg.data.val)
    val_cfg.pop('samples_per_gpu', None)
    val_set = build_dataset(val_cfg, dict(test_mode=True))
    assert len(val_set) > 0
    build_dataset(dict(cfg.data.test), dict(test_mode=True))

    optimizer = build_optimizer(model, cfg.optimizer)
    runner = build_runner(dict(cfg.runner), default_args=dict(
        model=model, optimizer=optimizer, work_dir=str(tmp_path),
        logger=logging.getLogger('test_configs_mmdet'), meta=dict()))
    runner.register_training_hooks(
        cfg.lr_config, select_optimizer_hook(cfg.get('optimizer_config'), cfg.get('fp16')),
        cfg.get('checkpoint_config'), cfg.get('log_config'), cfg.get('momentum_config'),
        custom_hooks_config=cfg.get('custom_hooks'))
    eval_cfg = dict(cfg.get('evaluation', {}))
    eval_cfg['by_epoch'] = cfg.runner.type != 'IterBasedRunner'
    runner.register_hook(EvalHook(build_dataloader(val_set, 1, 0, dist=False, shuffle=False),
                                  **eval_cfg), priority='LOW')
    names = [type(h).__name__ for h in runner.hooks]
    assert any(n.endswith('LrUpdaterHook') for n in names), names
    assert any(n.endswith('OptimizerHook') for n in names), names
    if cfg.get('fp16'):
        assert any('Fp16' in n for n in names), names
    if cfg.get('momentum_config'):
        assert any(n.endswith('MomentumUpdaterHook') for n in names), names


def test_the_27_cascade_rcnn_configs_are_found():
    assert len(FAMILY_CONFIGS) == 27 and set(TWO_STAGE[-2:]) <= set(FAMILY_CONFIGS)


def test_the_7_htc_configs_are_found():
    assert len(HTC_CONFIGS) == 7 and set(HTC) | HTC_LEFT_OUT <= set(HTC_CONFIGS)


@pytest.mark.parametrize('name', FAMILY_CONFIGS + [n for n in HTC_CONFIGS
                                                   if n not in HTC_LEFT_OUT])
def test_mmdet_family_config_builds_on_meta(name):
    """Every config of the folder (ResNet / ResNeXt, caffe style, 1x / 20e / mstrain 3x)
    builds its model unchanged."""
    assert try_build(osp.join(MMDET_CONFIGS, name)) is None


def test_the_17_rcnn_variant_configs_are_found():
    assert len(VARIANT_CONFIGS) == 17, VARIANT_CONFIGS
    assert sum('_c4_' in n for n in VARIANT_CONFIGS) == 3


@pytest.mark.parametrize('name', VARIANT_CONFIGS)
def test_mmdet_rcnn_variant_config_builds_on_meta(name):
    """ms_rcnn/ (ResNet, caffe, ResNeXt), fast_rcnn/ and the C4 Faster / Mask R-CNN
    (shared ResLayer head, one RPN level) build their models unchanged."""
    assert try_build(osp.join(MMDET_CONFIGS, name)) is None


@pytest.mark.parametrize('name', [n for n in RETINANET if n not in LEFT_OUT] + TWO_STAGE +
                         VARIANT_CONFIGS + HTC)
def test_mmdet_config_passes_the_config_check(name):
    """Every key of mmdet's own configs is one ckptzoo reads: the check refuses none."""
    cfg = load_config(osp.join(MMDET_CONFIGS, name))
    check_config(cfg)
    check_config(cfg, distributed=True)


def _plain(value):
    return value.to_dict() if hasattr(value, 'to_dict') else value


@pytest.mark.parametrize('name', ['retinanet/retinanet_r50_fpn_1x_coco.py',
                                  'retinanet/retinanet_r50_fpn_mstrain_640-800_3x_coco.py'] +
                         TWO_STAGE[:3] + TWO_STAGE[-2:] + HTC)
def test_project_coco_configs_mean_what_mmdets_do(name):
    """configs/coco/ is written anew in the same schema; the effective settings agree."""
    ours = Config.fromfile(osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))),
                                    'configs', 'coco', osp.basename(name)))
    theirs = Config.fromfile(osp.join(MMDET_CONFIGS, name))
    for key in ('model', 'optimizer', 'optimizer_config', 'lr_config', 'runner',
                'checkpoint_config', 'custom_hooks'):
        assert _plain(ours[key]) == _plain(theirs[key]), key
    for split in ('train', 'val', 'test'):
        assert ours.data[split].to_dict() == theirs.data[split].to_dict(), split
    assert ours.evaluation.to_dict() == dict(theirs.evaluation.to_dict(), save_best='auto')


@pytest.mark.slow
def test_mmdet_mstrain_config_plans_and_trains_through_train_py(data_tree, tmp_path,
                                                                monkeypatch):
    """mmdet's multi-scale RetinaNet config, unchanged but for its scale (and one epoch),
    through ``tools/train.py --cfg-options memory_budget=...``: a plan per batch-shape bucket,
    and every measured step of the epoch within the budget."""
    from ckptzoo.apis.plan import ProbeSession, batch_shapes
    from ckptzoo.memory import read_plan_file
    from ckptzoo.memory.measure.step import probe_batch
    from tests.helpers.tools import load_tool

    monkeypatch.chdir(data_tree)
    config = osp.join(MMDET_CONFIGS, 'retinanet/retinanet_r50_fpn_mstrain_640-800_3x_coco.py')
    options = {'model.backbone.init_cfg': None, 'data.workers_per_gpu': 0,
               'data.train.dataset.pipeline.2.img_scale': [(96, 32), (96, 64)],
               'runner.max_epochs': 1, 'evaluation.interval': 10, 'log_config.interval': 1,
               'memory_check_interval': 1, 'seed': 0}
    cfg = load_config(config, dict(options, work_dir=str(tmp_path / 'probe')))
    run = build_training(cfg, logger=logging.getLogger('test_configs_mmdet'))
    shapes = batch_shapes(run, cfg)
    assert len({s for s, _ in shapes.candidates}) >= 2  # the sizes drawn from the range
    with ProbeSession(run) as session:  # the plain peak of the worst batch
        batch = probe_batch(run, shapes.worst, shapes.max_boxes_per_image)
        session.measure_step(batch)
        budget = session.measure_step(batch)[0]  # (at this scale the optimizer step's peak)

    work_dir = tmp_path / 'work'
    argv = [config, '--work-dir', str(work_dir), '--cfg-options', f'memory_budget={budget}',
            'data.train.dataset.pipeline.2.img_scale=[(96,32),(96,64)]'] + [
        f'{k}={v}' for k, v in options.items() if k != 'data.train.dataset.pipeline.2.img_scale']
    assert load_tool('train.py').main(argv) in (None, 0)
    plan = read_plan_file(str(work_dir / 'memory_plan.json'))
    assert len(plan['buckets']) >= 2 and plan['measured_peak_bytes'] <= budget
    logs = [json.loads(line) for p in work_dir.glob('*.log.json') for line in open(p)]
    train = [log for log in logs if log.get('mode') == 'train']
    assert train and all('memory' in log for log in train)  # every step measured and logged
    assert max(log['memory'] for log in train) <= budget / 2 ** 20


# only to keep the runs small: no pretrained file, 96x64 images, fewer RoIs and detections per
# image (float16 convolutions are slow on a CPU); the savers (with_cp, fp16 with mmdet's static
# loss scale, accumulation) from the command line
TWO_STAGE_SHRINK = ['model.backbone.init_cfg=None', 'data.workers_per_gpu=0',
                    'runner.max_epochs=1', 'log_config.interval=1',
                    'model.train_cfg.rpn_proposal.max_per_img=64',
                    'model.train_cfg.rcnn.sampler.num=16', 'model.test_cfg.rpn.max_per_img=32',
                    'model.test_cfg.rcnn.score_thr=0.0', 'model.test_cfg.rcnn.max_per_img=2',
                    'data.val.pipeline.1.img_scale=(96,64)',
                    'data.test.pipeline.1.img_scale=(96,64)', 'model.backbone.with_cp=True',
                    'fp16.loss_scale=512.', 'optimizer_config.cumulative_iters=2']


@pytest.mark.slow
@pytest.mark.parametrize('name', TWO_STAGE)
def test_mmdet_two_stage_config_trains_with_the_savers(name, data_tree, tmp_path, monkeypatch):
    """Each config, unchanged but for its scale, trains an epoch through tools/train.py with
    ``with_cp`` + fp16 + ``cumulative_iters`` given on the command line, and evaluates box
    (and, for Mask R-CNN, mask) AP."""
    from tests.helpers.tools import load_tool

    monkeypatch.chdir(data_tree)
    train = (['data.train.dataset.pipeline.2.img_scale=[(96,48),(96,64)]', 'data.train.times=1']
             if 'mstrain' in name else ['data.train.pipeline.2.img_scale=(96,64)'])
    work_dir = tmp_path / 'work'
    shrink = TWO_STAGE_SHRINK
    if 'cascade' in name:  # train_cfg.rcnn is a list: one sampler per stage
        shrink = [o for o in shrink if not o.startswith('model.train_cfg.rcnn.')] + [
            f'model.train_cfg.rcnn.{i}.sampler.num=16' for i in range(3)]
    argv = [osp.join(MMDET_CONFIGS, name), '--work-dir', str(work_dir), '--cfg-options', *train,
            *shrink]
    assert load_tool('train.py').main(argv) in (None, 0)
    log = open(next(str(p) for p in work_dir.glob('*.log'))).read()
    assert 'GradientCumulativeFp16OptimizerHook' in log and 'loss_scale: 512' in log
    train_lines = [line for line in log.splitlines() if 'Epoch [1][' in line]
    for key in ('loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'loss_bbox', 'acc'):
        assert key in train_lines[-1], train_lines[-1]
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    assert 'bbox_mAP:' in val_line
    masks = 'mask_rcnn' in name
    if 'cascade' in name:
        assert all(f's{i}.loss_bbox' in train_lines[-1] for i in range(3)), train_lines[-1]
    assert ('loss_mask' in train_lines[-1]) == masks and ('segm_mAP:' in val_line) == masks


# the R-CNN variants' folders: every config builds but those waiting on a type not written yet
RCNN_VARIANT_FOLDERS = ('double_heads', 'dynamic_rcnn', 'groie', 'libra_rcnn', 'pisa')
RCNN_VARIANT_PENDING = {}
RCNN_VARIANT_CONFIGS = model_configs(MMDET_CONFIGS, RCNN_VARIANT_FOLDERS) \
    if MMDET_CONFIGS else []


def _pending(name):
    return next((why for prefix, why in RCNN_VARIANT_PENDING.items()
                 if name.startswith(prefix)), None)


@pytest.mark.parametrize('name', RCNN_VARIANT_CONFIGS)
def test_mmdet_rcnn_variant_folder_config_builds_on_meta(name):
    """Double-Head, Dynamic, GRoIE, Libra and PISA configs build unchanged; a config whose
    missing type is pending fails with that type's name (and passes the day it exists)."""
    reason = try_build(osp.join(MMDET_CONFIGS, name))
    why = _pending(name)
    if why is None:
        assert reason is None, reason
    elif reason is not None:
        pytest.xfail(f'pending: {why} ({reason[:120]})')


# mmdet's one-stage configs trained as the two-stage ones above: the three savers on the
# command line, the head's levels checkpointed too (``model.bbox_head.with_cp=True``)
ONE_STAGE = ['fcos/fcos_r50_caffe_fpn_gn-head_1x_coco.py',
             'fcos/fcos_center-normbbox-centeronreg-giou_r50_caffe_fpn_gn-head_1x_coco.py',
             'atss/atss_r50_fpn_1x_coco.py', 'gfl/gfl_r50_fpn_1x_coco.py']
ONE_STAGE_SHRINK = ['model.backbone.init_cfg=None', 'data.workers_per_gpu=0',
                    'runner.max_epochs=1', 'log_config.interval=1',
                    'model.test_cfg.score_thr=0.0', 'model.test_cfg.max_per_img=2',
                    'data.train.pipeline.2.img_scale=(96,64)',
                    'data.val.pipeline.1.img_scale=(96,64)',
                    'data.test.pipeline.1.img_scale=(96,64)', 'model.backbone.with_cp=True',
                    'model.bbox_head.with_cp=True', 'fp16.loss_scale=512.',
                    'optimizer_config.cumulative_iters=2']


@pytest.mark.slow
@pytest.mark.parametrize('name', ONE_STAGE)
def test_mmdet_one_stage_config_trains_with_the_savers(name, data_tree, tmp_path, monkeypatch):
    """Each config, unchanged but for its scale, trains an epoch through tools/train.py with
    backbone and head ``with_cp`` + fp16 + ``cumulative_iters`` from the command line, and
    evaluates box AP."""
    from tests.helpers.tools import load_tool

    monkeypatch.chdir(data_tree)
    work_dir = tmp_path / 'work'
    argv = [osp.join(MMDET_CONFIGS, name), '--work-dir', str(work_dir), '--cfg-options',
            *ONE_STAGE_SHRINK]
    assert load_tool('train.py').main(argv) in (None, 0)
    log = open(next(str(p) for p in work_dir.glob('*.log'))).read()
    assert 'GradientCumulativeFp16OptimizerHook' in log and 'loss_scale: 512' in log
    train_lines = [line for line in log.splitlines() if 'Epoch [1][' in line]
    keys = {'fcos': ('loss_cls', 'loss_bbox', 'loss_centerness'),
            'atss': ('loss_cls', 'loss_bbox', 'loss_centerness'),
            'gfl': ('loss_cls', 'loss_bbox', 'loss_dfl')}[name.split('/')[0]]
    for key in keys:
        assert key in train_lines[-1], train_lines[-1]
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    assert 'bbox_mAP:' in val_line


# mmdet's DETR config at a small scale (its AutoAugment policies and the test scale shrunk in a
# config that inherits it), the savers from the command line


@pytest.mark.slow
def test_mmdet_detr_config_trains_with_the_savers(data_tree, tmp_path, monkeypatch):
    """detr_r50_8x2_150e_coco.py, its pipeline's AutoAugment policies at 64-96 px, trains an
    epoch through tools/train.py with backbone and transformer ``with_cp`` + fp16 +
    ``cumulative_iters`` from the command line (the gradient clipping of the config kept), and
    evaluates box AP."""
    from tests.helpers.tools import load_tool

    monkeypatch.chdir(data_tree)
    cfg = Config.fromfile(osp.join(MMDET_CONFIGS, 'detr/detr_r50_8x2_150e_coco.py'))
    pipeline = [dict(t) for t in cfg.data.train.pipeline]
    auto = next(t for t in pipeline if t['type'] == 'AutoAugment')
    auto['policies'] = [
        [dict(type='Resize', img_scale=[(64, 96), (48, 96)], multiscale_mode='value',
              keep_ratio=True)],
        [dict(type='Resize', img_scale=[(40, 200), (48, 200)], multiscale_mode='value',
              keep_ratio=True),
         dict(type='RandomCrop', crop_type='absolute_range', crop_size=(32, 48),
              allow_negative_crop=True),
         dict(type='Resize', img_scale=[(64, 96), (48, 96)], multiscale_mode='value',
              override=True, keep_ratio=True)]]
    small = tmp_path / 'detr_small.py'
    small.write_text(
        f"_base_ = {osp.join(MMDET_CONFIGS, 'detr/detr_r50_8x2_150e_coco.py')!r}\n"
        f"data = dict(train=dict(pipeline={pipeline!r}))\n"
        "data['val'] = data['test'] = dict(pipeline=[\n"
        "    dict(type='LoadImageFromFile'),\n"
        "    dict(type='MultiScaleFlipAug', img_scale=(96, 64), flip=False, transforms=[\n"
        "        dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),\n"
        f"        dict(type='Normalize', **{dict(cfg.img_norm_cfg)!r}),\n"
        "        dict(type='Pad', size_divisor=1), dict(type='ImageToTensor', keys=['img']),\n"
        "        dict(type='Collect', keys=['img'])])])\n")
    work_dir = tmp_path / 'work'
    argv = [str(small), '--work-dir', str(work_dir), '--cfg-options',
            'model.backbone.init_cfg=None', 'data.workers_per_gpu=0', 'runner.max_epochs=1',
            'log_config.interval=1', 'model.test_cfg.max_per_img=2',
            'model.bbox_head.num_query=8', 'model.backbone.with_cp=True',
            'model.bbox_head.with_cp=True', 'fp16.loss_scale=512.',
            'optimizer_config.cumulative_iters=2']
    assert load_tool('train.py').main(argv) in (None, 0)
    log = open(next(str(p) for p in work_dir.glob('*.log'))).read()
    assert 'GradientCumulativeFp16OptimizerHook' in log and 'loss_scale: 512' in log
    train_lines = [line for line in log.splitlines() if 'Epoch [1][' in line]
    for key in ('loss_cls', 'loss_bbox', 'loss_iou', 'd4.loss_cls', 'grad_norm'):
        assert f' {key}: ' in train_lines[-1], train_lines[-1]
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    assert 'bbox_mAP:' in val_line
