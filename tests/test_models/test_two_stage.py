"""The RPN detector end to end, and what every two-stage detector shares
(TwoStageDetector's configs, the test-input dispatch)."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import UnknownKeyError, build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model

from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.detectors import (RPN_HEAD_KEYS, RPN_TEST_CFG, RPN_TRAIN_CFG, build_rpn, img_meta,
                                     load_strictly, overfit, resnet50_fpn_keys, resnet_cfg,
                                     rpn_batch, rpn_cfg, rpn_head_cfg)

one_thread = pytest.fixture(autouse=True)(_one_thread)

def test_mmdet_rpn_r50_fpn_keys_load_strictly():
    """mmdet's configs/_base_/models/rpn_r50_fpn.py, as it is."""
    cfg = dict(
        type='RPN',
        backbone=dict(type='ResNet', depth=50, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=True, style='pytorch'),
        neck=dict(type='FPN', in_channels=[256, 512, 1024, 2048], out_channels=256,
                  num_outs=5),
        rpn_head=rpn_head_cfg(256),
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, allowed_border=0)),
        test_cfg=dict(rpn=dict(RPN_TEST_CFG, nms_pre=2000)))
    model = build_detector(cfg)
    load_strictly(model, {**resnet50_fpn_keys(), **RPN_HEAD_KEYS})


