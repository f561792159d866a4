"""The CPU Panoptic FPN config (configs/coco/panoptic_fpn_r18_fpn_synthetic_coco_panoptic_cp.py)
trains through tools/train.py on its generated COCO panoptic data, and tools/test.py --eval pq
(mmdet's lower-case alias of PQ) gives the training log's PQ; the PNGs and json it writes
evaluate to the same numbers through the PQ library directly."""
import json
import os.path as osp
import re

import pytest

from ckptzoo.evaluation.panoptic_quality import parse_pq_results, pq_compute
from tests.helpers.tools import load_tool

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIG = osp.join(ROOT, 'configs', 'coco', 'panoptic_fpn_r18_fpn_synthetic_coco_panoptic_cp.py')
# one short epoch on a few images, evaluated at its end
SHRINK = ['synthetic_data.num_train=16', 'synthetic_data.num_val=4', 'runner.max_epochs=1',
          'evaluation.interval=1', 'checkpoint_config.interval=1', 'log_config.interval=1',
          'lr_config.warmup_iters=2']
KEYS = ('PQ', 'SQ', 'RQ', 'PQ_th', 'SQ_th', 'RQ_th', 'PQ_st', 'SQ_st', 'RQ_st')


@pytest.mark.slow
def test_cpu_panoptic_fpn_config_trains_and_tests(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # data_root is relative: data/synthetic_coco_panoptic/
    work = tmp_path / 'work'
    assert load_tool('train.py').main([CONFIG, '--work-dir', str(work), '--cfg-options',
                                       *SHRINK]) in (None, 0)
    log = open(next(str(p) for p in work.glob('*.log'))).read()
    assert 'loss_seg' in log and 'loss_mask' in log
    val_line = next(line for line in log.splitlines() if 'Epoch(val) [1]' in line)
    trained = {k: float(re.search(rf'\b{k}: (-?[0-9.]+)', val_line).group(1)) for k in KEYS}
    assert (work / 'best_PQ_epoch_1.pth').exists()
    capsys.readouterr()

    prefix = str(tmp_path / 'out' / 'results')
    load_tool('test.py').main([CONFIG, str(work / 'epoch_1.pth'), '--eval', 'pq',
                               '--eval-options', f'jsonfile_prefix={prefix}',
                               '--cfg-options', *SHRINK])
    out = capsys.readouterr().out
    tested = eval(out.strip().splitlines()[-1])  # the metric dict tools/test.py prints
    assert {k: round(tested[k], 4) for k in KEYS} == trained

    # the written PNGs + json, evaluated directly, give the same numbers
    data = osp.join('data', 'synthetic_coco_panoptic', 'annotations')
    gt = json.load(open(osp.join(data, 'panoptic_val2017.json')))
    pred = {a['image_id']: a for a in json.load(open(f'{prefix}.panoptic.json'))['annotations']}
    cats = {c['id']: c for c in gt['categories']}
    stat = pq_compute([(a, pred[a['image_id']]) for a in gt['annotations']],
                      osp.join(data, 'panoptic_val2017'), str(tmp_path / 'out' / 'panoptic'),
                      cats)
    direct = parse_pq_results({name: stat.pq_average(cats, isthing)[0] for name, isthing in
                               (('All', None), ('Things', True), ('Stuff', False))})
    assert direct == pytest.approx({k: tested[k] for k in KEYS})

    with pytest.raises(SystemExit, match=r"--eval 'mAP' is not a metric of CocoPanopticDataset: "
                                         r"allowed 'PQ', 'pq', 'bbox', 'segm', 'proposal'"):
        load_tool('test.py').main([CONFIG, str(work / 'epoch_1.pth'), '--eval', 'mAP',
                                   '--cfg-options', *SHRINK])
