"""Faster R-CNN end to end: a tiny ResNet-18 (8 base channels) FPN model on 64 px images, and
mmdet 2.x's faster_rcnn_r50_fpn keys."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model

from tests.helpers.coco_tta import ORI_SHAPE, flip_aug_batch, swapped_views
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import (RPN_HEAD_KEYS, RPN_TEST_CFG, RPN_TRAIN_CFG, det_batch,
                                     load_strictly, overfit, resnet50_fpn_keys, resnet_cfg,
                                     rpn_batch, rpn_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)

RCNN_TRAIN_CFG = dict(
    assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.5, min_pos_iou=0.5,
                  match_low_quality=False, ignore_iof_thr=-1),
    sampler=dict(type='RandomSampler', num=64, pos_fraction=0.25, neg_pos_ub=-1,
                 add_gt_as_proposals=True),
    pos_weight=-1, debug=False)
RCNN_TEST_CFG = dict(score_thr=0.05, nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)


def _roi_head(channels=16, fc=32, num_classes=3, strides=(4, 8, 16, 32), **kw):
    return dict(
        type='StandardRoIHead',
        bbox_roi_extractor=dict(type='SingleRoIExtractor',
                                roi_layer=dict(type='RoIAlign', output_size=7, sampling_ratio=0),
                                out_channels=channels, featmap_strides=list(strides)),
        bbox_head=dict(type='Shared2FCBBoxHead', in_channels=channels, fc_out_channels=fc,
                       roi_feat_size=7, num_classes=num_classes,
                       bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.] * 4,
                                       target_stds=[0.1, 0.1, 0.2, 0.2]),
                       reg_class_agnostic=False,
                       loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False,
                                     loss_weight=1.0),
                       loss_bbox=dict(type='L1Loss', loss_weight=1.0)), **kw)


def _cfg(rpn_kw=None, roi_kw=None, backbone_kw=None):
    return dict(
        type='FasterRCNN', backbone=resnet_cfg(**(backbone_kw or {})),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, num_outs=5),
        rpn_head=rpn_head_cfg(**(rpn_kw or {})), roi_head=_roi_head(**(roi_kw or {})),
        train_cfg=dict(rpn=RPN_TRAIN_CFG,
                       rpn_proposal=dict(nms_pre=200, max_per_img=100,
                                         nms=dict(type='nms', iou_threshold=0.7),
                                         min_bbox_size=0),
                       rcnn=RCNN_TRAIN_CFG),
        test_cfg=dict(rpn=RPN_TEST_CFG, rcnn=RCNN_TEST_CFG))


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_mmdet_faster_rcnn_r50_fpn_keys_load_strictly():
    """mmdet's configs/_base_/models/faster_rcnn_r50_fpn.py (80 classes), as it is."""
    cfg = dict(
        type='FasterRCNN',
        backbone=dict(type='ResNet', depth=50, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=True, style='pytorch'),
        neck=dict(type='FPN', in_channels=[256, 512, 1024, 2048], out_channels=256,
                  num_outs=5),
        rpn_head=rpn_head_cfg(256),
        roi_head=_roi_head(256, 1024, 80),
        train_cfg=dict(rpn=RPN_TRAIN_CFG,
                       rpn_proposal=dict(nms_pre=2000, max_per_img=1000,
                                         nms=dict(type='nms', iou_threshold=0.7),
                                         min_bbox_size=0),
                       rcnn=dict(RCNN_TRAIN_CFG, sampler=dict(RCNN_TRAIN_CFG['sampler'],
                                                              num=512))),
        test_cfg=dict(rpn=RPN_TEST_CFG, rcnn=RCNN_TEST_CFG))
    model = build_detector(cfg)
    roi_keys = {'roi_head.bbox_head.shared_fcs.0.weight': (1024, 256 * 7 * 7),
                'roi_head.bbox_head.shared_fcs.0.bias': (1024, ),
                'roi_head.bbox_head.shared_fcs.1.weight': (1024, 1024),
                'roi_head.bbox_head.shared_fcs.1.bias': (1024, ),
                'roi_head.bbox_head.fc_cls.weight': (81, 1024),
                'roi_head.bbox_head.fc_cls.bias': (81, ),
                'roi_head.bbox_head.fc_reg.weight': (320, 1024),
                'roi_head.bbox_head.fc_reg.bias': (320, )}
    load_strictly(model, {**resnet50_fpn_keys(), **RPN_HEAD_KEYS, **roi_keys})


