"""Mask R-CNN end to end on a tiny model: the losses of a training step, mmdet's result format,
polygon and bitmap annotations, every checkpoint mode on every unit, and mmdet 2.x's
mask_rcnn_r50_fpn state-dict keys and shapes."""
import copy
import importlib.util
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config
from torch.utils import checkpoint as torch_cp

from ckptzoo.models import MaskRCNN
from ckptzoo.registry import build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model
from ckptzoo.core.mask import BitmapMasks, PolygonMasks

from tests.helpers.coco_tta import ORI_SHAPE, flip_aug_batch, swapped_views
from tests.helpers.checkpointing import one_thread

one_thread = pytest.fixture(autouse=True)(one_thread)

NUM_CLASSES = 3
UNITS = (['backbone.stem'] + [f'backbone.layer{i}.{j}' for i in range(1, 5) for j in range(2)]
         + [f'neck.level{i}' for i in (3, 2, 1, 0)] + [f'rpn_head.level{i}' for i in range(5)]
         + ['roi_head.bbox', 'roi_head.mask'])


def _train_cfg(rpn_num=64, rcnn_num=32):
    def assigner(pos, neg, min_pos):
        return dict(type='MaxIoUAssigner', pos_iou_thr=pos, neg_iou_thr=neg, min_pos_iou=min_pos,
                    match_low_quality=True, ignore_iof_thr=-1)
    return dict(
        rpn=dict(assigner=assigner(0.7, 0.3, 0.3),
                 sampler=dict(type='RandomSampler', num=rpn_num, pos_fraction=0.5, neg_pos_ub=-1,
                              add_gt_as_proposals=False),
                 allowed_border=-1, pos_weight=-1, debug=False),
        rpn_proposal=dict(nms_pre=200, max_per_img=100, nms=dict(type='nms', iou_threshold=0.7),
                          min_bbox_size=0),
        rcnn=dict(assigner=assigner(0.5, 0.5, 0.5),
                  sampler=dict(type='RandomSampler', num=rcnn_num, pos_fraction=0.25,
                               neg_pos_ub=-1, add_gt_as_proposals=True),
                  mask_size=28, pos_weight=-1, debug=False))


def _test_cfg(score_thr=0.05, max_per_img=100, nms_pre=1000):
    return dict(rpn=dict(nms_pre=nms_pre, max_per_img=1000, nms=dict(type='nms', iou_threshold=0.7),
                         min_bbox_size=0),
                rcnn=dict(score_thr=score_thr, nms=dict(type='nms', iou_threshold=0.5),
                          max_per_img=max_per_img, mask_thr_binary=0.5))


def _cfg(depth=18, base_channels=8, feat=16, num_classes=NUM_CLASSES, fc=32, mask_convs=2,
         train_cfg=None, test_cfg=None):
    """mmdet's mask_rcnn_r50_fpn.py, its sizes as arguments (and the residual branches not
    zero-initialised, so that every tiny-model parameter gets a gradient)."""
    in_channels = [base_channels * 2**i * (4 if depth >= 50 else 1) for i in range(4)]

    def extractor(size):
        return dict(type='SingleRoIExtractor',
                    roi_layer=dict(type='RoIAlign', output_size=size, sampling_ratio=0),
                    out_channels=feat, featmap_strides=[4, 8, 16, 32])
    return dict(
        type='MaskRCNN',
        backbone=dict(type='ResNet', depth=depth, base_channels=base_channels, num_stages=4,
                      out_indices=(0, 1, 2, 3), norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=False, style='pytorch', zero_init_residual=depth >= 50),
        neck=dict(type='FPN', in_channels=in_channels, out_channels=feat, num_outs=5),
        rpn_head=dict(
            type='RPNHead', in_channels=feat, feat_channels=feat,
            anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[0.5, 1.0, 2.0],
                                  strides=[4, 8, 16, 32, 64]),
            bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                            target_stds=[1.0, 1.0, 1.0, 1.0]),
            loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
        roi_head=dict(
            type='StandardRoIHead',
            bbox_roi_extractor=extractor(7),
            bbox_head=dict(
                type='Shared2FCBBoxHead', in_channels=feat, fc_out_channels=fc,
                roi_feat_size=7, num_classes=num_classes,
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                                target_stds=[0.1, 0.1, 0.2, 0.2]),
                reg_class_agnostic=False,
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                loss_bbox=dict(type='L1Loss', loss_weight=1.0)),
            mask_roi_extractor=extractor(14),
            mask_head=dict(type='FCNMaskHead', num_convs=mask_convs, in_channels=feat,
                           conv_out_channels=feat, num_classes=num_classes,
                           loss_mask=dict(type='CrossEntropyLoss', use_mask=True,
                                          loss_weight=1.0))),
        train_cfg=train_cfg or _train_cfg(), test_cfg=test_cfg or _test_cfg())


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(_cfg(**kw))