def test_train_step_losses_and_backward():
    model = build_rpn()
    assert [n for n in model.checkpoint_units() if n.startswith('rpn_head')] == [
        f'rpn_head.level{i}' for i in range(5)]
    assert list(model.checkpoint_units())[-5:] == [f'rpn_head.level{i}' for i in range(5)]
    out = model.train_step(rpn_batch(), None)
    assert out['num_samples'] == 2
    assert set(out['log_vars']) == {'loss_rpn_cls', 'loss_rpn_bbox', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_rpn_bbox'] > 0
    out['loss'].backward()
    assert model.rpn_head.rpn_cls.weight.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(TypeError, match='gt_labels'):  # an RPN pipeline collects no labels
        model.train_step(dict(rpn_batch(), gt_labels=[torch.zeros(2).long()] * 2), None)


def test_forward_takes_img_metas_second_as_mmdet():
    """mmdet 2.x's ``forward(img, img_metas, return_loss=True, **kwargs)``: callers (and
    mmdet's own tests) pass ``img_metas`` positionally."""
    model = build_rpn()
    batch = rpn_batch()
    torch.manual_seed(3)
    losses = model(batch['img'], batch['img_metas'], gt_bboxes=batch['gt_bboxes'])
    torch.manual_seed(3)
    expected = model.forward_train(batch['img'], copy.deepcopy(batch['img_metas']),
                                   batch['gt_bboxes'])
    assert set(losses) == {'loss_rpn_cls', 'loss_rpn_bbox'}
    for key in losses:
        torch.testing.assert_close(sum(losses[key]), sum(expected[key]), rtol=0, atol=0)
    model.eval()
    with torch.no_grad():
        results = model([batch['img']], [batch['img_metas']], return_loss=False, rescale=False)
        direct = model.simple_test(batch['img'], batch['img_metas'], rescale=False)
    assert len(results) == 2
    for got, want in zip(results, direct):
        np.testing.assert_array_equal(got, want)


def _step(model, batch, seed=7):
    model.zero_grad()
    torch.manual_seed(seed)  # the RandomSampler's draws
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    return (out['log_vars'], {n: p.grad.clone() for n, p in model.named_parameters()
                              if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


@pytest.mark.parametrize('plan', [{'rpn_head': 'full'}, {'rpn_head': 'selective'},
                                  {'rpn_head': 'offload'},
                                  {'*': 'full', 'rpn_head.level1': 'selective'}])
def test_every_checkpoint_mode_gives_identical_losses_and_grads(plan):
    batch = rpn_batch()
    plain, cp = build_rpn(), build_rpn()
    cp.load_state_dict(plain.state_dict())
    cp.set_checkpoint_plan(plan)
    ref, got = _step(plain, batch), _step(cp, batch)
    assert got[0] == ref[0]
    assert got[1].keys() == ref[1].keys() and any(n.startswith('rpn_head') for n in ref[1])
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=0, msg=name)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0, msg=name)


def test_with_cp_in_the_config_checkpoints_the_rpn_levels(count_cp):
    model = build_rpn(head_kw=dict(with_cp=True, cp_use_reentrant=True))
    assert {n: m for n, m in model.checkpoint_plan().items() if n.startswith('rpn_head')} == {
        f'rpn_head.level{i}': 'full' for i in range(5)}
    out = model.train_step(rpn_batch(), None)
    assert count_cp['checkpoints'] == 5
    out['loss'].backward()


def test_fp16_train_step_and_test():
    model = wrap_fp16_model(build_rpn())
    dtypes = []
    model.rpn_head.rpn_cls.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = model.train_step(rpn_batch(), None)
    assert set(dtypes) == {torch.float16} and out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        proposals = model(img=[rpn_batch()['img']], img_metas=[rpn_batch()['img_metas']],
                          return_loss=False)
    assert all(p.dtype == np.float32 and p.shape[1] == 5 and len(p) for p in proposals)


def test_simple_test_returns_float32_proposals_rescaled_on_request():
    model = build_rpn()
    model.eval()
    batch = rpn_batch()
    metas = [img_meta(), img_meta(56, 60, scale=2.0)]
    with torch.no_grad():
        raw = model.simple_test(batch['img'], copy.deepcopy(metas))
        rescaled = model.simple_test(batch['img'], copy.deepcopy(metas), rescale=True)
        dispatched = model(img=[batch['img']], img_metas=[copy.deepcopy(metas)],
                           return_loss=False)
        heads = model.rpn_head.simple_test_rpn(model.extract_feat(batch['img']), metas)
    assert isinstance(raw, list) and len(raw) == 2
    for p, q, meta, head in zip(raw, rescaled, metas, heads):
        assert isinstance(p, np.ndarray) and p.dtype == np.float32 and p.shape[1] == 5
        assert 0 < len(p) <= RPN_TEST_CFG['max_per_img']
        np.testing.assert_array_equal(p, head.numpy())
        assert (np.diff(p[:, 4]) <= 0).all()  # best first
        h, w = meta['img_shape'][:2]
        assert (p[:, [0, 2]] <= w).all() and (p[:, [1, 3]] <= h).all() and (p[:, :4] >= 0).all()
        np.testing.assert_allclose(q[:, :4], p[:, :4] / meta['scale_factor'], rtol=1e-6)
        np.testing.assert_array_equal(q[:, 4], p[:, 4])
    for p, q in zip(rescaled, dispatched):  # forward_test rescales by default
        np.testing.assert_array_equal(p, q)
    with pytest.raises(TypeError, match=r"unexpected test inputs \['proposals'\]"):
        model.forward_test(batch['img'], metas, proposals=[torch.zeros(1, 4)] * 2)


def test_aug_test_maps_merged_proposals_into_the_first_view():
    """mmdet: the views' proposals are mapped back to the original image, merged by one NMS
    (over levels and views), and without ``rescale`` mapped into the first view again."""
    from torchvision.ops import nms
    model = build_rpn()
    model.eval()
    img = rpn_batch()['img'][:1].flip(-1)
    flip_meta = img_meta(scale=2.0, flip=True)
    with torch.no_grad():
        view = model.simple_test(img, [dict(flip_meta)])[0]  # in the view's frame
        merged = model.aug_test([img], [[dict(flip_meta)]])[0]
        both = model.forward_test([img, img], [[dict(flip_meta)], [dict(flip_meta)]])[0]
    expected = view[nms(torch.from_numpy(view[:, :4]), torch.from_numpy(view[:, 4]),
                        0.7).numpy()]
    assert len(expected) < len(view)  # some level-wise survivors overlap across levels
    np.testing.assert_allclose(merged, expected, rtol=0, atol=1e-4)
    # rescaled (forward_test's default): the original image's frame, unflipped and halved
    original = expected.copy()
    original[:, 0], original[:, 2] = 64 - expected[:, 2], 64 - expected[:, 0]
    original[:, :4] /= 2
    np.testing.assert_allclose(both, original, rtol=0, atol=1e-4)


def test_two_stage_configs_fail_early_and_clearly():
    base = dict(type='TwoStageDetector', backbone=resnet_cfg(),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          num_outs=5),
                rpn_head=rpn_head_cfg(), train_cfg=dict(rpn=RPN_TRAIN_CFG),
                test_cfg=dict(rpn=RPN_TEST_CFG))
    model = build_detector(base)
    assert model.with_rpn and not model.with_roi_head and model.with_neck
    assert not model.with_bbox and not model.with_mask
    with pytest.raises(ValueError, match='needs a roi_head to train'):
        model.train_step(dict(rpn_batch(), gt_labels=[torch.zeros(2).long()] * 2), None)
    with pytest.raises(UnknownKeyError, match="'train_cfg.rpn_propsal' .did you mean "
                                              "'train_cfg.rpn_proposal'"):
        build_detector(dict(base, train_cfg=dict(rpn=RPN_TRAIN_CFG, rpn_propsal={})))
    with pytest.raises(ValueError, match='needs test_cfg.rpn'):
        build_detector(dict(base, test_cfg=dict(rcnn={})))
    with pytest.raises(UnknownKeyError, match="'train_cfg.rpn_proposal.max_num'"):
        build_detector(dict(base, train_cfg=dict(rpn=RPN_TRAIN_CFG,
                                                 rpn_proposal=dict(RPN_TEST_CFG, max_num=9))))
    with pytest.warns(DeprecationWarning, match='pretrained is deprecated'):
        model = build_detector(dict(base, pretrained='/nowhere/r18.pth'))
    assert model.backbone.init_cfg == dict(type='Pretrained', checkpoint='/nowhere/r18.pth')
    with pytest.raises(ValueError, match='RPN needs test_cfg'):
        build_detector(dict(rpn_cfg(), test_cfg=None))


