"""The probe's input (:func:`ckptzoo.memory.measure.step.probe_batch`): a batch of exactly the shape
asked for, padded or cropped with its metas and boxes, and, for a detector, exactly the number
of ground-truth boxes asked for, so that the probe measures the memory that grows with them."""
import copy
import logging
import math
import os.path as osp
import random

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.apis import build_training, set_random_seed
from ckptzoo.datasets.synthetic_voc import SYNTHETIC_CLASSES
from ckptzoo.memory.measure.step import probe_batch
from ckptzoo.memory.measure.step_peak import measure_step
from ckptzoo.core.bbox import MaxIoUAssigner
from tests.helpers.configs import tiny_voc_retinanet

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
NUM_CLASSES = len(SYNTHETIC_CLASSES)


@pytest.fixture(scope='module')
def detector_run(tmp_path_factory):
    """A tiny RetinaNet (ResNet-18 at width 8, FPN, RetinaHead) on 4 generated VOC images of
    64x64 (1 to 3 boxes each), batches of 2."""
    tmp = tmp_path_factory.mktemp('step_detector')
    cfg = tiny_voc_retinanet(tmp)
    set_random_seed(0)
    return build_training(cfg, logger=logging.getLogger('test_step'))


def _states():
    return (random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state())


def test_a_smaller_batch_is_padded_to_the_exact_shape(detector_run):
    plain = probe_batch(detector_run)
    batch = probe_batch(detector_run, (96, 128))
    assert batch['img'].shape[-2:] == (96, 128)
    torch.testing.assert_close(batch['img'][..., :64, :64], plain['img'])
    assert batch['img'][..., 64:, :].abs().sum() == 0 and batch['img'][..., 64:].abs().sum() == 0
    for meta, boxes, old in zip(batch['img_metas'], batch['gt_bboxes'], plain['gt_bboxes']):
        assert meta['img_shape'][:2] == (64, 64)
        assert meta['pad_shape'][:2] == (96, 128) and meta['batch_input_shape'] == (96, 128)
        torch.testing.assert_close(boxes, old)


def test_a_larger_batch_is_cropped_with_its_metas_and_boxes(detector_run):
    """Cropped to 32x40: the metas say 32x40, the boxes are clipped to it and those left
    without area dropped, with their labels."""
    plain = probe_batch(detector_run)
    batch = probe_batch(detector_run, (32, 40))
    assert batch['img'].shape[-2:] == (32, 40)
    torch.testing.assert_close(batch['img'], plain['img'][..., :32, :40])
    dropped = 0
    for i, meta in enumerate(batch['img_metas']):
        assert meta['img_shape'][:2] == (32, 40) and meta['pad_shape'][:2] == (32, 40)
        assert meta['batch_input_shape'] == (32, 40)
        boxes, labels = batch['gt_bboxes'][i], batch['gt_labels'][i]
        assert len(boxes) == len(labels)
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
        assert (boxes[:, 0::2] <= 40).all() and (boxes[:, 1::2] <= 32).all()
        old = plain['gt_bboxes'][i]
        inside = (old[:, 0] < 40) & (old[:, 1] < 32)
        dropped += int((~inside).sum())
        torch.testing.assert_close(labels, plain['gt_labels'][i][inside])
    assert dropped > 0  # the generated images have boxes beyond the crop


def test_boxes_per_image_gives_every_image_that_many_boxes(detector_run):
    """The image's own boxes first, then drawn ones inside the image with labels of the
    model's classes; the same every time, and the run's random states untouched."""
    plain = probe_batch(detector_run)
    before = _states()
    batch = probe_batch(detector_run, (64, 64), boxes_per_image=20)
    after = _states()
    assert before[0] == after[0] and before[1] == after[1] and torch.equal(before[2], after[2])
    again = probe_batch(detector_run, (64, 64), boxes_per_image=20)
    for i, (boxes, labels) in enumerate(zip(batch['gt_bboxes'], batch['gt_labels'])):
        own = len(plain['gt_bboxes'][i])
        assert boxes.shape == (20, 4) and labels.shape == (20, )
        assert boxes.dtype == plain['gt_bboxes'][i].dtype
        assert labels.dtype == plain['gt_labels'][i].dtype
        torch.testing.assert_close(boxes[:own], plain['gt_bboxes'][i])
        torch.testing.assert_close(labels[:own], plain['gt_labels'][i])
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] <= 64).all()
        assert (boxes[:, 2:] - boxes[:, :2] >= 4).all()  # at least 1/16 of the side
        assert labels.min() >= 0 and labels.max() < NUM_CLASSES
        assert len(set(labels.tolist())) > 1
        torch.testing.assert_close(boxes, again['gt_bboxes'][i])
    one = probe_batch(detector_run, boxes_per_image=1)
    assert [len(b) for b in one['gt_bboxes']] == [1, 1]
    torch.testing.assert_close(one['gt_bboxes'][0], plain['gt_bboxes'][0][:1])


