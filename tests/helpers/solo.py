"""Tiny SOLO-family detectors: an mmdet-schema config around a given mask head (ResNet-18
with 8 base channels, a 16-channel 5-level FPN, 128x128 images), a batch of elliptic instance
masks of several sizes (positives on every level), one seeded train step, and the
every-checkpoint-mode check on the mask head's units."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import counting_calls

S = 128
TEST_CFG = dict(nms_pre=500, score_thr=0.05, mask_thr=0.5, filter_thr=0.05, kernel='gaussian',
                sigma=2.0, max_per_img=100)
GN = dict(type='GN', num_groups=4, requires_grad=True)
MASK_FEATURE_HEAD = dict(feat_channels=16, start_level=0, end_level=3, out_channels=16,
                         mask_stride=4, norm_cfg=GN)
PROBS = dict(loss_mask=dict(type='DiceLoss', use_sigmoid=True, activate=False, loss_weight=3.0))


def head_cfg(head_type, **kw):
    head = dict(type=head_type, num_classes=3, in_channels=16, stacked_convs=2,
                feat_channels=16, strides=[8, 8, 16, 32, 32],
                scale_ranges=((1, 24), (12, 48), (24, 96), (48, 192), (96, 2048)),
                pos_scale=0.2, num_grids=[12, 10, 8, 6, 4], cls_down_index=0,
                loss_mask=dict(type='DiceLoss', use_sigmoid=True, loss_weight=3.0),
                loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                              loss_weight=1.0),
                norm_cfg=GN)
    if head_type == 'SOLOV2Head':
        head['mask_feature_head'] = dict(MASK_FEATURE_HEAD)
    if head_type.startswith('Decoupled'):
        head.update(PROBS)
    head.update(kw)
    return head


def detector_cfg(det_type, head, with_cp=False):
    return dict(
        type=det_type,
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=0,
                  num_outs=5),
        mask_head=dict(head, with_cp=with_cp), test_cfg=dict(TEST_CFG))


def build(cfg, seed=0):
    torch.manual_seed(seed)
    return build_detector(copy.deepcopy(cfg))


def meta(h=S, w=S, ori=None):
    return dict(filename='x.jpg', ori_filename='x.jpg', ori_shape=ori or (h, w, 3),
                img_shape=(h, w, 3), pad_shape=(S, S, 3), scale_factor=np.ones(4, np.float32),
                flip=False, flip_direction=None)


def instances(seed, num=6):
    """``num`` elliptic masks (sizes 10 .. 110 px) and their boxes."""
    rng = np.random.RandomState(seed)
    masks, boxes = [], []
    yy, xx = np.mgrid[:S, :S]
    for size in [10, 20, 40, 70, 110, 30][:num]:
        cy, cx = rng.randint(size // 2, S - size // 2 + 1, 2)
        m = (((yy - cy) / (size / 2)) ** 2 + ((xx - cx) / (size / 2.5)) ** 2 <= 1)
        ys, xs = np.nonzero(m)
        masks.append(m.astype(np.uint8))
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
    return np.stack(masks), torch.tensor(boxes, dtype=torch.float32)


def batch(empty_second=False):
    g = torch.Generator().manual_seed(0)
    m0, b0 = instances(0)
    m1, b1 = instances(1, 4)
    labels = [torch.tensor([0, 2, 1, 1, 0, 2]), torch.tensor([1, 1, 0, 2])]
    if empty_second:
        m1, b1, labels[1] = m1[:0], b1[:0], labels[1][:0]
    return dict(img=torch.randn(2, 3, S, S, generator=g), img_metas=[meta(), meta(120, 112)],
                gt_bboxes=[b0, b1], gt_labels=labels,
                gt_masks=[BitmapMasks(m0, S, S), BitmapMasks(m1, S, S)])


def trained_looking(model, seed=1):
    """Random class / mask biases (a fresh head predicts nothing above the thresholds)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.mask_head.named_parameters():
            if p.dim() == 1 and name.split('.')[0] in (
                    'conv_cls', 'conv_mask_list', 'conv_mask_list_x', 'conv_mask_list_y',
                    'conv_kernel'):
                p.copy_(torch.randn(p.shape, generator=g))
    return model


def step(model, data, seed=7):
    """One seeded ``train_step`` and backward: ``(log_vars, grads, buffers)``."""
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(data), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


def head_units(model):
    return [u for u in model.checkpoint_units() if u.startswith('mask_head.')]


def assert_every_mode_exact(monkeypatch, cfg, mode):
    """A train step with ``mode`` on every mask-head unit equals the plain step (losses,
    every gradient, BN buffers) and each unit ran the mode."""
    data = batch()
    plain = build(cfg)
    units = head_units(plain)
    state = copy.deepcopy(plain.state_dict())
    ref = step(plain, data)
    model = build(cfg)
    model.load_state_dict(state)
    plan = model.set_checkpoint_plan({'mask_head.*': mode})
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


def run_test(model, rescale=True):
    """``simple_test`` through ``forward`` on two images (the second 120x112 of a 90x100
    original)."""
    model.eval()
    g = torch.Generator().manual_seed(1)
    img = torch.randn(2, 3, S, S, generator=g)
    metas = [meta(), meta(120, 112, ori=(90, 100, 3))]
    with torch.no_grad():
        return model(img=[img], img_metas=[metas], return_loss=False, rescale=rescale), metas


def assert_result_format(results, metas, num_classes=3, rescale=True):
    """Per image ``(bbox_results, segm_results)``: per class float32 ``(k, 5)`` (zero boxes,
    the score last) and ``k`` bool masks of the image's (original) size."""
    assert len(results) == len(metas)
    total = 0
    for (bboxes, segms), m in zip(results, metas):
        assert len(bboxes) == len(segms) == num_classes
        shape = m['ori_shape'][:2] if rescale else m['img_shape'][:2]
        for dets, masks in zip(bboxes, segms):
            assert dets.dtype == np.float32 and dets.shape == (len(masks), 5)
            assert (dets[:, :4] == 0).all() and ((dets[:, 4] > 0) & (dets[:, 4] <= 1)).all()
            assert all(mk.dtype == bool and mk.shape == tuple(shape) for mk in masks)
            total += len(masks)
    return total
