"""OpenImagesDataset / OpenImagesChallengeDataset (mmdet 2.x's) on a generated Open Images in
its real formats (CSV boxes, label CSV, hierarchy json / relation matrix, image-level labels,
meta pickle; the challenge's txt): annotations and hierarchy as mmdet reads them, and the
hierarchy-aware Open Images mAP equal to mmdet 2.28.2's on this fixture (computed by mmdet on
these files and detections)."""
import copy
import os.path as osp

import numpy as np
import pytest

from ckptzoo.datasets import (OpenImagesChallengeDataset, OpenImagesDataset, build_dataset,
                              generate_openimages)
from tests.helpers.fake_detections import fake_results

# mmdet 2.28.2's evaluate(**kwargs) on the validation split with _results(ds) below; the
# challenge's files hold the same data, so its numbers are the same
MMDET = [
    (dict(), {'AP50': 0.555, 'mAP': 0.5548847913742065}),
    (dict(iou_thr=[0.5, 0.75], ioa_thr=[0.5, 0.5]),
     {'AP50': 0.555, 'AP75': 0.081, 'mAP': 0.3179643675684929}),
    (dict(use_group_of=False, ioa_thr=None), {'AP50': 0.544, 'mAP': 0.5443552136421204}),
]


@pytest.fixture(scope='module')
def root(tmp_path_factory):
    return generate_openimages(str(tmp_path_factory.mktemp('oi') / 'OpenImages'),
                               num_train=6, num_val=10)


def _v6(root, split):
    a = osp.join(root, 'annotations', '')
    kw = dict(label_file=a + 'class-descriptions-boxable.csv',
              hierarchy_file=a + 'bbox_labels_600_hierarchy.json', pipeline=[])
    if split == 'train':
        return OpenImagesDataset(ann_file=a + 'oidv6-train-annotations-bbox.csv',
                                 img_prefix=osp.join(root, 'OpenImages', 'train', ''), **kw)
    return OpenImagesDataset(
        ann_file=a + 'validation-annotations-bbox.csv',
        img_prefix=osp.join(root, 'OpenImages', 'validation', ''), test_mode=True,
        meta_file=a + 'validation-image-metas.pkl',
        image_level_ann_file=a + 'validation-annotations-human-imagelabels-boxable.csv', **kw)


def _challenge(root, split):
    c = osp.join(root, 'challenge2019', '')
    kw = dict(label_file=c + 'cls-label-description.csv',
              hierarchy_file=c + 'class_label_tree.np', pipeline=[],
              img_prefix=osp.join(root, 'OpenImages', ''))
    if split == 'train':
        return OpenImagesChallengeDataset(ann_file=c + 'challenge-2019-train-detection-bbox.txt',
                                          **kw)
    return OpenImagesChallengeDataset(
        ann_file=c + 'challenge-2019-validation-detection-bbox.txt', test_mode=True,
        meta_file=c + 'challenge-2019-validation-metas.pkl',
        image_level_ann_file=c + 'challenge-2019-validation-detection-human-imagelabels.csv',
        **kw)


def _results(ds):
    pix = []
    for i, (h, w) in enumerate(ds.get_img_shapes()):
        ann = dict(ds.get_ann_info(i))
        ann['bboxes'] = ann['bboxes'] * np.array([w, h, w, h], np.float32)
        pix.append(ann)
    return fake_results(pix, len(ds.CLASSES), span=40, n_extra=2)


@pytest.mark.parametrize('make', [_v6, _challenge])
@pytest.mark.parametrize('kwargs,expected', MMDET)
def test_evaluate_equals_mmdet(root, make, kwargs, expected):
    ds = make(root, 'validation')
    results = _results(ds)
    before = copy.deepcopy(results)
    assert dict(ds.evaluate(results, **kwargs)) == expected
    # mmdet rewrote the caller's results in place: not here
    assert all(np.array_equal(a, b) for r, s in zip(results, before) for a, b in zip(r, s))


@pytest.mark.parametrize('make', [_v6, _challenge])
def test_classes_hierarchy_and_annotations(root, make):
    ds = make(root, 'train')
    assert ds.CLASSES == ['Animal', 'Cat', 'Dog', 'Vehicle', 'Car', 'Person']
    tree = np.eye(6)
    tree[1, 0] = tree[2, 0] = tree[4, 3] = 1  # Cat, Dog < Animal; Car < Vehicle
    np.testing.assert_array_equal(ds.class_label_tree, tree)
    ann = ds.get_ann_info(0)
    assert ann['bboxes'].dtype == np.float32 and (ann['bboxes'] <= 1).all()  # normalised
    assert ann['gt_is_group_ofs'].dtype == bool
    assert set(ds.get_cat_ids(0)) <= {1, 2, 4}
    assert (ds.flag == 0).all()


def test_v6_annotation_flags_and_image_labels(root):
    ds = _v6(root, 'validation')
    ann = ds.get_ann_info(0)
    for key in ('is_occludeds', 'is_truncateds', 'is_depictions', 'is_insides'):
        assert ann[key].dtype == bool and len(ann[key]) == len(ann['labels'])
    levels = ds.get_image_level_ann(ds.image_level_ann_file)
    assert len(levels) == len(ds) and 5 in levels[1]['image_level_labels']  # Person, no box
    assert 0.0 in levels[0]['confidences']  # a negative label


def test_sizes_without_a_meta_file_come_from_the_images(root):
    ds = _v6(root, 'validation')
    from_meta = ds.get_img_shapes()
    ds.load_from_file = False
    assert ds.get_img_shapes() == from_meta


def test_bad_files(root):
    a = osp.join(root, 'annotations', '')
    with pytest.raises(ValueError, match='label_file'):
        OpenImagesDataset(ann_file=a + 'validation-annotations-bbox.csv', pipeline=[],
                          label_file=a + 'bbox_labels_600_hierarchy.json',
                          hierarchy_file=a + 'bbox_labels_600_hierarchy.json')
    with pytest.raises(ValueError, match='hierarchy_file'):
        OpenImagesDataset(ann_file=a + 'validation-annotations-bbox.csv', pipeline=[],
                          label_file=a + 'class-descriptions-boxable.csv')
    with pytest.raises(ValueError, match='txt'):
        OpenImagesChallengeDataset(ann_file=a + 'validation-annotations-bbox.csv', pipeline=[])


def test_trains_with_denormalised_boxes(root):
    a = osp.join(root, 'annotations', '')
    ds = build_dataset(dict(
        type='OpenImagesDataset', ann_file=a + 'oidv6-train-annotations-bbox.csv',
        img_prefix=osp.join(root, 'OpenImages', 'train', ''),
        label_file=a + 'class-descriptions-boxable.csv',
        hierarchy_file=a + 'bbox_labels_600_hierarchy.json',
        pipeline=[dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, denorm_bbox=True)]))
    out = ds[0]
    h, w = out['img'].shape[:2]
    assert out['gt_bboxes'].max() > 1 and (out['gt_bboxes'][:, 2] <= w).all()