def _meta(ori=(64, 64), scale=1.0):
    h, w = ori
    img = (int(round(h * scale)), int(round(w * scale)))
    return dict(filename='x.jpg', ori_filename='x.jpg', ori_shape=(h, w, 3),
                img_shape=img + (3, ), pad_shape=(64, 64, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False,
                flip_direction=None,
                img_norm_cfg=dict(mean=np.zeros(3), std=np.ones(3), to_rgb=True))


POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]
BOXES = [torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
         torch.tensor([[5., 5., 52., 52.]])]


def _batch(kind='polygon'):
    g = torch.Generator().manual_seed(0)
    metas = [_meta(), _meta((56, 60))]
    polys = [PolygonMasks(p, m['pad_shape'][0], m['pad_shape'][1])
             for p, m in zip(POLYGONS, metas)]
    masks = polys if kind == 'polygon' else [BitmapMasks(p.to_ndarray(), p.height, p.width)
                                             for p in polys]
    return dict(img=torch.randn(2, 3, 64, 64, generator=g), img_metas=metas,
                gt_bboxes=[b.clone() for b in BOXES],
                gt_labels=[torch.tensor([0, 2]), torch.tensor([1])], gt_masks=masks)


def _step(model, batch, seed=7):
    """A seeded training step (the samplers draw from the global generator): log_vars,
    gradients, buffers."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


def test_train_step_losses_and_gradients():
    model = _model()
    log_vars, grads, _ = _step(model, _batch())
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox',
                              'loss_mask', 'loss']
    assert all(np.isfinite(v) for v in log_vars.values())
    assert log_vars['loss_mask'] > 0 and log_vars['loss_bbox'] > 0
    assert log_vars['loss'] == pytest.approx(sum(v for k, v in log_vars.items()
                                                 if k.startswith('loss_')), rel=1e-6)
    # every parameter learns, the mask head's included
    assert set(grads) == {n for n, _ in model.named_parameters()}
    assert all(g.abs().sum() > 0 for g in grads.values())


def test_train_step_without_any_object_gives_zero_mask_loss():
    model = _model()
    batch = _batch()
    batch.update(gt_bboxes=[torch.zeros(0, 4), torch.zeros(0, 4)],
                 gt_labels=[torch.zeros(0, dtype=torch.long)] * 2,
                 gt_masks=[PolygonMasks([], 64, 64),
                           BitmapMasks(np.zeros((0, 64, 64), np.uint8), 64, 64)])
    log_vars, grads, _ = _step(model, batch)
    assert log_vars['loss_mask'] == 0 and log_vars['loss_bbox'] == 0
    assert np.isfinite(log_vars['loss_cls']) and log_vars['loss_cls'] > 0


def _captured_targets(model, batch):
    head = model.roi_head.mask_head
    seen = []
    real = head.get_targets

    def capture(*args, **kwargs):
        seen.append(real(*args, **kwargs))
        return seen[-1]
    head.get_targets = capture
    try:
        log_vars = _step(model, batch)[0]
    finally:
        del head.get_targets
    return log_vars, seen[0]


def test_polygon_and_bitmap_annotations_agree():
    """The same objects as polygons and as their bitmaps: the same sampling and the same
    losses but the mask loss, whose targets differ on outline pixels only."""
    model = _model()
    log_poly, t_poly = _captured_targets(model, _batch('polygon'))
    log_bits, t_bits = _captured_targets(model, _batch('bitmap'))
    assert t_poly.shape == t_bits.shape and t_poly.shape[0] > 0 and t_poly.shape[1:] == (28, 28)
    assert 0.2 < t_poly.mean() < 0.9
    assert (t_poly == t_bits).float().mean() > 0.95
    for key in ('loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox'):
        assert log_poly[key] == log_bits[key], key
    assert log_poly['loss_mask'] == pytest.approx(log_bits['loss_mask'], rel=0.05)


def _counting(monkeypatch):
    calls = dict(checkpoint=0, selective=0, offload=0)
    real_cp, real_offload = torch_cp.checkpoint, torch.autograd.graph.save_on_cpu

    def counting_cp(fn, *args, **kwargs):
        calls['checkpoint'] += 1
        calls['selective'] += 'context_fn' in kwargs
        return real_cp(fn, *args, **kwargs)

    def counting_offload(*args, **kwargs):
        calls['offload'] += 1
        return real_offload(*args, **kwargs)
    monkeypatch.setattr(torch_cp, 'checkpoint', counting_cp)
    monkeypatch.setattr(torch.autograd.graph, 'save_on_cpu', counting_offload)
    return calls


def _assert_same_step(ref, got):
    (log_r, grads_r, bufs_r), (log_g, grads_g, bufs_g) = ref, got
    assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
    assert grads_g.keys() == grads_r.keys()
    for name, grad in grads_r.items():
        torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                   msg=lambda m: f'{name}: {m}')
    assert bufs_g.keys() == bufs_r.keys()
    for name, buf in bufs_r.items():
        torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0,
                                   msg=lambda m: f'{name}: {m}')


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_every_unit_equals_plain(monkeypatch, mode):
    """Losses, every gradient and the BN buffers equal the plain step with the mode on every
    unit at once, and on the mask unit alone; each unit really ran the mode."""
    plain = _model()
    assert list(plain.checkpoint_units()) == UNITS
    state = copy.deepcopy(plain.state_dict())
    batch = _batch()
    ref = _step(plain, batch)
    for units in ('*', 'roi_head.mask'):
        model = _model()
        model.load_state_dict(state)
        plan = model.set_checkpoint_plan({units: mode})
        assert plan['roi_head.mask'] == mode
        with monkeypatch.context() as patch:
            calls = _counting(patch)
            got = _step(model, batch)
        _assert_same_step(ref, got)
        ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
        assert ran == (0 if mode is None else len(UNITS) if units == '*' else 1), calls
        assert calls['selective'] == (ran if mode == 'selective' else 0), calls


def test_fp16_train_step_runs_the_mask_head_in_half():
    model = wrap_fp16_model(_model())
    assert model.roi_head.mask_head.fp16_enabled
    dtypes = []
    model.roi_head.mask_head.conv_logits.register_forward_hook(
        lambda m, i, o: dtypes.append(o.dtype))
    log_vars, grads, _ = _step(model, _batch())
    assert dtypes == [torch.float16]
    assert all(np.isfinite(v) for v in log_vars.values()) and log_vars['loss_mask'] > 0
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_simple_test_results_in_mmdet_format():
    """[(bbox_results, segm_results)] per image: per class [k, 5] float32 boxes and k bool
    masks of the original image (rescale) or of the network input, each inside its box."""
    model = _model(test_cfg=_test_cfg(score_thr=0.0, max_per_img=10))
    model.eval()
    g = torch.Generator().manual_seed(1)
    img = torch.randn(2, 3, 64, 64, generator=g)
    metas = [_meta((32, 32), scale=2.0), _meta((40, 50), scale=1.25)]
    with torch.no_grad():
        rescaled = model(img=[img], img_metas=[metas], return_loss=False, rescale=True)
        plain = model.simple_test(img, metas, rescale=False)
    for results, shapes in ((rescaled, [(32, 32), (40, 50)]),
                            (plain, [(64, 64), (50, 62)])):  # 40 * 1.25, 50 * 1.25 = 62.5
        assert isinstance(results, list) and len(results) == 2
        for (bbox_results, segm_results), shape in zip(results, shapes):
            assert len(bbox_results) == len(segm_results) == NUM_CLASSES
            assert sum(len(b) for b in bbox_results) == 10
            assert sum(m.any() for masks in segm_results for m in masks) >= 5
            for boxes, masks in zip(bbox_results, segm_results):
                assert boxes.dtype == np.float32 and boxes.shape[1] == 5
                assert isinstance(masks, list) and len(masks) == len(boxes)
                for box, mask in zip(boxes, masks):
                    assert mask.dtype == np.bool_ and mask.shape == shape
                    ys, xs = np.nonzero(mask)
                    if len(xs):
                        assert xs.min() >= np.floor(box[0]) - 1 and xs.max() < np.ceil(box[2]) + 1
                        assert ys.min() >= np.floor(box[1]) - 1 and ys.max() < np.ceil(box[3]) + 1


def test_simple_test_without_detections():
    model = _model(test_cfg=_test_cfg(score_thr=1.1))
    model.eval()
    with torch.no_grad():
        results = model.simple_test(torch.randn(1, 3, 64, 64), [_meta()], rescale=True)
    (bbox_results, segm_results), = results
    assert all(b.shape == (0, 5) for b in bbox_results)
    assert segm_results == [[] for _ in range(NUM_CLASSES)]


def _resnet50_shapes():
    """The backbone of mmdet's ResNet-50 (torchvision's names), built from its structure."""
    shapes = {'conv1.weight': (64, 3, 7, 7)}

    def bn(prefix, c):
        shapes.update({f'{prefix}.{k}': (c, ) for k in ('weight', 'bias', 'running_mean',
                                                         'running_var')})
        shapes[f'{prefix}.num_batches_tracked'] = ()
    bn('bn1', 64)
    inplanes = 64
    for i, blocks in enumerate((3, 4, 6, 3)):
        planes = 64 * 2**i
        for j in range(blocks):
            p = f'layer{i + 1}.{j}'
            shapes[f'{p}.conv1.weight'] = (planes, inplanes, 1, 1)
            shapes[f'{p}.conv2.weight'] = (planes, planes, 3, 3)
            shapes[f'{p}.conv3.weight'] = (planes * 4, planes, 1, 1)
            for k, c in ((1, planes), (2, planes), (3, planes * 4)):
                bn(f'{p}.bn{k}', c)
            if j == 0:
                shapes[f'{p}.downsample.0.weight'] = (planes * 4, inplanes, 1, 1)
                bn(f'{p}.downsample.1', planes * 4)
            inplanes = planes * 4
    return shapes


def _mask_rcnn_r50_fpn_shapes(num_classes=80):
    """mmdet 2.x mask_rcnn_r50_fpn's state dict: key -> shape, from its module structure."""
    shapes = {f'backbone.{k}': v for k, v in _resnet50_shapes().items()}
    for i, c in enumerate((256, 512, 1024, 2048)):
        shapes[f'neck.lateral_convs.{i}.conv.weight'] = (256, c, 1, 1)
        shapes[f'neck.lateral_convs.{i}.conv.bias'] = (256, )
        shapes[f'neck.fpn_convs.{i}.conv.weight'] = (256, 256, 3, 3)
        shapes[f'neck.fpn_convs.{i}.conv.bias'] = (256, )
    shapes.update({'rpn_head.rpn_conv.weight': (256, 256, 3, 3), 'rpn_head.rpn_conv.bias': (256, ),
                   'rpn_head.rpn_cls.weight': (3, 256, 1, 1), 'rpn_head.rpn_cls.bias': (3, ),
                   'rpn_head.rpn_reg.weight': (12, 256, 1, 1), 'rpn_head.rpn_reg.bias': (12, )})
    box = 'roi_head.bbox_head'
    shapes.update({f'{box}.shared_fcs.0.weight': (1024, 256 * 7 * 7),
                   f'{box}.shared_fcs.0.bias': (1024, ),
                   f'{box}.shared_fcs.1.weight': (1024, 1024),
                   f'{box}.shared_fcs.1.bias': (1024, ),
                   f'{box}.fc_cls.weight': (num_classes + 1, 1024),
                   f'{box}.fc_cls.bias': (num_classes + 1, ),
                   f'{box}.fc_reg.weight': (num_classes * 4, 1024),
                   f'{box}.fc_reg.bias': (num_classes * 4, )})
    mask = 'roi_head.mask_head'
    for i in range(4):
        shapes[f'{mask}.convs.{i}.conv.weight'] = (256, 256, 3, 3)
        shapes[f'{mask}.convs.{i}.conv.bias'] = (256, )
    shapes.update({f'{mask}.upsample.weight': (256, 256, 2, 2), f'{mask}.upsample.bias': (256, ),
                   f'{mask}.conv_logits.weight': (num_classes, 256, 1, 1),
                   f'{mask}.conv_logits.bias': (num_classes, )})
    return shapes


