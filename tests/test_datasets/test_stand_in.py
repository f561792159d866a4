"""``StandInDataset``: pipeline outputs of a fixed shape and box count, standing in for a
training set not on disk; its batches are those of the real pipeline."""
import numpy as np
import pytest
import torch

from ckptzoo.datasets import StandInDataset, build_dataloader, build_dataset
from ckptzoo.datasets.pipelines.formatting import DEFAULT_META_KEYS


def test_detection_samples_are_what_collect_gives():
    ds = build_dataset(dict(type='StandInDataset', shape=(48, 80), num_classes=5,
                            num_samples=3, boxes_per_image=7))
    sample = ds[1]
    assert list(sample) == ['img_metas', 'img', 'gt_bboxes', 'gt_labels']
    assert sample['img'].shape == (3, 48, 80) and sample['img'].dtype == torch.float32
    assert sorted(sample['img_metas']) == sorted(DEFAULT_META_KEYS)
    meta = sample['img_metas']
    assert meta['img_shape'] == meta['pad_shape'] == meta['ori_shape'] == (48, 80, 3)
    boxes, labels = sample['gt_bboxes'], sample['gt_labels']
    assert boxes.shape == (7, 4) and boxes.dtype == torch.float32
    assert labels.shape == (7, ) and labels.dtype == torch.int64
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 2] <= 80).all() and (boxes[:, 3] <= 48).all()
    assert (boxes[:, 2:] > boxes[:, :2]).all()
    assert labels.min() >= 0 and labels.max() < 5
    torch.testing.assert_close(ds[1]['gt_bboxes'], boxes)  # the same every time
    assert not torch.equal(ds[0]['gt_bboxes'], boxes)
    assert ds.CLASSES == tuple(f'class_{k}' for k in range(5))
    assert ds.flag.tolist() == [1, 1, 1]  # wider than high, as CustomDataset groups it


def test_a_loader_batches_it_like_the_real_pipeline():
    ds = StandInDataset((64, 32), 3, num_samples=2, boxes_per_image=4,
                        keys=['img', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore'],
                        meta_keys=('img_shape', 'pad_shape', 'scale_factor', 'flip'),
                        img_norm_cfg=dict(mean=np.ones(3), std=np.ones(3), to_rgb=True))
    assert ds.flag.tolist() == [0, 0]
    batch = next(iter(build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, seed=0)))
    assert batch['img'].shape == (2, 3, 64, 32)
    assert [b.shape for b in batch['gt_bboxes']] == [(4, 4)] * 2
    assert [b.shape for b in batch['gt_bboxes_ignore']] == [(0, 4)] * 2
    assert sorted(batch['img_metas'][0]) == ['flip', 'img_shape', 'pad_shape', 'scale_factor']


def test_classification_samples():
    ds = StandInDataset((32, 32), 4, num_samples=2, task='classification')
    sample = ds[0]
    assert list(sample) == ['img', 'gt_label'] and sample['gt_label'].dtype == torch.int64
    assert sample['img'].shape == (3, 32, 32) and not hasattr(ds, 'flag')
    assert ds.boxes_per_image is None


@pytest.mark.parametrize('kwargs, message', [
    (dict(shape=(0, 32)), r'shape must be \(H, W\), two positive ints, or a list of them, got \(0, 32\)'),
    (dict(shape=640), r'shape must be \(H, W\), two positive ints, or a list of them, got 640'),
    (dict(boxes_per_image=0), 'boxes_per_image must be a positive int, got 0'),
    (dict(num_classes=2.0), 'num_classes must be a positive int, got 2.0'),
    (dict(task='segmentation'), "task must be 'detection' or 'classification', got "
     "'segmentation'"),
    (dict(keys=['img', 'gt_masks']), r"the stand-in for a detection training set makes the "
     r"Collect keys \['img', 'gt_bboxes', 'gt_labels', 'gt_bboxes_ignore'\] \(img among "
     r"them\), got \['img', 'gt_masks'\]"),
    (dict(meta_keys=('img_shape', 'crop_box')), r"not \['crop_box'\]"),
])
def test_bad_arguments_are_named(kwargs, message):
    args = dict(shape=(32, 32), num_classes=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        StandInDataset(**args)


@pytest.mark.parametrize('poly2mask', [True, False])
def test_a_mask_models_samples_carry_one_mask_per_box(poly2mask):
    from ckptzoo.core.mask import BitmapMasks, PolygonMasks
    ds = StandInDataset((48, 80), 3, num_samples=2, boxes_per_image=5,
                        keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks'], poly2mask=poly2mask)
    sample = ds[0]
    masks, boxes = sample['gt_masks'], sample['gt_bboxes']
    assert isinstance(masks, BitmapMasks if poly2mask else PolygonMasks)
    assert len(masks) == 5 and (masks.height, masks.width) == (48, 80)
    for bitmap, box in zip(masks.to_ndarray().astype(bool), boxes.numpy()):  # the box, filled
        ys, xs = np.nonzero(bitmap)
        np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box,
                                   atol=1)
    batch = next(iter(build_dataloader(ds, samples_per_gpu=2, workers_per_gpu=0, seed=0)))
    assert [len(m) for m in batch['gt_masks']] == [5, 5]
    with pytest.raises(ValueError, match=r"got \['img', 'gt_masks'\]; 'gt_masks' \(one mask "
                                         r"per box\) goes with gt_bboxes"):
        StandInDataset((48, 80), 3, keys=['img', 'gt_masks'])
