"""Guided anchoring end to end (tiny ResNet-18 FPN, 64 px images), as mmdet's
``guided_anchoring/`` configs put it together: GA-RetinaNet (``RetinaNet`` + GARetinaHead),
GA-Faster R-CNN (``FasterRCNN`` + GARPNHead as its ``rpn_head``) and GA-RPN (``RPN``):
losses, backward, the test result formats, the head levels as checkpoint units."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch, resnet_cfg
from tests.helpers.ga_heads import APPROX, RPN_TEST_CFG, RPN_TRAIN_CFG, GA_TRAIN_CFG, \
    RETINA_TEST_CFG, ga_head_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)

STRIDES5 = dict(strides=[8, 16, 32, 64, 128])
RPN_STRIDES = dict(strides=[4, 8, 16, 32, 64])


def _neck(start_level=1, extra='on_input'):
    return dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                start_level=start_level, add_extra_convs=extra, num_outs=5)


def _ga_retina_head():
    head = ga_head_cfg('GARetinaHead', in_channels=16, feat_channels=16, deform_groups=4)
    head['approx_anchor_generator'] = dict(APPROX, **STRIDES5)
    head['square_anchor_generator'] = dict(head['square_anchor_generator'], **STRIDES5)
    for key in ('train_cfg', 'test_cfg'):
        head.pop(key)
    return head


def _ga_rpn_head():
    head = ga_head_cfg('GARPNHead', in_channels=16, feat_channels=16, deform_groups=4)
    head['approx_anchor_generator'] = dict(APPROX, octave_base_scale=8, **RPN_STRIDES)
    head['square_anchor_generator'] = dict(type='AnchorGenerator', ratios=[1.0], scales=[8],
                                           **RPN_STRIDES)
    for key in ('train_cfg', 'test_cfg'):
        head.pop(key)
    return head


def ga_retinanet_cfg():
    return dict(type='RetinaNet', backbone=resnet_cfg(), neck=_neck(),
                bbox_head=_ga_retina_head(), train_cfg=GA_TRAIN_CFG,
                test_cfg=RETINA_TEST_CFG)


def ga_faster_cfg():
    from tests.test_models.test_faster_rcnn import RCNN_TRAIN_CFG, _roi_head
    return dict(type='FasterRCNN', backbone=resnet_cfg(), neck=_neck(0, False),
                rpn_head=_ga_rpn_head(), roi_head=_roi_head(),
                train_cfg=dict(rpn=RPN_TRAIN_CFG, rpn_proposal=dict(RPN_TEST_CFG, nms_pre=200),
                               rcnn=RCNN_TRAIN_CFG),
                test_cfg=dict(rpn=RPN_TEST_CFG, rcnn=dict(score_thr=0.0,
                                                          nms=dict(type='nms',
                                                                   iou_threshold=0.5),
                                                          max_per_img=50)))


def ga_rpn_cfg():
    return dict(type='RPN', backbone=resnet_cfg(), neck=_neck(0, False),
                rpn_head=_ga_rpn_head(), train_cfg=dict(rpn=RPN_TRAIN_CFG),
                test_cfg=dict(rpn=RPN_TEST_CFG))


def _build(cfg):
    torch.manual_seed(0)
    return build_detector(copy.deepcopy(cfg))


def _losses_and_grads(model, batch, seed=0):
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


@pytest.mark.parametrize('make,names', [
    (ga_retinanet_cfg, {'loss_cls', 'loss_bbox', 'loss_shape', 'loss_loc'}),
    (ga_faster_cfg, {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_anchor_shape', 'loss_anchor_loc',
                     'loss_cls', 'loss_bbox', 'acc'}),
    (ga_rpn_cfg, {'loss_rpn_cls', 'loss_rpn_bbox', 'loss_anchor_shape', 'loss_anchor_loc'})])
def test_train_step_losses_and_every_gradient(make, names):
    model = _build(make())
    batch = det_batch()  # the second image has no box
    if make is ga_rpn_cfg:
        batch.pop('gt_labels')
    log_vars, grads = _losses_and_grads(model, batch)
    assert set(log_vars) == names | {'loss'}
    assert all(np.isfinite(v) for v in log_vars.values())
    assert log_vars[next(n for n in names if 'shape' in n)] > 0
    missing = [n for n, p in model.named_parameters() if n not in grads]
    assert not missing, missing
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_ga_retinanet_simple_test_format_and_units():
    model = _build(ga_retinanet_cfg())
    assert [u for u in model.checkpoint_units() if u.startswith('bbox_head')] == \
        [f'bbox_head.level{i}' for i in range(5)]
    model.eval()
    batch = det_batch()
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert sum(len(d) for r in results for d in r) > 0
    for per_image in results:
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5


def test_ga_faster_and_rpn_test_results():
    faster = _build(ga_faster_cfg())
    assert [u for u in faster.checkpoint_units() if u.startswith('rpn_head')] == \
        [f'rpn_head.level{i}' for i in range(5)]
    rpn = _build(ga_rpn_cfg())
    batch = det_batch()
    faster.eval()
    rpn.eval()
    with torch.no_grad():
        results = faster.simple_test(batch['img'], batch['img_metas'])
        proposals = rpn.simple_test(batch['img'], batch['img_metas'])
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(d.shape[1] == 5 for r in results for d in r)
    assert len(proposals) == 2
    for p in proposals:
        assert p.dtype == np.float32 and p.shape[1] == 5 and 0 < len(p) <= 1000


@pytest.mark.parametrize('make', [ga_retinanet_cfg, ga_faster_cfg])
def test_head_levels_checkpointed_give_identical_losses_and_grads(make):
    batch = det_batch()
    plain = _build(make())
    cp = _build(make())
    cp.set_checkpoint_plan({'*_head.level*': 'full'})
    assert set(m for n, m in cp.checkpoint_plan().items() if '_head.level' in n) == {'full'}
    log_plain, grads_plain = _losses_and_grads(plain, batch)
    log_cp, grads_cp = _losses_and_grads(cp, batch)
    assert log_cp == log_plain and grads_cp.keys() == grads_plain.keys()
    for name, grad in grads_plain.items():
        assert torch.equal(grads_cp[name], grad), name


@pytest.mark.parametrize('make', [ga_retinanet_cfg, ga_faster_cfg])
def test_fp16_train_step_is_finite(make):
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_build(make()))
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