def test_train_step_losses_units_and_backward():
    model = _model()
    assert model.with_rpn and model.with_roi_head and model.with_bbox and not model.with_mask
    units = list(model.checkpoint_units())
    assert units[-6:] == [f'rpn_head.level{i}' for i in range(5)] + ['roi_head.bbox']
    assert units[0].startswith('backbone.') and any(u.startswith('neck.') for u in units)
    out = model.train_step(det_batch(), None)
    assert set(out['log_vars']) == {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'loss_bbox',
                                    'acc', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    # acc is logged, not optimised
    expected = sum(v for k, v in out['log_vars'].items() if k.startswith('loss_'))
    assert out['log_vars']['loss'] == pytest.approx(expected, rel=1e-6)
    out['loss'].backward()
    for name in ('rpn_head.rpn_cls.weight', 'roi_head.bbox_head.fc_cls.weight',
                 'roi_head.bbox_head.fc_reg.weight', 'backbone.conv1.weight'):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_proposals_reach_the_roi_head_detached_with_rpn_proposal_cfg():
    model = _model()
    calls = []
    original = model.roi_head.forward_train

    def recording(x, img_metas, proposal_list, *args, **kwargs):
        calls.append(proposal_list)
        return original(x, img_metas, proposal_list, *args, **kwargs)

    model.roi_head.forward_train = recording
    model.train_step(det_batch(), None)
    (proposal_list, ) = calls
    assert len(proposal_list) == 2
    for p in proposal_list:
        assert p.shape[1] == 5 and not p.requires_grad and 0 < len(p) <= 100  # rpn_proposal


def _step(model, batch, seed=11):
    model.zero_grad()
    torch.manual_seed(seed)  # both samplers' draws
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return (out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                              if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


@pytest.mark.parametrize('plan', [{'rpn_head': 'full', 'roi_head': 'full'},
                                  {'rpn_head': 'selective', 'roi_head': 'selective'},
                                  {'rpn_head': 'offload', 'roi_head': 'offload'},
                                  {'*': 'full'}])
def test_every_checkpoint_mode_gives_identical_losses_and_grads(plan):
    batch = det_batch()
    plain, cp = _model(), _model()
    cp.load_state_dict(plain.state_dict())
    cp.set_checkpoint_plan(plan)
    ref, got = _step(plain, batch), _step(cp, batch)
    assert got[0] == ref[0]
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=0, msg=name)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0, msg=name)


def test_with_cp_and_fp16_train_step(count_cp):
    model = wrap_fp16_model(_model(rpn_kw=dict(with_cp=True), roi_kw=dict(with_cp=True),
                                   backbone_kw=dict(with_cp=True)))
    dtypes = []
    model.roi_head.bbox_head.fc_cls.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = model.train_step(det_batch(), None)
    assert count_cp['checkpoints'] >= 6  # the 5 rpn levels and the bbox unit, at least
    assert set(dtypes) == {torch.float16} and out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        results = model(img=[rpn_batch()['img']], img_metas=[rpn_batch()['img_metas']],
                        return_loss=False)
    assert len(results) == 2 and all(len(r) == 3 for r in results)