@pytest.mark.parametrize('bad', [0, -3, 2.5, '10', True])
def test_a_bad_box_count_is_refused(detector_run, bad):
    with pytest.raises(ValueError, match=f'boxes_per_image must be a positive int, got '
                       f'{bad!r}'.replace('(', r'\(')):
        probe_batch(detector_run, boxes_per_image=bad)


def test_a_classification_batch_has_no_boxes_to_give(tmp_path):
    cfg = Config(dict(
        model=dict(type='ImageClassifier',
                   backbone=dict(type='ResNet', depth=18, base_channels=8),
                   head=dict(type='LinearClsHead', num_classes=4, in_channels=64, topk=(1, ))),
        data=dict(samples_per_gpu=2, workers_per_gpu=0,
                  train=dict(type='SyntheticClassificationDataset', num_samples=4,
                             num_classes=4, img_size=32, seed=0)),
        optimizer=dict(type='SGD', lr=0.01), optimizer_config=dict(grad_clip=None),
        lr_config=None, checkpoint_config=None, log_config=None,
        runner=dict(type='IterBasedRunner', max_iters=1), workflow=[('train', 1)],
        work_dir=str(tmp_path)))
    run = build_training(cfg, logger=logging.getLogger('test_step'))
    batch = probe_batch(run, (40, 48), boxes_per_image=50)
    assert sorted(batch) == ['gt_label', 'img'] and batch['img'].shape == (2, 3, 40, 48)


def _num_anchors(run, shape):
    head = run.runner.model.bbox_head
    sizes = [(math.ceil(shape[0] / s[0]), math.ceil(shape[1] / s[1]))
             for s in head.prior_generator.strides]
    return sum(len(a) for a in head.prior_generator.grid_priors(sizes))


def test_the_measured_peak_grows_with_the_boxes(detector_run):
    """1 and 150 boxes per image at 128x128: the step's peak grows at least by one IoU matrix
    (anchors x boxes floats), which the assigner builds for each image in turn."""
    run = detector_run
    shape = (128, 128)
    peaks = {}
    state = copy.deepcopy(run.runner.model.state_dict())
    for boxes in (1, 150):
        run.runner.model.load_state_dict(state)
        peaks[boxes], _ = measure_step(run, probe_batch(run, shape, boxes_per_image=boxes))
    run.runner.model.load_state_dict(state)
    iou_matrix = _num_anchors(run, shape) * 149 * 4
    assert iou_matrix > 1e6
    assert peaks[150] - peaks[1] >= iou_matrix, (peaks, iou_matrix)


