"""The YOLACT detector (mmdet 2.x keys and losses), tiny end to end: losses finite, backward,
simple_test in mmdet's ``(bbox_results, segm_results)`` format, every checkpoint mode exact."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.core.mask import BitmapMasks, PolygonMasks, encode_mask_results
from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread, randomise_bn
from tests.helpers.detectors import img_meta
from tests.helpers.unit_modes import Counting

one_thread = pytest.fixture(autouse=True)(one_thread)


def yolact_cfg(num_classes=3, **head_kw):
    """mmdet's yolact_r50_1x8_coco.py at 64 px with tiny channels."""
    return dict(
        type='YOLACT',
        backbone=dict(type='ResNet', depth=18, base_channels=8, num_stages=4,
                      out_indices=(0, 1, 2, 3), frozen_stages=-1,
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch'),
        neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16, start_level=1,
                  add_extra_convs='on_input', num_outs=5, upsample_cfg=dict(mode='bilinear')),
        bbox_head=dict(
            type='YOLACTHead', num_classes=num_classes, in_channels=16, feat_channels=16,
            anchor_generator=dict(type='AnchorGenerator', octave_base_scale=3,
                                  scales_per_octave=1, base_sizes=[8, 16, 32, 64, 128],
                                  ratios=[0.5, 1.0, 2.0],
                                  strides=[64.0 / x for x in [8, 4, 2, 1, 1]],
                                  centers=[(64 * 0.5 / x, 64 * 0.5 / x)
                                           for x in [8, 4, 2, 1, 1]]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                            target_stds=[0.1, 0.1, 0.2, 0.2]),
            loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, reduction='none',
                          loss_weight=1.0),
            loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.5),
            num_head_convs=1, num_protos=8, use_ohem=True, **head_kw),
        mask_head=dict(type='YOLACTProtonet', in_channels=16, num_protos=8,
                       num_classes=num_classes, proto_channels=(16, 16, 16, None, 16, 8),
                       max_masks_to_train=100, loss_mask_weight=6.125),
        segm_head=dict(type='YOLACTSegmHead', num_classes=num_classes, in_channels=16,
                       loss_segm=dict(type='CrossEntropyLoss', use_sigmoid=True,
                                      loss_weight=1.0)),
        train_cfg=dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                                     min_pos_iou=0., ignore_iof_thr=-1,
                                     gt_max_assign_all=False),
                       allowed_border=-1, pos_weight=-1, neg_pos_ratio=3, debug=False),
        test_cfg=dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05, iou_thr=0.5, top_k=200,
                      max_per_img=100))


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(yolact_cfg(**kw))


def _batch(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    polys = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
              [np.array([30., 4., 60., 6., 58., 30.])]], []]
    masks = [PolygonMasks(polys[0], 64, 64).to_ndarray(), np.zeros((0, 64, 64), np.uint8)]
    return dict(img=torch.randn(2, 3, 64, 64, generator=g, dtype=dtype),
                img_metas=[img_meta(), img_meta()],
                gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]],
                                        dtype=dtype), torch.zeros(0, 4, dtype=dtype)],
                gt_labels=[torch.tensor([0, 2]), torch.zeros(0, dtype=torch.long)],
                gt_masks=[BitmapMasks(m, 64, 64) for m in masks])


def test_state_dict_keys_and_units_as_mmdet():
    model = _model()
    keys = set(model.state_dict())
    assert {'backbone.conv1.weight', 'neck.fpn_convs.4.conv.weight',
            'bbox_head.head_convs.0.conv.weight', 'bbox_head.conv_cls.weight',
            'bbox_head.conv_reg.bias', 'bbox_head.conv_coeff.weight',
            'segm_head.segm_conv.weight', 'mask_head.protonet.0.weight',
            'mask_head.protonet.10.bias'} <= keys
    units = list(model.checkpoint_units())
    assert [u for u in units if not u.startswith(('backbone.', 'neck.'))] == \
        [f'bbox_head.level{i}' for i in range(5)] + ['mask_head.protonet']


