"""The CPU Mask R-CNN config (configs/coco/mask_rcnn_r18_fpn_synthetic_coco_cp.py) trains
through tools/train.py on its generated COCO data, and tools/test.py --eval bbox segm gives the
training log's box and mask AP, which equal pycocotools' COCOeval run directly on the json
files it wrote."""
import contextlib
import io
import json
import os.path as osp
import re

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'coco', 'mask_rcnn_r18_fpn_synthetic_coco_cp.py')
# one short epoch on a few images, evaluated at its end (the README's numbers are the config's)
SHRINK = ['synthetic_data.num_train=16', 'synthetic_data.num_val=4', 'runner.max_epochs=1',
          'evaluation.interval=1', 'checkpoint_config.interval=1', 'log_config.interval=1',
          'lr_config.warmup_iters=2', 'model.test_cfg.rcnn.score_thr=0.0']
STATS = ('mAP', 'mAP_50', 'mAP_75', 'mAP_s', 'mAP_m', 'mAP_l')


def _metrics(text, kind):
    return {k: float(re.search(rf"\b{kind}_{k}'?[:,] (-?[0-9.]+)", text).group(1))
            for k in STATS}


def _cocoeval(gt_file, dets, kind):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_file)
        coco_eval = COCOeval(gt, gt.loadRes(dets), kind)
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return {k: float(f'{coco_eval.stats[i]:.4f}') for i, k in enumerate(STATS)}


@pytest.mark.slow
def test_cpu_mask_rcnn_config_trains_tests_and_matches_cocoeval(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the config's data_root is relative: data/synthetic_coco/
    work = tmp_path / 'work'
    assert load_tool('train.py').main([CONFIG, '--work-dir', str(work), '--cfg-options',
                                       *SHRINK]) in (None, 0)
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert 'Epoch [1][' in log and 'loss_mask' in log
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    trained = {kind: _metrics(val_line, kind) for kind in ('bbox', 'segm')}
    capsys.readouterr()

    prefix = str(tmp_path / 'out' / 'dets')
    load_tool('test.py').main([CONFIG, str(work / 'epoch_1.pth'), '--eval', 'bbox', 'segm',
                               '--eval-options', f'jsonfile_prefix={prefix}',
                               '--cfg-options', *SHRINK])
    out = capsys.readouterr().out
    tested = {kind: _metrics(out.split('OrderedDict', 1)[1], kind) for kind in ('bbox', 'segm')}
    assert tested == trained

    gt_file = osp.join('data', 'synthetic_coco', 'annotations', 'instances_val2017.json')
    for kind in ('bbox', 'segm'):
        dets = json.load(open(f'{prefix}.{kind}.json'))
        assert dets, kind  # score_thr 0: every image has detections
        if kind == 'segm':
            assert all(isinstance(d['segmentation']['counts'], str) for d in dets)
            for d in dets:  # as mmdet: the area of a mask prediction is its mask's, not its box's
                d.pop('bbox')
        assert _cocoeval(gt_file, dets, kind) == tested[kind], kind