def test_gpu_assign_thr_below_the_count_assigns_off_the_device(detector_run, monkeypatch):
    """mmdet's ``gpu_assign_thr``: with more ground truths than it, the IoU matrix is built
    and assigned on the CPU and the results moved back; on a CPU the same device, so the
    path is seen through ``Tensor.cpu`` and the losses equal those assigned in place."""
    run = detector_run
    model = run.runner.model
    assigner = model.bbox_head.assigner
    assert isinstance(assigner, MaxIoUAssigner) and assigner.gpu_assign_thr == -1
    batch = probe_batch(run, (64, 64), boxes_per_image=30)
    calls = []
    real_cpu, real_assign = torch.Tensor.cpu, MaxIoUAssigner.assign

    def cpu(self, *args, **kwargs):
        calls[-1] += 1
        return real_cpu(self, *args, **kwargs)

    def assign(self, *args, **kwargs):
        calls.append(0)
        return real_assign(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, 'cpu', cpu)
    monkeypatch.setattr(MaxIoUAssigner, 'assign', assign)
    losses = {}
    for thr in (-1, 30, 29):
        monkeypatch.setattr(assigner, 'gpu_assign_thr', thr)
        calls.clear()
        with torch.no_grad():
            out = model(**copy.deepcopy(batch), return_loss=True)
        losses[thr] = {k: float(sum(v) if isinstance(v, list) else v) for k, v in out.items()}
        assert calls == ([3, 3] if thr == 29 else [0, 0]), thr  # priors, boxes, labels
    for thr in (29, 30):
        for key, value in losses[-1].items():
            assert losses[thr][key] == pytest.approx(value, rel=1e-5), (thr, key)


@pytest.fixture(scope='module', params=[True, False], ids=['bitmaps', 'polygons'])
def mask_run(request, tmp_path_factory):
    """A mask model's loader (synthetic COCO, gt_masks collected, batches of 2) and a stand-in
    model: probe_batch reads the loader and the model's device only."""
    from types import SimpleNamespace

    from ckptzoo.datasets import CocoDataset, build_dataloader, generate_coco
    root = generate_coco(str(tmp_path_factory.mktemp('mask_run') / 'coco'), num_train=6,
                         num_val=1, img_size=((40, 48), (56, 72)), max_objects=3)
    pipeline = [dict(type='LoadImageFromFile'),
                dict(type='LoadAnnotations', with_mask=True, poly2mask=request.param),
                dict(type='Pad', size_divisor=8), dict(type='DefaultFormatBundle'),
                dict(type='Collect', keys=['img', 'gt_bboxes', 'gt_labels', 'gt_masks'],
                     meta_keys=('img_shape', 'pad_shape'))]
    ds = CocoDataset(ann_file=osp.join(root, 'annotations', 'instances_train2017.json'),
                     img_prefix=osp.join(root, 'train2017'), pipeline=pipeline,
                     classes=('circle', 'square', 'triangle'))
    loader = build_dataloader(ds, 2, 0, shuffle=False, seed=0)
    return SimpleNamespace(runner=SimpleNamespace(model=torch.nn.Linear(1, 1)),
                           data_loaders=[loader])


def _bitmaps(masks):
    return masks.to_ndarray().astype(bool)


def test_a_mask_batch_keeps_one_mask_per_box_at_the_probe_shape(mask_run):
    """Padded and given 6 boxes per image: its own masks first (padded with zeros), then the
    drawn boxes filled; cropped: the masks of the boxes kept, cut to the crop."""
    plain = probe_batch(mask_run)
    batch = probe_batch(mask_run, (96, 128), boxes_per_image=6)
    assert any(len(m) for m in plain['gt_masks'])
    for masks, boxes, old in zip(batch['gt_masks'], batch['gt_bboxes'], plain['gt_masks']):
        assert type(masks) is type(old) and len(masks) == len(boxes) == 6
        assert (masks.height, masks.width) == (96, 128)
        bitmaps, own = _bitmaps(masks), _bitmaps(old)
        h, w = own.shape[1:]
        np.testing.assert_array_equal(bitmaps[:len(own), :h, :w], own)
        assert not bitmaps[:len(own), h:].any() and not bitmaps[:len(own), :, w:].any()
        for bitmap, box in zip(bitmaps[len(own):], boxes[len(own):].numpy()):
            ys, xs = np.nonzero(bitmap)
            np.testing.assert_allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], box,
                                       atol=1)
    small = probe_batch(mask_run, (24, 32))
    for masks, boxes, old, old_boxes in zip(small['gt_masks'], small['gt_bboxes'],
                                            plain['gt_masks'], plain['gt_bboxes']):
        assert len(masks) == len(boxes) and (masks.height, masks.width) == (24, 32)
        kept = ((old_boxes[:, 0] < 32) & (old_boxes[:, 1] < 24)).numpy()
        np.testing.assert_array_equal(_bitmaps(masks), _bitmaps(old)[kept, :24, :32])
