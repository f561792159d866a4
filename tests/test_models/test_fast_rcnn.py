"""Fast R-CNN: the proposals of a ``proposal_file`` through ``LoadProposals``, ``Collect`` and
``collate`` into ``forward_train(..., proposals=)`` and the test; a proposal file of the wrong
length fails before training, naming the file. The audit against mmdet 2.28.2 (same weights,
batch, proposals and seed) found losses, gradients and detections equal."""
import os.path as osp
import pickle

import numpy as np
import pytest
import torch

from ckptzoo.datasets import CocoDataset, build_dataloader, generate_coco
from ckptzoo.datasets.pipelines import LoadProposals
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.rcnn_variants import fast_rcnn_cfg, masks_batch, train_step

one_thread = pytest.fixture(autouse=True)(one_thread)

TRAIN_PIPELINE = [
    dict(type='LoadImageFromFile'), dict(type='LoadProposals', num_max_proposals=3),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', img_scale=(64, 48), keep_ratio=True),
    dict(type='RandomFlip', flip_ratio=0.5),
    dict(type='Normalize', mean=[0, 0, 0], std=[1, 1, 1], to_rgb=True),
    dict(type='Pad', size_divisor=32), dict(type='DefaultFormatBundle'),
    dict(type='Collect', keys=['img', 'proposals', 'gt_bboxes', 'gt_labels'])]
TEST_PIPELINE = [
    dict(type='LoadImageFromFile'), dict(type='LoadProposals', num_max_proposals=None),
    dict(type='MultiScaleFlipAug', img_scale=(64, 48), flip=False, transforms=[
        dict(type='Resize', keep_ratio=True), dict(type='RandomFlip'),
        dict(type='Normalize', mean=[0, 0, 0], std=[1, 1, 1], to_rgb=True),
        dict(type='Pad', size_divisor=32), dict(type='ImageToTensor', keys=['img']),
        dict(type='ToTensor', keys=['proposals']),
        dict(type='ToDataContainer', fields=[dict(key='proposals', stack=False)]),
        dict(type='Collect', keys=['img', 'proposals'])])]


def _model():
    torch.manual_seed(0)
    return build_detector(fast_rcnn_cfg())


@pytest.fixture(scope='module')
def coco(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('fast') / 'coco')
    generate_coco(root, num_train=3, num_val=2, img_size=(48, 64), max_objects=2,
                  names=('person', 'bicycle', 'car'), cat_ids=(1, 2, 3))
    rng = np.random.default_rng(0)
    for split, n in (('train2017', 3), ('val2017', 2)):
        boxes = [np.hstack([np.sort(rng.uniform(0, 48, (5, 4)), 1), rng.uniform(0, 1, (5, 1))])
                 .astype(np.float32) for _ in range(n)]
        with open(osp.join(root, f'{split}_proposals.pkl'), 'wb') as f:
            pickle.dump(boxes, f)
    return root


def _dataset(root, split, pipeline, **kw):
    return CocoDataset(ann_file=osp.join(root, 'annotations', f'instances_{split}.json'),
                       img_prefix=osp.join(root, split), pipeline=pipeline,
                       proposal_file=osp.join(root, f'{split}_proposals.pkl'), **kw)


def test_proposals_reach_the_detector_in_training_and_test(coco):
    model = _model()
    train = _dataset(coco, 'train2017', TRAIN_PIPELINE)
    batch = next(iter(build_dataloader(train, 2, 0, dist=False, shuffle=False)))
    assert [p.shape for p in batch['proposals']] == [(3, 4), (3, 4)]
    seen = []
    model.roi_head.bbox_roi_extractor.register_forward_hook(lambda m, a, o: seen.append(a[1]))
    log_vars = model.train_step(batch, None)['log_vars']
    assert list(log_vars) == ['loss_cls', 'acc', 'loss_bbox', 'loss']
    val = _dataset(coco, 'val2017', TEST_PIPELINE, test_mode=True)
    data = next(iter(build_dataloader(val, 1, 0, dist=False, shuffle=False)))
    model.eval()
    with torch.no_grad():
        result = model(return_loss=False, rescale=True, **data)
    assert len(result) == 1 and len(result[0]) == 3
    assert seen[-1].shape == (5, 5)  # the test takes all 5 proposals of the image


def test_a_proposal_file_of_another_length_fails_naming_it(coco, tmp_path):
    path = tmp_path / 'short.pkl'
    with open(path, 'wb') as f:
        pickle.dump([np.zeros((1, 4), np.float32)], f)
    with pytest.raises(ValueError, match='short.pkl.*1 entries.*3 images'):
        CocoDataset(ann_file=osp.join(coco, 'annotations', 'instances_train2017.json'),
                    img_prefix=osp.join(coco, 'train2017'), pipeline=[],
                    proposal_file=str(path))


def test_load_proposals_as_mmdet():
    out = LoadProposals(2)(dict(proposals=np.arange(15, dtype=np.float32).reshape(3, 5),
                                bbox_fields=[]))
    np.testing.assert_array_equal(out['proposals'], [[0, 1, 2, 3], [5, 6, 7, 8]])
    assert out['bbox_fields'] == ['proposals']
    empty = LoadProposals()(dict(proposals=np.zeros((0, 4), np.float32), bbox_fields=[]))
    np.testing.assert_array_equal(empty['proposals'], [[0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r'\(n, 4\) or \(n, 5\)'):
        LoadProposals()(dict(proposals=np.zeros((2, 3)), bbox_fields=[]))
    with pytest.raises(KeyError, match='proposal_file'):
        LoadProposals()(dict(bbox_fields=[]))


def test_forward_train_needs_the_proposals():
    model = _model()
    batch = masks_batch(with_mask=False, proposals=True)
    log_vars, grads, _ = train_step(model, batch)
    assert log_vars['loss_bbox'] > 0 and 'roi_head.bbox_head.fc_cls.weight' in grads
    batch.pop('proposals')
    with pytest.raises(ValueError, match='proposals'):
        model.train_step(batch, None)
    with pytest.raises(ValueError, match='proposals'):
        model.eval().forward_test(batch['img'], batch['img_metas'])
