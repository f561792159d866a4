"""RetinaNet with each RetinaNet-variant head (mmdet 2.28.2's nas_fpn / ghm / free_anchor /
pisa configs' heads), end to end on a tiny model: finite losses, backward, and the
``simple_test`` result format."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch
from tests.helpers.retina_variants import TEST_CFG, TRAIN_CFG

one_thread = pytest.fixture(autouse=True)(_one_thread)

HEADS = {
    'sepbn': (dict(type='RetinaSepBNHead', num_ins=5,
                   norm_cfg=dict(type='BN', requires_grad=True)), TRAIN_CFG,
              {'loss_cls', 'loss_bbox'}),
    'ghm': (dict(loss_cls=dict(type='GHMC', bins=30, momentum=0.75, use_sigmoid=True),
                 loss_bbox=dict(type='GHMR', mu=0.02, bins=10, momentum=0.7,
                                loss_weight=10.0)), TRAIN_CFG, {'loss_cls', 'loss_bbox'}),
    'free_anchor': (dict(type='FreeAnchorRetinaHead',
                         loss_bbox=dict(type='SmoothL1Loss', beta=0.11, loss_weight=0.75)),
                    TRAIN_CFG, {'positive_bag_loss', 'negative_bag_loss'}),
    'pisa': (dict(type='PISARetinaHead', loss_bbox=dict(type='SmoothL1Loss', beta=0.11)),
             dict(TRAIN_CFG, isr=dict(k=2., bias=0.), carl=dict(k=1., bias=0.2)),
             {'loss_cls', 'loss_bbox', 'loss_carl'}),
}


def _cfg(kind):
    head_kw, train_cfg, _ = HEADS[kind]
    head = dict(type='RetinaHead', num_classes=3, in_channels=16, stacked_convs=2,
                feat_channels=16,
                anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                      scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                      strides=[8, 16, 32, 64, 128]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                                target_stds=[1.0] * 4),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25),
                loss_bbox=dict(type='L1Loss', loss_weight=1.0))
    head.update(copy.deepcopy(head_kw))
    return dict(type='RetinaNet',
                backbone=dict(type='ResNet', depth=18, base_channels=8,
                              out_indices=(0, 1, 2, 3), style='pytorch'),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          start_level=1, add_extra_convs='on_input', num_outs=5),
                bbox_head=head, train_cfg=train_cfg, test_cfg=dict(TEST_CFG, score_thr=0.0))


@pytest.mark.parametrize('kind', sorted(HEADS))
def test_train_step_and_simple_test(kind):
    torch.manual_seed(0)
    model = build_detector(_cfg(kind))
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == HEADS[kind][2] | {'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.bbox_head.retina_cls.weight.grad.abs().sum() > 0
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2
    for per_image in results:
        assert len(per_image) == 3
        assert all(d.dtype == np.float32 and d.shape[1] == 5 for d in per_image)
        assert sum(len(d) for d in per_image) > 0


@pytest.mark.parametrize('kind', sorted(HEADS))
def test_fp16_train_step_is_finite(kind):
    from ckptzoo.runner.fp16 import wrap_fp16_model
    torch.manual_seed(0)
    model = wrap_fp16_model(build_detector(_cfg(kind)))
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
