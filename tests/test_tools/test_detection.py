"""mmdet 2.x's RetinaNet-VOC config runs unchanged (given the data) through tools/train.py and
tools/test.py, on a tiny generated VOC07+12 with VOC's class names."""
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from mmengine.config import Config

from ckptzoo.datasets import generate_voc
from ckptzoo.registry import build_detector

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'voc', 'retinanet_r50_fpn_1x_voc0712.py')
# only to keep the test small: no pretrained weights to download, tiny images, one epoch
SHRINK = ['model.backbone.init_cfg=None', 'data.train.times=1', 'data.workers_per_gpu=0',
          'runner.max_epochs=1', 'log_config.interval=1',
          'data.train.dataset.pipeline.2.img_scale=(96,64)',
          'data.val.pipeline.1.img_scale=(96,64)', 'data.test.pipeline.1.img_scale=(96,64)']


def _run(script, args, cwd):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', script)] + args, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_unmodified_mmdet_config_builds():
    cfg = Config.fromfile(CONFIG)
    model = build_detector(cfg.model)
    keys = model.state_dict().keys()
    for key in ('backbone.layer4.2.bn3.running_var', 'neck.lateral_convs.0.conv.weight',
                'neck.fpn_convs.4.conv.weight', 'bbox_head.cls_convs.3.conv.weight',
                'bbox_head.retina_cls.weight', 'bbox_head.retina_reg.bias'):
        assert key in keys
    assert model.bbox_head.retina_cls.out_channels == 9 * 20
    assert cfg.data.train.type == 'RepeatDataset' and len(cfg.data.train.dataset.ann_file) == 2


@pytest.mark.slow
@pytest.mark.subprocess
def test_train_then_test_on_generated_voc0712(tmp_path):
    for year, seed in (('VOC2007', 0), ('VOC2012', 1)):
        generate_voc(str(tmp_path / 'data'), num_trainval=4, num_test=4, img_size=(64, 96),
                     seed=seed, year=year, names=('aeroplane', 'bicycle', 'bird'))
    work = tmp_path / 'work'
    proc = _run('train.py', [CONFIG, '--work-dir', str(work), '--cfg-options'] + SHRINK,
                str(tmp_path))
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert 'Epoch [1][4/4]' in log and 'loss_cls' in log and 'eta' in log
    assert 'Epoch(val) [1][4]' in log and 'mAP' in log
    ckpt = torch.load(work / 'epoch_1.pth', map_location='cpu', weights_only=True)
    assert ckpt['meta']['CLASSES'][:3] == ['aeroplane', 'bicycle', 'bird']
    assert ckpt['meta']['iter'] == 4
    proc = _run('test.py', [CONFIG, str(work / 'epoch_1.pth'), '--eval', 'mAP', '--out',
                            str(tmp_path / 'results.pkl'), '--cfg-options'] + SHRINK,
                str(tmp_path))
    assert "OrderedDict([('mAP'," in proc.stdout
    import mmengine
    results = mmengine.load(str(tmp_path / 'results.pkl'))
    assert len(results) == 4 and len(results[0]) == 20  # per image, per class
    assert all(r.shape[1] == 5 for r in results[0])
