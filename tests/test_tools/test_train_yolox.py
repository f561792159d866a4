"""YOLOX trained by tools/train.py from mmdet 2.28.2's ``yolox_tiny`` config (tiny widths, a
synthetic COCO, 4 epochs, the last one switched): the mixing pipeline, the random resizing,
the YOLOX lr, the mode switch, SyncNormHook, the EMA and the dynamic evaluation interval all run,
and a run resumed in a fresh process inside an epoch before the switch, or after it, ends
with the uninterrupted run's weights (EMA included) bit for bit."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch

from tests.helpers.mmdet_config_count import mmdet_configs_root

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
MMDET = mmdet_configs_root()
CFG = """_base_ = '{base}'
synthetic_data = dict(format='coco', root='{root}', num_train=8, num_val=2,
                      img_size=((48, 80), (48, 80)))
img_scale = (64, 64)
classes = ('circle', 'square', 'triangle')
model = dict(input_size=img_scale, random_size_range=(1, 3), random_size_interval=2,
             backbone=dict(deepen_factor=0.33, widen_factor=0.125),
             neck=dict(in_channels=[32, 64, 128], out_channels=16),
             bbox_head=dict(num_classes=3, in_channels=16, feat_channels=16))
train_pipeline = [
    dict(type='Mosaic', img_scale=img_scale, pad_val=114.0),
    dict(type='RandomAffine', scaling_ratio_range=(0.5, 1.5),
         border=(-img_scale[0] // 2, -img_scale[1] // 2)),
    dict(type='MixUp', img_scale=img_scale, ratio_range=(0.8, 1.6), pad_val=114.0),
    dict(type='YOLOXHSVRandomAug'),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Resize', img_scale=img_scale, keep_ratio=True),
    dict(type='Pad', pad_to_square=True, pad_val=dict(img=(114.0, 114.0, 114.0))),
    dict(type='FilterAnnotations', min_gt_bbox_wh=(1, 1), keep_empty=False),
    dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels'])]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='MultiScaleFlipAug', img_scale=img_scale, flip=False,
         transforms=[dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),
                     dict(type='Pad', pad_to_square=True, pad_val=dict(img=(114.0, 114.0, 114.0))),
                     dict(type='DefaultFormatBundle'), dict(type='Collect', keys=['img'])])]
root = '{root}/'
data = dict(samples_per_gpu=2, workers_per_gpu=0, persistent_workers=False,
            train=dict(dataset=dict(ann_file=root + 'annotations/instances_train2017.json',
                                    img_prefix=root + 'train2017/', classes=classes),
                       pipeline=train_pipeline),
            val=dict(ann_file=root + 'annotations/instances_val2017.json',
                     img_prefix=root + 'val2017/', classes=classes, pipeline=test_pipeline),
            test=dict(ann_file=root + 'annotations/instances_val2017.json',
                      img_prefix=root + 'val2017/', classes=classes, pipeline=test_pipeline))
max_epochs = 4
num_last_epochs = 1
lr_config = dict(warmup_iters=1, num_last_epochs=num_last_epochs)
runner = dict(max_epochs=max_epochs)
custom_hooks = [
    dict(type='YOLOXModeSwitchHook', num_last_epochs=num_last_epochs, priority=48),
    dict(type='SyncNormHook', num_last_epochs=num_last_epochs, interval=2, priority=48),
    dict(type='ExpMomentumEMAHook', resume_from=None, momentum=0.0001, priority=49)]
checkpoint_config = dict(interval=1, by_epoch=False)
evaluation = dict(interval=2, dynamic_intervals=[(max_epochs - num_last_epochs, 1)])
log_config = dict(interval=1)
seed = 0
"""

pytestmark = [pytest.mark.slow, pytest.mark.subprocess,
              pytest.mark.skipif(MMDET is None, reason='mmdet 2.28.2 (its configs) not installed')]


def _train(args):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', 'train.py')] + args,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _load(path):
    return torch.load(path, map_location='cpu', weights_only=True)


def test_yolox_tiny_config_trains_and_resumes_exactly(tmp_path):
    cfg = tmp_path / 'yolox.py'
    cfg.write_text(CFG.format(base=osp.join(MMDET, 'yolox', 'yolox_tiny_8x8_300e_coco.py'),
                              root=str(tmp_path / 'coco')))
    _train([str(cfg), '--work-dir', str(tmp_path / 'full')])
    full = _load(tmp_path / 'full' / 'latest.pth')
    assert full['meta']['iter'] == 16
    assert full['state_dict']._metadata['']['yolox_progress_in_iter'] == 16
    assert any(k.startswith('ema_') for k in full['state_dict'])
    log = next(p for p in (tmp_path / 'full').iterdir() if p.suffix == '.log').read_text()
    assert 'No mosaic and mixup aug now!' in log and 'loss_l1' in log
    assert log.count('Epoch(val)') == 3  # epoch 2 (interval 2), then every epoch from 3
    for stop in (6, 9):  # inside epoch 2 (before the switch), inside epoch 3 (after it)
        work = tmp_path / f'resumed_{stop}'
        _train([str(cfg), '--work-dir', str(work), '--resume-from',
                str(tmp_path / 'full' / f'iter_{stop}.pth')])
        resumed = _load(work / 'latest.pth')
        for key, value in full['state_dict'].items():
            torch.testing.assert_close(resumed['state_dict'][key], value, rtol=0, atol=0,
                                       msg=f'{key} after resuming at {stop}')
