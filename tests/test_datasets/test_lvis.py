"""LVISV05Dataset / LVISV1Dataset (mmdet 2.x's) on generated copies in LVIS's real layouts
(v0.5: COCO 2014 names in the json, 2017 files; v1: ``coco_url``; all 1230 / 1203 categories
with their frequencies): annotations as mmdet parses them and ``evaluate`` through the lvis
package giving mmdet 2.28.2's numbers (computed by mmdet on these files and detections)."""
import contextlib
import io
import os.path as osp

import numpy as np
import pytest

from ckptzoo.datasets import LVISV05Dataset, LVISV1Dataset, build_dataset, generate_coco_variant
from ckptzoo.registry import DATASETS
from tests.helpers.fake_detections import fake_results, with_box_masks



def _needs_lvis():
    pytest.importorskip('lvis', reason='lvis (a requirement) is not installed: pip install -c '
                                       '.ci/constraints.txt -e .')

# mmdet 2.28.2's evaluate(metric=['bbox', 'segm']) on each fixture's val split with
# with_box_masks(fake_results(anns, num_classes, span=40))
MMDET = {'LVISV05Dataset': {'bbox_AP': 0.0959,
                    'bbox_AP50': 0.1694,
                    'bbox_AP75': 0.0561,
                    'bbox_APs': 0.1156,
                    'bbox_APm': 0.3535,
                    'bbox_APl': -1.0,
                    'bbox_APr': 0.17,
                    'bbox_APc': -1.0,
                    'bbox_APf': 0.0589,
                    'segm_AP': 0.0497,
                    'segm_AP50': 0.0908,
                    'segm_AP75': 0.0561,
                    'segm_APs': 0.0693,
                    'segm_APm': 0.3535,
                    'segm_APl': -1.0,
                    'segm_APr': 0.0312,
                    'segm_APc': -1.0,
                    'segm_APf': 0.0589},
 'LVISV1Dataset': {'bbox_AP': 0.1525,
                   'bbox_AP50': 0.2657,
                   'bbox_AP75': 0.1122,
                   'bbox_APs': 0.203,
                   'bbox_APm': 0.4545,
                   'bbox_APl': -1.0,
                   'bbox_APr': 0.104,
                   'bbox_APc': -1.0,
                   'bbox_APf': 0.1767,
                   'segm_AP': 0.1122,
                   'segm_AP50': 0.1122,
                   'segm_AP75': 0.1122,
                   'segm_APs': 0.1683,
                   'segm_APm': 0.505,
                   'segm_APl': -1.0,
                   'segm_APr': 0.0,
                   'segm_APc': -1.0,
                   'segm_APf': 0.1683}}

CASES = {'LVISV05Dataset': (LVISV05Dataset, 'lvis_v0.5'),
         'LVISV1Dataset': (LVISV1Dataset, 'lvis_v1')}


@pytest.fixture(scope='module')
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp('lvis')
    return {name: generate_coco_variant(str(base / kind), kind)
            for name, (_, kind) in CASES.items()}


def _ds(roots, name, split, **kw):
    cls, kind = CASES[name]
    root = roots[name]
    img_prefix = osp.join(root, f'{split}2017/') if kind == 'lvis_v0.5' else root + '/'
    return cls(ann_file=osp.join(root, 'annotations', f'{kind}_{split}.json'),
               img_prefix=img_prefix, pipeline=[], test_mode=split == 'val', **kw)


@pytest.mark.parametrize('name', list(CASES))
def test_evaluate_equals_mmdet(roots, name):
    _needs_lvis()
    ds = _ds(roots, name, 'val')
    results = with_box_masks(ds.data_infos, fake_results(
        [ds.get_ann_info(i) for i in range(len(ds))], len(ds.CLASSES), span=40))
    with contextlib.redirect_stdout(io.StringIO()):
        out = ds.evaluate(results, metric=['bbox', 'segm'], classwise=True)
    assert {k: v for k, v in out.items() if 'copypaste' not in k} == MMDET[name]
    assert out['bbox_mAP_copypaste'].startswith(f'AP:{MMDET[name]["bbox_AP"]:.4f} AP50:')


@pytest.mark.parametrize('name', list(CASES))
def test_files_and_labels(roots, name):
    ds = _ds(roots, name, 'train')
    assert len(ds) == 3 and len(ds.CLASSES) == (1230 if name == 'LVISV05Dataset' else 1203)
    for info in ds.data_infos:
        assert osp.isfile(osp.join(ds.img_prefix, info['filename']))
        if name == 'LVISV05Dataset':
            assert len(info['filename']) == 16  # 000000001000.jpg from COCO_val2014_...
        else:
            assert info['filename'].startswith('train2017/')
    labels = np.concatenate([ds.get_ann_info(i)['labels'] for i in range(len(ds))])
    assert set(labels.tolist()) <= {0, 2, 5}  # category ids 1, 3, 6: CLASSES' order


def test_lvis_dataset_is_the_v05_alias():
    assert DATASETS.get('LVISDataset') is LVISV05Dataset


def test_proposal_recall_is_class_agnostic(roots):
    _needs_lvis()
    ds = _ds(roots, 'LVISV1Dataset', 'val')
    anns = [ds.get_ann_info(i) for i in range(len(ds))]
    # every ground-truth box as a proposal: recall 1 whatever the class
    props = [np.hstack([a['bboxes'], np.ones((len(a['bboxes']), 1), np.float32)]) for a in anns]
    with contextlib.redirect_stdout(io.StringIO()):
        out = ds.evaluate(props, metric='proposal')
    assert list(out) == ['AR@300', 'ARs@300', 'ARm@300', 'ARl@300']
    assert out['AR@300'] == 1.0


def test_no_detection_scores_zero(roots):
    _needs_lvis()
    ds = _ds(roots, 'LVISV1Dataset', 'val')
    empty = [[np.zeros((0, 5), np.float32) for _ in ds.CLASSES] for _ in range(len(ds))]
    out = ds.evaluate(empty)
    assert out['bbox_AP'] == 0.0 and out['bbox_APr'] == 0.0


def test_builds_under_class_balanced_dataset(roots):
    root = roots['LVISV1Dataset']
    ds = build_dataset(dict(type='ClassBalancedDataset', oversample_thr=1e-3, dataset=dict(
        type='LVISV1Dataset', ann_file=osp.join(root, 'annotations', 'lvis_v1_train.json'),
        img_prefix=root + '/', pipeline=[dict(type='LoadImageFromFile')])))
    assert len(ds) >= 3 and ds[0]['img'].ndim == 3