def test_mmdet_mask_rcnn_r50_fpn_checkpoint_loads_strictly():
    torch.manual_seed(0)
    model = build_detector(_cfg(depth=50, base_channels=64, feat=256, num_classes=80, fc=1024,
                                mask_convs=4, train_cfg=_train_cfg(256, 512)))
    shapes = _mask_rcnn_r50_fpn_shapes()
    assert sorted(model.state_dict()) == sorted(shapes)
    # a checkpoint written to that structure loads with strict=True, every tensor in place
    gen = torch.Generator().manual_seed(0)
    ckpt = {k: (torch.randn(s, generator=gen) if s else torch.tensor(3))
            for k, s in shapes.items()}
    model.load_state_dict(ckpt, strict=True)
    for k, v in model.state_dict().items():
        assert torch.equal(v, ckpt[k].to(v.dtype)), k
    # ResNet-50 without fc 23.51 M, FPN 3.34 M, RPN 0.59 M, box head 14.31 M, mask head 2.64 M
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == 44_396_336, n_params


def _mmdet_config(name):
    spec = importlib.util.find_spec('mmdet')  # finds the package folder, imports nothing
    if spec is None:
        pytest.skip('mmdet 2.28.2 (its config files) is not installed')
    return Config.fromfile(osp.join(spec.submodule_search_locations[0], '.mim', 'configs', name))