def test_rpn_show_result_draws_the_best_proposals(tmp_path):
    model = build_rpn()
    img = np.zeros((64, 64, 3), np.uint8)
    proposals = np.array([[4., 4., 30., 30., .9], [34., 34., 60., 60., .8]], np.float32)
    drawn = model.show_result(img, proposals)
    assert drawn.shape == img.shape and drawn[4:31, 4:31].any() and drawn[34:61, 34:61].any()
    top1 = model.show_result(img, proposals, top_k=1)
    assert top1[4:31, 4:31].any() and not top1[40:56, 59:62].any()
    assert model.show_result(img, proposals, out_file=str(tmp_path / 'p.jpg')) is None
    assert (tmp_path / 'p.jpg').exists()


def test_rpn_overfits_one_batch():
    losses = overfit(build_rpn(), rpn_batch())
    assert losses[-1] < 0.5 * losses[0], losses


def test_a_dense_head_key_on_a_two_stage_model_is_named():
    """mmdet's objects365 RetinaNet config puts bbox_head on a Faster R-CNN base (mmdet cannot
    build it either): the error names the problem."""
    from ckptzoo.registry import build_model
    with pytest.raises(TypeError, match='two-stage detector .* takes no bbox_head'):
        build_model(dict(type='FasterRCNN', backbone=dict(type='ResNet', depth=18),
                         rpn_head=None, roi_head=None, train_cfg=None, test_cfg=None,
                         bbox_head=dict(type='RetinaHead', num_classes=3, in_channels=8)))
