import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model
from tests.helpers.detectors import det_batch, img_meta

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _cfg(with_cp=False, num_classes=3):
    return dict(
        type='RetinaNet',
        backbone=dict(type='ResNet', depth=18, base_channels=8, out_indices=(0, 1, 2, 3),
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch', with_cp=with_cp),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='RetinaHead', num_classes=num_classes, in_channels=16, stacked_convs=2,
            feat_channels=16,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                  scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                  strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                            target_stds=[1.0, 1.0, 1.0, 1.0]),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_state_dict_keys_match_mmdet():
    keys = set(_model().state_dict())
    assert {'backbone.conv1.weight', 'backbone.layer1.0.conv1.weight',
            'neck.lateral_convs.0.conv.weight', 'neck.fpn_convs.4.conv.weight',
            'bbox_head.cls_convs.0.conv.weight', 'bbox_head.reg_convs.1.conv.bias',
            'bbox_head.retina_cls.weight', 'bbox_head.retina_reg.weight'} <= keys


def test_train_step_with_and_without_boxes():
    model = _model()
    batch = det_batch()
    out = model.train_step(batch, None)
    assert out['num_samples'] == 2
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_bbox'] > 0
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    # a batch whose only image has no box
    model.zero_grad()
    empty = dict(img=batch['img'][1:], img_metas=batch['img_metas'][1:],
                 gt_bboxes=batch['gt_bboxes'][1:], gt_labels=batch['gt_labels'][1:])
    out = model.train_step(empty, None)
    assert np.isfinite(out['log_vars']['loss_cls']) and out['log_vars']['loss_bbox'] == 0
    out['loss'].backward()
    assert torch.isfinite(model.bbox_head.retina_cls.weight.grad).all()


def _loss_and_grads(model, batch):
    model.zero_grad()
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


def test_with_cp_gives_identical_losses_and_grads():
    batch = det_batch()
    plain = _model()
    cp = _model(with_cp=True)
    cp.load_state_dict(plain.state_dict())
    log_plain, grads_plain = _loss_and_grads(plain, batch)
    log_cp, grads_cp = _loss_and_grads(cp, batch)
    assert log_cp == pytest.approx(log_plain, rel=1e-6, abs=0)
    assert grads_cp.keys() == grads_plain.keys()
    assert any(n.startswith('backbone.layer1') for n in grads_cp)
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_cp[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    for (name, buf), buf_cp in zip(plain.named_buffers(), cp.buffers()):
        torch.testing.assert_close(buf_cp, buf, rtol=1e-6, atol=0, msg=name)


def test_fp16_train_step_is_finite():
    model = wrap_fp16_model(_model())
    assert model.bbox_head.fp16_enabled and model.neck.fp16_enabled
    dtypes = []
    model.bbox_head.retina_cls.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = model.train_step(det_batch(), None)
    assert set(dtypes) == {torch.float16}  # the head ran under autocast, its loss in fp32
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_simple_test_format_and_forward_test_inputs():
    model = _model()
    model.bbox_head.test_cfg = dict(TEST_CFG, score_thr=0.0)  # the 0.01 prior is below 0.05
    model.CLASSES = ('a', 'b', 'c')
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model(img=[batch['img']], img_metas=[batch['img_metas']], return_loss=False)
        same = model.forward_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2
    for per_image, meta in zip(results, batch['img_metas']):
        assert len(per_image) == 3
        assert sum(len(r) for r in per_image) > 0
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5
            h, w = meta['img_shape'][:2]
            assert (dets[:, :4] >= 0).all() and (dets[:, [0, 2]] <= w).all() \
                and (dets[:, [1, 3]] <= h).all()
            assert (dets[:, 2] >= dets[:, 0]).all() and (dets[:, 3] >= dets[:, 1]).all()
    for a, b in zip(results, same):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_aug_test_merges_flipped_and_duplicate_augmentations():
    model = _model()
    model.bbox_head.test_cfg = dict(TEST_CFG, score_thr=0.0)
    model.eval()
    img = det_batch()['img'][:1]
    meta = img_meta(64, 64)
    flip_meta = dict(meta, flip=True, flip_direction='horizontal')
    with torch.no_grad():
        single = model.simple_test(img, [dict(meta)])[0]
        # the same augmentation twice: duplicates are suppressed by NMS
        twice = model.forward_test([img, img], [[dict(meta)], [dict(meta)]])[0]
        # one flipped augmentation: the flipped image's boxes, mirrored back
        flipped = model.aug_test([img.flip(-1)], [[dict(flip_meta)]])[0]
        plain_on_flipped = model.simple_test(img.flip(-1), [dict(meta)])[0]
        both = model.forward_test([img, img.flip(-1)], [[dict(meta)], [dict(flip_meta)]])[0]
    for a, b in zip(single, twice):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(plain_on_flipped, flipped):
        mirrored = a.copy()
        mirrored[:, 0], mirrored[:, 2] = 64 - a[:, 2], 64 - a[:, 0]
        np.testing.assert_allclose(b, mirrored, rtol=0, atol=1e-4)
    assert len(both) == 3 and sum(len(r) for r in both) > 0
    with pytest.raises(ValueError, match='one image per augmentation'):
        model.forward_test([det_batch()['img']] * 2, [det_batch()['img_metas']] * 2)


def test_overfits_one_batch():
    model = _model()
    batch = det_batch()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        out = model.train_step(copy.deepcopy(batch), opt)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        losses.append(out['log_vars']['loss'])
    assert losses[-1] < 0.5 * losses[0], losses


def test_mmdet_retinanet_r50_config_builds():
    model = dict(
        type='RetinaNet',
        backbone=dict(type='ResNet', depth=50, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=True, style='pytorch',
                      init_cfg=dict(type='Pretrained', checkpoint='torchvision://resnet50')),
        neck=dict(type='FPN', in_channels=[256, 512, 1024, 2048], out_channels=256,
                  start_level=1, add_extra_convs='on_input', num_outs=5),
        bbox_head=dict(
            type='RetinaHead', num_classes=20, in_channels=256, stacked_convs=4,
            feat_channels=256,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                  scales_per_octave=3, ratios=[0.5, 1.0, 2.0],
                                  strides=[8, 16, 32, 64, 128]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                            target_stds=[1.0, 1.0, 1.0, 1.0]),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        train_cfg=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                                     min_pos_iou=0, ignore_iof_thr=-1),
                       allowed_border=-1, pos_weight=-1, debug=False),
        test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                      nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
    detector = build_detector(model)
    assert type(detector).__name__ == 'RetinaNet'
    assert detector.bbox_head.retina_cls.weight.shape == (9 * 20, 256, 3, 3)
    assert detector.bbox_head.retina_reg.weight.shape == (9 * 4, 256, 3, 3)
    assert detector.neck.fpn_convs[3].conv.in_channels == 2048
    # the neck and head keys of an mmdet 2.x RetinaNet checkpoint, exactly
    keys = [k for k in detector.state_dict() if not k.startswith('backbone.')]
    expected = [f'neck.lateral_convs.{i}.conv.{p}' for i in range(3) for p in ('weight', 'bias')]
    expected += [f'neck.fpn_convs.{i}.conv.{p}' for i in range(5) for p in ('weight', 'bias')]
    expected += [f'bbox_head.{tower}.{i}.conv.{p}' for i in range(4)
                 for tower in ('cls_convs', 'reg_convs') for p in ('weight', 'bias')]
    expected += [f'bbox_head.retina_{b}.{p}' for b in ('cls', 'reg') for p in ('weight', 'bias')]
    assert sorted(keys) == sorted(expected)
    n_params = sum(p.numel() for p in detector.parameters())
    # mmdet 2.x RetinaNet R50-FPN with 20 classes: 36.5 M parameters
    assert 36.0e6 < n_params < 37.0e6, n_params


def test_head_levels_must_match_the_neck_outputs():
    cfg = _cfg()
    cfg['neck'] = dict(cfg['neck'], num_outs=4)
    with pytest.raises(ValueError, match=r'RetinaHead has \d levels \(strides \[8, 16.*'
                                         r'the neck FPN gives \d \(num_outs=\d\)'):
        build_detector(cfg)
