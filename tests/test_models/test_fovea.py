"""FoveaBox (FOVEA) end to end on a tiny model, plain and with the deformable FeatureAlign:
mmdet's loss keys, every gradient, every checkpoint mode on the head's levels, results."""
import numpy as np
import pytest

from ckptzoo.models import FOVEA
from tests.helpers.anchor_free import (assert_every_mode_exact, assert_result_format, batch,
                                       build, detector_cfg, step)
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(**head_kw):
    head = dict(type='FoveaHead', num_classes=3, in_channels=16, stacked_convs=2,
                feat_channels=16, strides=[8, 16, 32, 64, 128],
                base_edge_list=[4, 8, 16, 32, 64],
                scale_ranges=((1, 32), (8, 64), (16, 128), (32, 256), (64, 2048)), sigma=0.4,
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=1.50, alpha=0.4,
                              loss_weight=1.0),
                loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=1.0))
    head.update(head_kw)
    return detector_cfg('FOVEA', head, train_cfg=dict(),
                        test_cfg=dict(nms_pre=1000, score_thr=0.0,
                                      nms=dict(type='nms', iou_threshold=0.5),
                                      max_per_img=100))


ALIGN = dict(with_deform=True, norm_cfg=dict(type='GN', num_groups=4, requires_grad=True))


@pytest.mark.parametrize('head_kw', [{}, ALIGN], ids=['plain', 'align'])
def test_train_step_and_results(head_kw):
    model = build(_cfg(**head_kw))
    assert isinstance(model, FOVEA)
    log, grads, _ = step(model, batch())
    assert list(log) == ['loss_cls', 'loss_bbox', 'loss']
    assert all(np.isfinite(v) for v in log.values()) and log['loss_bbox'] > 0
    assert set(grads) == {n for n, _ in model.named_parameters()}
    log, _, _ = step(model, batch(empty_second=True))
    assert all(np.isfinite(v) for v in log.values())
    assert_result_format(model)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_head_levels_equals_plain(monkeypatch, mode):
    assert_every_mode_exact(monkeypatch, _cfg(**ALIGN), mode)


def test_aug_test_of_one_augmentation_twice_is_the_single_test():
    """FoveaHead's per-level decoding without NMS feeds BaseDenseHead's aug_test."""
    import torch

    from tests.helpers.detectors import img_meta
    model = build(_cfg(**ALIGN))
    model.eval()
    img = batch()['img'][:1]
    with torch.no_grad():
        single = model.simple_test(img, [img_meta()], rescale=True)[0]
        twice = model.aug_test([img, img], [[img_meta()], [img_meta()]], rescale=True)[0]
    for a, b in zip(single, twice):
        np.testing.assert_array_equal(a, b)