def test_train_step_losses_finite_and_backward():
    model = _model()
    out = model.train_step(_batch())
    assert set(out['log_vars']) == {'loss_cls', 'loss_bbox', 'loss_segm', 'loss_mask', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_mask'] > 0 and out['log_vars']['loss_segm'] > 0
    out['loss'].backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values()), \
        [n for n, g in grads.items() if g is None]
    # masks as tensors work too; no masks at all is refused
    batch = _batch()
    batch['gt_masks'] = [m.to_tensor(torch.uint8, 'cpu') for m in batch['gt_masks']]
    assert np.isfinite(model.train_step(batch)['log_vars']['loss'])
    batch.pop('gt_masks')
    with pytest.raises(ValueError, match='needs gt_masks'):
        model.train_step(batch)


def test_simple_test_format():
    model = _model().eval()
    metas = [img_meta(), img_meta(64, 64, scale=1.25)]
    metas[1]['ori_shape'] = (51, 51, 3)
    with torch.no_grad():
        results = model(torch.randn(2, 3, 64, 64), metas, return_loss=False, rescale=True)
    assert len(results) == 2
    for (bbox_results, segm_results), (h, w) in zip(results, [(64, 64), (51, 51)]):
        assert len(bbox_results) == len(segm_results) == 3
        assert sum(len(b) for b in bbox_results) > 0
        for boxes, masks in zip(bbox_results, segm_results):
            assert boxes.dtype == np.float32 and boxes.shape[1:] == (5, )
            assert len(masks) == len(boxes)
            assert all(m.shape == (h, w) and m.dtype == np.uint8 for m in masks)
        # the COCO segm evaluation's input: RLE per mask, per class
        encoded = encode_mask_results(segm_results)
        assert [len(e) for e in encoded] == [len(m) for m in segm_results]
    with pytest.raises(NotImplementedError, match='test-time augmentation'):
        model.aug_test([], [])


def _run(model, batch, seed=3):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    losses = model.forward_train(**copy.deepcopy(batch))
    total = sum(sum(v) for v in losses.values())
    total.backward()
    return ({k: torch.stack([x.reshape(()) for x in v]).detach() for k, v in losses.items()},
            {n: p.grad for n, p in model.named_parameters()},
            {n: b.clone() for n, b in model.named_buffers()})


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode, monkeypatch):
    plain = randomise_bn(_model(norm_cfg=dict(type='BN')).double().train())
    model = copy.deepcopy(plain)
    model.set_checkpoint_plan({'*': mode})
    batch = _batch(torch.float64)
    ref = _run(plain, batch)
    counting = Counting(monkeypatch)
    got = _run(model, batch)
    assert counting.calls >= len(model.checkpoint_units()) - 1
    for k in ref[0]:
        torch.testing.assert_close(got[0][k], ref[0][k], rtol=0, atol=1e-10)
    for name, g in ref[1].items():
        torch.testing.assert_close(got[1][name], g, rtol=0, atol=1e-10,
                                   msg=lambda m: f'{name}: {m}')
    for name, b in ref[2].items():
        torch.testing.assert_close(got[2][name], b, rtol=0, atol=0)


def test_with_cp_on_heads():
    cfg = yolact_cfg(with_cp=True)
    cfg['mask_head']['with_cp'] = True
    torch.manual_seed(0)
    plan = build_detector(cfg).checkpoint_plan()
    assert {plan[f'bbox_head.level{i}'] for i in range(5)} == {'full'}
    assert plan['mask_head.protonet'] == 'full'


def test_fp16_train_step_and_test_are_finite():
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_model())
    assert model.bbox_head.fp16_enabled and model.mask_head.fp16_enabled
    out = model.train_step(_batch())
    assert out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        (bbox_results, segm_results), = model(torch.randn(1, 3, 64, 64), [img_meta()],
                                              return_loss=False)
    assert [len(b) for b in bbox_results] == [len(s) for s in segm_results]
