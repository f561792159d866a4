"""YOLOX detector (mmdet 2.x): keys, train / test end to end, the random resizing (mmdet's
schedule and distribution, sizes every rank agrees on, progress kept through a checkpoint),
every checkpoint mode exact."""
import io

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model
from tests.helpers.detectors import det_batch, img_meta
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)


def _cfg(**kw):
    cfg = dict(type='YOLOX', input_size=(64, 64), random_size_range=(1, 3),
               random_size_interval=2,
               backbone=dict(type='CSPDarknet', deepen_factor=0.33, widen_factor=0.125),
               neck=dict(type='YOLOXPAFPN', in_channels=[32, 64, 128], out_channels=16,
                         num_csp_blocks=1),
               bbox_head=dict(type='YOLOXHead', num_classes=3, in_channels=16,
                              feat_channels=16),
               train_cfg=dict(assigner=dict(type='SimOTAAssigner', center_radius=2.5)),
               test_cfg=dict(score_thr=0.01, nms=dict(type='nms', iou_threshold=0.65)))
    cfg.update(kw)
    return cfg


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def test_state_dict_keys_as_mmdet():
    keys = set(_model().state_dict())
    assert {'backbone.stem.conv.conv.weight', 'neck.out_convs.2.conv.weight',
            'bbox_head.multi_level_cls_convs.2.1.conv.weight',
            'bbox_head.multi_level_conv_obj.0.bias'} <= keys
    assert not any(k.startswith('bbox_head.level') for k in keys)


def test_train_step_and_simple_test_format():
    model = _model()
    out = model.train_step(det_batch(), None)
    assert out['num_samples'] == 2
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss_obj', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    model.bbox_head.use_l1 = True
    assert 'loss_l1' in model.train_step(det_batch(), None)['log_vars']
    model.eval()
    with torch.no_grad():
        results = model.simple_test(torch.randn(2, 3, 64, 64), [img_meta(), img_meta()],
                                    rescale=True)
    assert len(results) == 2 and all(len(r) == 3 for r in results)
    assert all(a.dtype == np.float32 and a.shape[1:] == (5, ) for r in results for a in r)


def test_fp16_train_step_is_finite():
    model = wrap_fp16_model(_model())
    assert model.bbox_head.fp16_enabled
    out = model.train_step(det_batch(), None)
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()


def test_random_size_schedule_and_distribution():
    model = _model()
    seen = []
    model.backbone.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[-2:]))
    batch = det_batch()
    boxes = [b.clone() for b in batch['gt_bboxes']]
    for _ in range(6):
        model.forward_train(**batch)
    # mmdet's schedule: the default size for the first `interval` forwards, then the size
    # drawn after each `interval`-th
    assert seen[:2] == [(64, 64)] * 2
    assert seen[2] == seen[3] == model.random_size(1)
    assert seen[4] == seen[5] == model.random_size(2)
    assert model._progress_in_iter == 6
    for a, b in zip(batch['gt_bboxes'], boxes):  # the caller's boxes are not scaled in place
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    draws = {model.random_size(k) for k in range(1, 200)}
    assert draws == {(32, 32), (64, 64), (96, 96)}  # 32 * randint(1, 3), every value
    # a pure function of k: another instance (another rank) agrees without talking
    assert [_model().random_size(k) for k in range(1, 20)] == \
        [model.random_size(k) for k in range(1, 20)]
    wide = _model(input_size=(64, 128), random_size_range=(2, 2))
    assert wide.random_size(5) == (64, 128)


def test_boxes_scale_with_the_image():
    model = _model()
    model._progress_in_iter = 2
    model.random_size = lambda k: (32, 96)
    img = torch.randn(1, 3, 64, 64)
    out, boxes = model._preprocess(img, [torch.tensor([[8., 8., 32., 40.]])])
    assert out.shape[-2:] == (32, 96)
    torch.testing.assert_close(boxes[0], torch.tensor([[12., 4., 48., 20.]]))
    torch.testing.assert_close(out, torch.nn.functional.interpolate(
        img, size=(32, 96), mode='bilinear', align_corners=False))


def test_progress_survives_a_checkpoint_and_mmdet_weights_load():
    model = _model()
    model._progress_in_iter = 17
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    assert set(state) == set(_model().state_dict())  # no new key
    other = _model()
    other.load_state_dict(state, strict=True)
    assert other._progress_in_iter == 17 and other._input_size == model.random_size(8)
    plain = {k: v for k, v in state.items()}  # an mmdet checkpoint: no metadata
    fresh = _model()
    fresh.load_state_dict(plain, strict=True)
    assert fresh._progress_in_iter == 0 and fresh._input_size == (64, 64)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    def run(model):
        model.zero_grad()
        losses = model.forward_train(**det_batch())
        sum(losses.values()).backward()
        return ({k: v.detach() for k, v in losses.items()},
                {n: p.grad.clone() for n, p in model.named_parameters()},
                {n: b.clone() for n, b in model.named_buffers()})

    plain = _model()
    cp = _model()
    cp.load_state_dict(plain.state_dict())
    plan = cp.set_checkpoint_plan({'*': mode})
    assert plan['bbox_head.level2'] == mode and plan['backbone.stem'] == mode
    for _ in range(3):  # through a size change (interval 2)
        ref, got = run(plain), run(cp)
        for part_ref, part_got in zip(ref, got):
            assert part_ref.keys() == part_got.keys()
            for name in part_ref:
                torch.testing.assert_close(part_got[name], part_ref[name], rtol=0, atol=0,
                                           msg=name)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='input_size must be two positive ints'):
        _model(input_size=640)
    with pytest.raises(ValueError, match=r'random_size_range must be \(lo, hi\)'):
        _model(random_size_range=(25, 15))
    with pytest.raises(ValueError, match='random_size_interval must be a positive int'):
        _model(random_size_interval=0)