def test_simple_test_format_and_given_proposals():
    model = _model()
    model.roi_head.test_cfg = dict(RCNN_TEST_CFG, score_thr=0.0)
    model.eval()
    batch = rpn_batch()
    with torch.no_grad():
        results = model(img=[batch['img']], img_metas=[batch['img_metas']], return_loss=False)
        proposals = model.rpn_head.simple_test_rpn(model.extract_feat(batch['img']),
                                                   batch['img_metas'])
        given = model.forward_test([batch['img']], [batch['img_metas']],
                                   proposals=[proposals])
        tensor_form = model.forward_test(batch['img'], batch['img_metas'], proposals=proposals)
        few = model.simple_test(batch['img'], batch['img_metas'],
                                proposals=[p[:3] for p in proposals])
    assert len(results) == 2
    for per_image, meta in zip(results, batch['img_metas']):
        assert len(per_image) == 3 and sum(len(r) for r in per_image) > 0
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5
            h, w = meta['img_shape'][:2]
            assert (dets[:, :4] >= 0).all() and (dets[:, [0, 2]] <= w).all() \
                and (dets[:, [1, 3]] <= h).all()
    for a, b, c in zip(results, given, tensor_form):
        for x, y, z in zip(a, b, c):
            np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(x, z)
    # three proposals per image: at most 3 boxes per class
    assert all(len(d) <= 3 for r in few for d in r)
    with pytest.raises(ValueError, match='cannot be given with test-time augmentation'):
        model.forward_test([batch['img'][:1]] * 2, [batch['img_metas'][:1]] * 2,
                           proposals=[proposals[:1]] * 2)
    with pytest.raises(ValueError, match='one image per augmentation'):
        model.forward_test([batch['img']] * 2, [batch['img_metas']] * 2)


def test_forward_dummy_runs_both_heads():
    model = _model()
    model.eval()
    with torch.no_grad():
        (rpn_cls, rpn_reg), (cls_score, bbox_pred) = model.forward_dummy(rpn_batch()['img'])
    assert len(rpn_cls) == 5 and rpn_cls[0].shape == (2, 3, 16, 16)
    assert cls_score.shape == (1000, 4) and bbox_pred.shape == (1000, 12)


def test_without_rpn_the_batch_brings_the_proposals():
    cfg = _cfg()
    cfg.update(type='TwoStageDetector', rpn_head=None)
    torch.manual_seed(0)
    model = build_detector(cfg)
    assert not model.with_rpn and model.with_roi_head
    batch = det_batch()
    with pytest.raises(ValueError, match='needs proposals in the batch'):
        model.train_step(batch, None)
    proposals = [torch.tensor([[6., 8., 42., 52., .9], [28., 2., 61., 33., .8],
                               [0., 0., 20., 20., .1]]),
                 torch.tensor([[10., 10., 30., 30., .5]])]
    out = model.train_step(dict(batch, proposals=proposals), None)
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'acc', 'loss'}
    model.eval()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], proposals=proposals)
    assert len(results) == 2 and all(len(r) == 3 for r in results)


def test_an_rpn_model_ignores_batch_proposals_with_a_warning():
    model = _model()
    with pytest.warns(UserWarning, match='proposals in the batch are not used'):
        model.train_step(dict(det_batch(), proposals=[torch.zeros(1, 5)] * 2), None)


def test_overfits_one_batch():
    losses = overfit(_model(), det_batch())
    assert losses[-1] < 0.6 * losses[0], losses


def _mirror(dets, width):
    out = dets.copy()
    out[:, 0], out[:, 2] = width - dets[:, 2], width - dets[:, 0]
    return out


def _by_score(dets):
    return dets[np.argsort(-dets[:, 4], kind='stable')]


def test_flip_test_time_augmentation_through_the_pipeline(tmp_path):
    """mmdet's MultiScaleFlipAug(flip=True) on a synthetic COCO image: forward_test with the
    two views runs aug_test, whose boxes are in the original image; the mirror view counts,
    and the mirror image (the views swapped) gets the mirrored detections."""
    model = _model().eval()
    batch = flip_aug_batch(tmp_path)
    h, w = ORI_SHAPE
    with torch.no_grad():
        results = model(return_loss=False, **batch)
        mirrored = model(return_loss=False, **swapped_views(batch))
        one_view = model(img=batch['img'][:1], img_metas=batch['img_metas'][:1],
                         return_loss=False)
    assert len(results) == 1 and len(results[0]) == 3
    assert sum(len(d) for d in results[0]) > 0
    for dets, other, single in zip(results[0], mirrored[0], one_view[0]):
        assert dets.dtype == np.float32 and dets.shape[1] == 5
        assert (dets[:, :4] >= 0).all() and (dets[:, [0, 2]] <= w).all() \
            and (dets[:, [1, 3]] <= h).all()
        np.testing.assert_allclose(_by_score(other), _by_score(_mirror(dets, w)), atol=1e-3)
    assert any(len(a) != len(b) or not np.allclose(a, b)
               for a, b in zip(results[0], one_view[0]))
