"""SABL RetinaNet end to end (tiny ResNet-18 FPN, 64 px images), as mmdet's
``sabl/sabl_retinanet_*`` configs put it together (``RetinaNet`` + SABLRetinaHead, plain and
GN towers): losses, backward, the test result format, test-time augmentation, the head levels
as checkpoint units."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import det_batch, img_meta, resnet_cfg
from tests.helpers.ga_heads import APPROX, SQUARE, sabl_head_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)

STRIDES5 = dict(strides=[8, 16, 32, 64, 128])


def sabl_retinanet_cfg(norm_cfg=None):
    head = sabl_head_cfg(in_channels=16, feat_channels=16, norm_cfg=norm_cfg,
                         approx_anchor_generator=dict(APPROX, **STRIDES5),
                         square_anchor_generator=dict(SQUARE, **STRIDES5))
    train_cfg, test_cfg = head.pop('train_cfg'), head.pop('test_cfg')
    return dict(type='RetinaNet', backbone=resnet_cfg(),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          start_level=1, add_extra_convs='on_input', num_outs=5),
                bbox_head=head, train_cfg=train_cfg, test_cfg=test_cfg)


def _build(**kw):
    torch.manual_seed(0)
    return build_detector(sabl_retinanet_cfg(**kw))


def _losses_and_grads(model, batch):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                             if p.grad is not None}


@pytest.mark.parametrize('norm_cfg', [None, dict(type='GN', num_groups=4, requires_grad=True)])
def test_train_step_losses_and_every_gradient(norm_cfg):
    model = _build(norm_cfg=norm_cfg)
    log_vars, grads = _losses_and_grads(model, det_batch())  # the second image has no box
    assert set(log_vars) == {'loss_cls', 'loss_bbox_cls', 'loss_bbox_reg', 'loss'}
    assert all(np.isfinite(v) for v in log_vars.values()) and log_vars['loss_bbox_reg'] > 0
    missing = [n for n, p in model.named_parameters() if n not in grads]
    assert not missing, missing
    assert ('bbox_head.cls_convs.0.gn.weight' in grads) == (norm_cfg is not None)


def test_simple_and_aug_test_formats():
    model = _build()
    assert [u for u in model.checkpoint_units() if u.startswith('bbox_head')] == \
        [f'bbox_head.level{i}' for i in range(5)]
    model.eval()
    batch = det_batch()
    img = batch['img'][:1]
    flip = dict(img_meta(), flip=True, flip_direction='horizontal')
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
        aug = model.aug_test([img, img.flip(-1)], [[img_meta()], [flip]])
    for per_image in results + aug:
        assert len(per_image) == 3
        for dets in per_image:
            assert dets.dtype == np.float32 and dets.shape[1] == 5
    assert sum(len(d) for r in results for d in r) > 0 and sum(len(d) for d in aug[0]) > 0


def test_head_levels_checkpointed_give_identical_losses_and_grads():
    batch = det_batch()
    plain = _build()
    cp = _build()
    cp.set_checkpoint_plan({'bbox_head.level*': 'selective', 'backbone.*': 'full'})
    log_plain, grads_plain = _losses_and_grads(plain, batch)
    log_cp, grads_cp = _losses_and_grads(cp, batch)
    assert log_cp == log_plain and grads_cp.keys() == grads_plain.keys()
    for name, grad in grads_plain.items():
        assert torch.equal(grads_cp[name], grad), name


def test_fp16_train_step_is_finite():
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_build())
    out = model.train_step(det_batch(), None)
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