def test_mmdet_mask_rcnn_config_file_builds_the_same_structure():
    cfg = _mmdet_config('mask_rcnn/mask_rcnn_r50_fpn_1x_coco.py')
    model = build_detector(cfg.model)
    assert type(model).__name__ == 'MaskRCNN'
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == \
        _mask_rcnn_r50_fpn_shapes()
    assert model.roi_head.mask_head.loss_mask.use_mask
    assert list(model.checkpoint_units())[-2:] == ['roi_head.bbox', 'roi_head.mask']


def test_positional_arguments_in_mmdets_order():
    """MaskRCNN(backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None, ...)."""
    cfg = _cfg()
    torch.manual_seed(0)
    model = MaskRCNN(cfg['backbone'], cfg['rpn_head'], cfg['roi_head'], cfg['train_cfg'],
                     cfg['test_cfg'], cfg['neck'])
    assert model.with_neck and model.with_rpn and model.with_mask
    assert model.roi_head.train_cfg['mask_size'] == 28
    assert model.roi_head.test_cfg['mask_thr_binary'] == 0.5
    with pytest.raises(TypeError):
        MaskRCNN(cfg['backbone'], cfg['rpn_head'], cfg['roi_head'])  # the cfgs are required


def test_flip_test_time_augmentation_through_the_pipeline(tmp_path):
    """mmdet's MultiScaleFlipAug(flip=True) on a synthetic COCO image: forward_test with the
    two views gives one (bbox, segm) result at the original size, a mask per box; the mirror
    image (the views swapped) gets the mirrored boxes and masks, which holds only if each
    view's masks are flipped back before they are averaged."""
    model = _model().eval()
    batch = flip_aug_batch(tmp_path)
    h, w = ORI_SHAPE
    with torch.no_grad():
        (boxes, masks), = model(return_loss=False, **batch)
        (m_boxes, m_masks), = model(return_loss=False, **swapped_views(batch))
    assert len(boxes) == len(masks) == NUM_CLASSES and sum(len(b) for b in boxes) > 0
    differing = pixels = 0
    for dets, segms, m_dets, m_segms in zip(boxes, masks, m_boxes, m_masks):
        assert len(segms) == len(dets) == len(m_segms) == len(m_dets)
        assert all(m.dtype == bool and m.shape == (h, w) for m in segms)
        order, m_order = np.argsort(-dets[:, 4]), np.argsort(-m_dets[:, 4])
        mirror = dets[order].copy()
        mirror[:, 0], mirror[:, 2] = w - dets[order, 2], w - dets[order, 0]
        np.testing.assert_allclose(m_dets[m_order], mirror, atol=1e-3)
        for i, j in zip(order, m_order):
            differing += int((m_segms[j] != segms[i][:, ::-1]).sum())
            pixels += h * w
    # exact here; a pixel on the threshold may go either way with other float rounding
    # (masks averaged without flipping back differ in ~3% of a mask's pixels)
    assert differing <= pixels * 1e-3
