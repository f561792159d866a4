"""Tiny anchor-free detectors (FCOS, NAS-FCOS, AutoAssign, FoveaBox, ...): an mmdet-schema
config around a given head, a batch whose boxes make positives on several levels, one seeded
train step, and the every-checkpoint-mode check on the head's level units."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.detectors import img_meta
from tests.helpers.checkpointing import counting_calls

TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.0,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)
HEAD_UNITS = [f'bbox_head.level{i}' for i in range(5)]


def detector_cfg(det_type, head, train_cfg=None, test_cfg=TEST_CFG, neck=None,
                 with_cp=False):
    """``det_type`` on a tiny ResNet-18 (8 base channels) and a 16-channel, 5-level FPN."""
    neck = neck or dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                        start_level=1, add_extra_convs='on_output', num_outs=5,
                        relu_before_extra_convs=True)
    return dict(
        type=det_type,
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=neck, bbox_head=dict(head, with_cp=with_cp),
        train_cfg=copy.deepcopy(train_cfg), test_cfg=copy.deepcopy(test_cfg))


def build(cfg, seed=0):
    torch.manual_seed(seed)
    return build_detector(copy.deepcopy(cfg))


def batch(empty_second=False):
    """Two 64x64 images; boxes small and large (positives from several levels); the
    second image optionally without boxes."""
    g = torch.Generator().manual_seed(0)
    boxes = [torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.], [2., 30., 20., 62.],
                           [1., 1., 63., 60.]]),
             torch.tensor([[5., 5., 52., 52.], [20., 24., 36., 40.], [40.5, 3.2, 47.1, 11.9]])]
    labels = [torch.tensor([0, 2, 1, 1]), torch.tensor([1, 1, 0])]
    if empty_second:
        boxes[1], labels[1] = torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
    return dict(img=torch.randn(2, 3, 64, 64, generator=g),
                img_metas=[img_meta(), img_meta(56, 60)], gt_bboxes=boxes, gt_labels=labels)


def step(model, data, seed=7):
    """One seeded ``train_step`` and backward: ``(log_vars, grads, buffers)``."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(data), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


def assert_every_mode_exact(monkeypatch, cfg, mode, data=None, units=HEAD_UNITS):
    """A train step with ``mode`` on each of ``units`` equals the plain step (losses, every
    gradient, BN buffers) and each unit ran the mode."""
    data = data or batch()
    plain = build(cfg)
    assert [u for u in plain.checkpoint_units() if u.startswith('bbox_head')] == units
    state = copy.deepcopy(plain.state_dict())
    ref = step(plain, data)
    model = build(cfg)
    model.load_state_dict(state)
    plan = model.set_checkpoint_plan({'bbox_head.*': mode})
    assert [plan[u] for u in units] == [mode] * len(units)
    with monkeypatch.context() as patch:
        calls = counting_calls(patch)
        got = step(model, data)
    (log_r, grads_r, bufs_r), (log_g, grads_g, bufs_g) = ref, got
    assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
    assert grads_g.keys() == grads_r.keys()
    for name, grad in grads_r.items():
        torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                   msg=lambda m: f'{name}: {m}')
    for name, buf in bufs_r.items():
        torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0)
    ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
    assert ran == (0 if mode is None else len(units)), calls


def assert_result_format(model, num_classes=3):
    """``simple_test`` through ``forward``: per image, per class, a float32 ``[k, 5]`` array
    inside the image; some detections (score_thr 0)."""
    model.eval()
    data = batch()
    with torch.no_grad():
        results = model(img=[data['img']], img_metas=[data['img_metas']], return_loss=False)
    assert len(results) == 2
    for per_image, meta in zip(results, data['img_metas']):
        assert len(per_image) == num_classes and sum(len(r) for r in per_image) > 0
        h, w = meta['img_shape'][:2]
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5
            assert (dets[:, :4] >= 0).all() and (dets[:, [0, 2]] <= w).all() \
                and (dets[:, [1, 3]] <= h).all()
    return results
