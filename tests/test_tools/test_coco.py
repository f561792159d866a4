"""mmdet 2.28.2's own retinanet_r50_fpn_1x_coco.py trains and evaluates through tools/train.py
and tools/test.py on a generated COCO tree; tools/test.py's bbox metrics equal pycocotools'
COCOeval run directly on the json it wrote."""
import contextlib
import importlib.util
import io
import json
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from ckptzoo.datasets import generate_coco
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
_SPEC = importlib.util.find_spec('mmdet')  # the package folder; mmdet is never imported
CONFIG = None if _SPEC is None else osp.join(
    _SPEC.submodule_search_locations[0], '.mim', 'configs', 'retinanet',
    'retinanet_r50_fpn_1x_coco.py')
# Only to keep the run small: no pretrained file, ResNet-18 depth, batch 1, 96x64 images, one
# epoch of 2 images (the generator's second image has no object: filtered out).
# score_thr=0 gives the 2-iteration model detections to score (at 0.05 it has none).
SHRINK = ['model.backbone.init_cfg=None', 'model.backbone.depth=18',
          'model.neck.in_channels=[64,128,256,512]', 'data.samples_per_gpu=1',
          'data.workers_per_gpu=0',
          'runner.max_epochs=1',
          'log_config.interval=1', 'data.train.pipeline.2.img_scale=(96,64)',
          'data.val.pipeline.1.img_scale=(96,64)', 'data.test.pipeline.1.img_scale=(96,64)',
          'model.test_cfg.score_thr=0.0']
# the three memory savers, from the command line
# and the best checkpoint by bbox_mAP
SAVERS = ['evaluation.save_best=auto', 'model.backbone.with_cp=True', 'fp16.loss_scale=512.',
          'optimizer_config.cumulative_iters=2']
KEYS = ('bbox_mAP', 'bbox_mAP_50', 'bbox_mAP_75', 'bbox_mAP_s', 'bbox_mAP_m', 'bbox_mAP_l')

pytestmark = pytest.mark.skipif(CONFIG is None, reason='mmdet 2.28.2 (its configs) is not '
                                'installed: pip install -c .ci/constraints.txt -e ".[test]"')


def _run(script, args, cwd):
    proc = subprocess.run([sys.executable, osp.join(ROOT, 'tools', script)] + args, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _metrics(text):
    return {k: float(re.search(rf"\b{k}'?[:,] (-?[0-9.]+)", text).group(1)) for k in KEYS}


def _tool():
    return load_tool('test.py')


@pytest.mark.slow
@pytest.mark.subprocess
def test_mmdet_coco_config_trains_tests_and_matches_cocoeval(tmp_path, monkeypatch, capsys):
    data = generate_coco(str(tmp_path / 'data' / 'coco'), num_train=3, num_val=3,
                         img_size=(64, 96), names=('person', 'bicycle', 'car'),
                         cat_ids=(1, 2, 3))
    work = tmp_path / 'work'
    _run('train.py', [CONFIG, '--work-dir', str(work), '--cfg-options'] + SHRINK + SAVERS,
         str(tmp_path))
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert 'Epoch [1][2/2]' in log and 'loss_cls' in log
    assert '(40 ) GradientCumulativeFp16OptimizerHook' in log and 'loss_scale: 512' in log
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    trained = _metrics(val_line)
    assert 'bbox_mAP_copypaste' in val_line
    assert (work / 'best_bbox_mAP_epoch_1.pth').is_file()

    prefix = str(tmp_path / 'out' / 'dets')
    proc = _run('test.py', [CONFIG, str(work / 'epoch_1.pth'), '--eval', 'bbox',
                            '--eval-options', f'jsonfile_prefix={prefix}', '--cfg-options']
                + SHRINK, str(tmp_path))
    tested = _metrics(proc.stdout.split('OrderedDict', 1)[1])
    assert tested == trained

    dets = json.load(open(prefix + '.bbox.json'))
    # score_thr 0: detections (those of the 77 classes the json lacks are left out of it)
    assert dets and {d['image_id'] for d in dets} <= {500000, 500007, 500014}
    assert {d['category_id'] for d in dets} <= {1, 2, 3}
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(osp.join(data, 'annotations', 'instances_val2017.json'))
        coco_eval = COCOeval(gt, gt.loadRes(dets), 'bbox')
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    direct = {k: float(f'{coco_eval.stats[i]:.4f}') for i, k in enumerate(KEYS)}
    assert direct == tested

    # --format-only writes the same submission file (in-process: one interpreter less)
    monkeypatch.chdir(tmp_path)
    _tool().main([CONFIG, str(work / 'epoch_1.pth'), '--format-only', '--eval-options',
                  f'jsonfile_prefix={tmp_path / "sub"}', '--cfg-options'] + SHRINK)
    assert 'bbox results written to' in capsys.readouterr().out
    assert json.load(open(tmp_path / 'sub.bbox.json')) == json.load(open(prefix + '.bbox.json'))


def test_format_only_arguments():
    tool = _tool()
    with pytest.raises(SystemExit):  # the files would vanish with a temporary folder
        tool.parse_args([CONFIG, 'x.pth', '--format-only'])
    with pytest.raises(SystemExit):
        tool.parse_args([CONFIG, 'x.pth', '--format-only', '--eval', 'bbox',
                         '--eval-options', 'jsonfile_prefix=a'])
