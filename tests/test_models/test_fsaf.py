"""FSAF end to end on a tiny ResNet-18 / FPN from an mmdet-schema config (mmdet 2.28.2's
``fsaf/`` settings): losses, backward, ``simple_test`` format, mmdet's keys."""
import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def fsaf_cfg(with_cp=False):
    return dict(
        type='FSAF',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      style='pytorch'),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='FSAFHead', num_classes=3, in_channels=16, stacked_convs=2, feat_channels=16,
            reg_decoded_bbox=True, with_cp=with_cp,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=1,
                                  scales_per_octave=1, ratios=[1.0],
                                  strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='TBLRBBoxCoder', normalizer=4.0),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0, reduction='none'),
            loss_bbox=dict(type='IoULoss', eps=1e-6, loss_weight=1.0, reduction='none')),
        train_cfg=dict(assigner=dict(type='CenterRegionAssigner', pos_scale=0.2,
                                     neg_scale=0.2, min_pos_iof=0.01),
                       allowed_border=-1, pos_weight=-1, debug=False),
        test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                      nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))


def test_train_step_and_simple_test():
    torch.manual_seed(0)
    model = build_detector(fsaf_cfg())
    assert {'bbox_head.cls_convs.0.conv.weight', 'bbox_head.retina_reg.bias'} <= \
        set(model.state_dict())
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'num_pos', 'pos_recall', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert model.bbox_head.retina_reg.weight.grad.abs().sum() > 0
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.dtype == np.float32 and d.shape[1] == 5 for r in results for d in r)


def test_with_cp_is_exact():
    batch = det_batch()
    grads = []
    for with_cp in (False, True):
        torch.manual_seed(0)
        model = build_detector(fsaf_cfg(with_cp))
        out = model.train_step(batch, None)
        out['loss'].backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert all(torch.equal(grads[0][k], grads[1][k]) for k in grads[0])
