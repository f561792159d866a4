"""WIDERFaceDataset (mmdet 2.x's) on a generated WIDER Face in its converted VOC layout: the
images are read from the XML's folder, ``min_size`` ignores small faces in training, and
``evaluate`` gives mmdet 2.28.2's numbers (computed by mmdet on this fixture and these
detections: area AP, no legacy +1)."""
import os.path as osp

import numpy as np
import pytest

from ckptzoo.datasets import WIDERFaceDataset, build_dataset, generate_wider_face
from tests.helpers.fake_detections import fake_results


@pytest.fixture(scope='module')
def wider(tmp_path_factory):
    return generate_wider_face(str(tmp_path_factory.mktemp('wider') / 'WIDERFace'),
                               num_train=6, num_val=6)


def _ds(root, split, **kw):
    return WIDERFaceDataset(ann_file=osp.join(root, f'{split}.txt'),
                            img_prefix=osp.join(root, f'WIDER_{split}/'), pipeline=[], **kw)


def test_layout_and_parsing(wider):
    ds = _ds(wider, 'val', test_mode=True)
    assert ds.CLASSES == ('face', ) and len(ds) == 6
    info = ds.data_infos[0]
    assert info['filename'] == osp.join('0--Parade', f'{info["id"]}.jpg')
    assert osp.isfile(osp.join(ds.img_prefix, info['filename']))
    ann = ds.get_ann_info(0)
    assert ann['bboxes'].dtype == np.float32 and ann['labels'].dtype == np.int64
    assert set(ann['labels'].tolist()) <= {0}


def test_min_size_ignores_small_faces_in_training(wider):
    plain, small = _ds(wider, 'train'), _ds(wider, 'train', min_size=17)
    n_ignored = sum(len(small.get_ann_info(i)['bboxes_ignore']) for i in range(len(small)))
    assert n_ignored == 6 and not any(len(plain.get_ann_info(i)['bboxes_ignore'])
                                      for i in range(len(plain)))
    for i in range(len(small)):
        wh = small.get_ann_info(i)['bboxes'][:, 2:] - small.get_ann_info(i)['bboxes'][:, :2]
        assert (wh >= 17).all()
    with pytest.raises(ValueError, match='min_size'):
        _ds(wider, 'val', min_size=17, test_mode=True).get_ann_info(0)


def test_evaluate_equals_mmdet(wider):
    ds = _ds(wider, 'val', test_mode=True)
    results = fake_results([ds.get_ann_info(i) for i in range(len(ds))], 1)
    out = ds.evaluate(results, iou_thr=0.5)
    assert out['AP50'] == 0.445 and out['mAP'] == pytest.approx(0.4446428716182709, abs=1e-12)
    out = ds.evaluate(results, iou_thr=[0.5, 0.75])
    assert (out['AP50'], out['AP75']) == (0.445, 0.068)
    assert out['mAP'] == pytest.approx(0.2562500089406967, abs=1e-12)


def test_builds_from_mmdets_config_schema(wider):
    ds = build_dataset(dict(type='RepeatDataset', times=2, dataset=dict(
        type='WIDERFaceDataset', ann_file=osp.join(wider, 'train.txt'),
        img_prefix=osp.join(wider, 'WIDER_train/'), min_size=17,
        pipeline=[dict(type='LoadImageFromFile', to_float32=True),
                  dict(type='LoadAnnotations', with_bbox=True)])))
    assert len(ds) == 12 and ds[0]['img'].dtype == np.float32
