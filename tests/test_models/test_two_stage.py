"""The RPN detector end to end, and what every two-stage detector shares
(TwoStageDetector's configs, the test-input dispatch)."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import UnknownKeyError, build_detector
from ckptzoo.runner.fp16 import wrap_fp16_model

from ._cp_utils import one_thread as _one_thread

one_thread = pytest.fixture(autouse=True)(_one_thread)

RPN_TRAIN_CFG = dict(
    assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.7, neg_iou_thr=0.3, min_pos_iou=0.3,
                  match_low_quality=True, ignore_iof_thr=-1),
    sampler=dict(type='RandomSampler', num=256, pos_fraction=0.5, neg_pos_ub=-1,
                 add_gt_as_proposals=False),
    allowed_border=-1, pos_weight=-1, debug=False)
RPN_TEST_CFG = dict(nms_pre=1000, max_per_img=1000, nms=dict(type='nms', iou_threshold=0.7),
                    min_bbox_size=0)


def _backbone(depth=18, base_channels=8, **kw):
    return dict(type='ResNet', depth=depth, base_channels=base_channels,
                out_indices=(0, 1, 2, 3), norm_cfg=dict(type='BN', requires_grad=True),
                norm_eval=False, style='pytorch', **kw)


def _rpn_head(channels=16, **kw):
    return dict(type='RPNHead', in_channels=channels, feat_channels=channels,
                anchor_generator=dict(type='AnchorGenerator', scales=[8],
                                      ratios=[0.5, 1.0, 2.0], strides=[4, 8, 16, 32, 64]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                                target_stds=[1.0, 1.0, 1.0, 1.0]),
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                loss_bbox=dict(type='L1Loss', loss_weight=1.0), **kw)


def _rpn_cfg(backbone_kw=None, head_kw=None):
    return dict(type='RPN', backbone=_backbone(**(backbone_kw or {})),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          num_outs=5),
                rpn_head=_rpn_head(**(head_kw or {})),
                train_cfg=dict(rpn=RPN_TRAIN_CFG), test_cfg=dict(rpn=RPN_TEST_CFG))


def _rpn(**kw):
    torch.manual_seed(0)
    return build_detector(_rpn_cfg(**kw))


def _meta(h=64, w=64, scale=1.0, flip=False):
    return dict(filename='x.jpg', ori_filename='x.jpg', ori_shape=(h, w, 3),
                img_shape=(h, w, 3), pad_shape=(64, 64, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=flip,
                flip_direction='horizontal' if flip else None,
                img_norm_cfg=dict(mean=np.zeros(3), std=np.ones(3), to_rgb=True))


def _batch():
    g = torch.Generator().manual_seed(0)
    return dict(img=torch.randn(2, 3, 64, 64, generator=g),
                img_metas=[_meta(), _meta(56, 60)],
                gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                           torch.zeros(0, 4)])


def _resnet50_fpn_keys():
    """``{key: shape}`` of mmdet 2.x's ResNet-50 (pytorch style) and FPN (256 channels, 4
    lateral and 4 output convs), written from mmdet's module structure."""
    keys = {}

    def bn(name, c):
        keys.update({f'{name}.weight': (c, ), f'{name}.bias': (c, ),
                     f'{name}.running_mean': (c, ), f'{name}.running_var': (c, ),
                     f'{name}.num_batches_tracked': ()})

    keys['backbone.conv1.weight'] = (64, 3, 7, 7)
    bn('backbone.bn1', 64)
    inplanes = 64
    for stage, blocks in enumerate((3, 4, 6, 3), 1):
        planes = 64 * 2**(stage - 1)
        for b in range(blocks):
            p = f'backbone.layer{stage}.{b}'
            keys[f'{p}.conv1.weight'] = (planes, inplanes, 1, 1)
            bn(f'{p}.bn1', planes)
            keys[f'{p}.conv2.weight'] = (planes, planes, 3, 3)
            bn(f'{p}.bn2', planes)
            keys[f'{p}.conv3.weight'] = (planes * 4, planes, 1, 1)
            bn(f'{p}.bn3', planes * 4)
            if b == 0:
                keys[f'{p}.downsample.0.weight'] = (planes * 4, inplanes, 1, 1)
                bn(f'{p}.downsample.1', planes * 4)
            inplanes = planes * 4
    for i, c in enumerate((256, 512, 1024, 2048)):
        keys[f'neck.lateral_convs.{i}.conv.weight'] = (256, c, 1, 1)
        keys[f'neck.lateral_convs.{i}.conv.bias'] = (256, )
        keys[f'neck.fpn_convs.{i}.conv.weight'] = (256, 256, 3, 3)
        keys[f'neck.fpn_convs.{i}.conv.bias'] = (256, )
    return keys


RPN_HEAD_KEYS = {'rpn_head.rpn_conv.weight': (256, 256, 3, 3), 'rpn_head.rpn_conv.bias': (256, ),
                 'rpn_head.rpn_cls.weight': (3, 256, 1, 1), 'rpn_head.rpn_cls.bias': (3, ),
                 'rpn_head.rpn_reg.weight': (12, 256, 1, 1), 'rpn_head.rpn_reg.bias': (12, )}


def _load_strictly(model, expected):
    """``model`` has exactly the ``expected`` keys and shapes: a state dict made from them
    alone loads with ``strict=True``."""
    state = model.state_dict()
    assert sorted(state) == sorted(expected)
    for key, shape in expected.items():
        assert tuple(state[key].shape) == shape, key
    g = torch.Generator().manual_seed(0)
    ckpt = {k: torch.randn(shape, generator=g) if shape else torch.tensor(3)
            for k, shape in expected.items()}
    model.load_state_dict(ckpt, strict=True)
    torch.testing.assert_close(model.state_dict()['rpn_head.rpn_cls.weight'],
                               ckpt['rpn_head.rpn_cls.weight'])


def test_mmdet_rpn_r50_fpn_keys_load_strictly():
    """mmdet's configs/_base_/models/rpn_r50_fpn.py, as it is."""
    cfg = dict(
        type='RPN',
        backbone=dict(type='ResNet', depth=50, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=1, norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=True, style='pytorch'),
        neck=dict(type='FPN', in_channels=[256, 512, 1024, 2048], out_channels=256,
                  num_outs=5),
        rpn_head=_rpn_head(256),
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, allowed_border=0)),
        test_cfg=dict(rpn=dict(RPN_TEST_CFG, nms_pre=2000)))
    model = build_detector(cfg)
    _load_strictly(model, {**_resnet50_fpn_keys(), **RPN_HEAD_KEYS})


def test_train_step_losses_and_backward():
    model = _rpn()
    assert [n for n in model.checkpoint_units() if n.startswith('rpn_head')] == [
        f'rpn_head.level{i}' for i in range(5)]
    assert list(model.checkpoint_units())[-5:] == [f'rpn_head.level{i}' for i in range(5)]
    out = model.train_step(_batch(), None)
    assert out['num_samples'] == 2
    assert set(out['log_vars']) == {'loss_rpn_cls', 'loss_rpn_bbox', 'loss'}
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    assert out['log_vars']['loss_rpn_bbox'] > 0
    out['loss'].backward()
    assert model.rpn_head.rpn_cls.weight.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(TypeError, match='gt_labels'):  # an RPN pipeline collects no labels
        model.train_step(dict(_batch(), gt_labels=[torch.zeros(2).long()] * 2), None)


def test_forward_takes_img_metas_second_as_mmdet():
    """mmdet 2.x's ``forward(img, img_metas, return_loss=True, **kwargs)``: callers (and
    mmdet's own tests) pass ``img_metas`` positionally."""
    model = _rpn()
    batch = _batch()
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
    batch = _batch()
    plain, cp = _rpn(), _rpn()
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
    model = _rpn(head_kw=dict(with_cp=True, cp_use_reentrant=True))
    assert {n: m for n, m in model.checkpoint_plan().items() if n.startswith('rpn_head')} == {
        f'rpn_head.level{i}': 'full' for i in range(5)}
    out = model.train_step(_batch(), None)
    assert count_cp['checkpoints'] == 5
    out['loss'].backward()


def test_fp16_train_step_and_test():
    model = wrap_fp16_model(_rpn())
    dtypes = []
    model.rpn_head.rpn_cls.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    out = model.train_step(_batch(), None)
    assert set(dtypes) == {torch.float16} and out['loss'].dtype == torch.float32
    assert all(np.isfinite(v) for v in out['log_vars'].values())
    out['loss'].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.no_grad():
        proposals = model(img=[_batch()['img']], img_metas=[_batch()['img_metas']],
                          return_loss=False)
    assert all(p.dtype == np.float32 and p.shape[1] == 5 and len(p) for p in proposals)


def test_simple_test_returns_float32_proposals_rescaled_on_request():
    model = _rpn()
    model.eval()
    batch = _batch()
    metas = [_meta(), _meta(56, 60, scale=2.0)]
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
    model = _rpn()
    model.eval()
    img = _batch()['img'][:1].flip(-1)
    flip_meta = _meta(scale=2.0, flip=True)
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
    base = dict(type='TwoStageDetector', backbone=_backbone(),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          num_outs=5),
                rpn_head=_rpn_head(), train_cfg=dict(rpn=RPN_TRAIN_CFG),
                test_cfg=dict(rpn=RPN_TEST_CFG))
    model = build_detector(base)
    assert model.with_rpn and not model.with_roi_head and model.with_neck
    assert not model.with_bbox and not model.with_mask
    with pytest.raises(ValueError, match='needs a roi_head to train'):
        model.train_step(dict(_batch(), gt_labels=[torch.zeros(2).long()] * 2), None)
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
        build_detector(dict(_rpn_cfg(), test_cfg=None))


def test_rpn_show_result_draws_the_best_proposals(tmp_path):
    model = _rpn()
    img = np.zeros((64, 64, 3), np.uint8)
    proposals = np.array([[4., 4., 30., 30., .9], [34., 34., 60., 60., .8]], np.float32)
    drawn = model.show_result(img, proposals)
    assert drawn.shape == img.shape and drawn[4:31, 4:31].any() and drawn[34:61, 34:61].any()
    top1 = model.show_result(img, proposals, top_k=1)
    assert top1[4:31, 4:31].any() and not top1[40:56, 59:62].any()
    assert model.show_result(img, proposals, out_file=str(tmp_path / 'p.jpg')) is None
    assert (tmp_path / 'p.jpg').exists()


def _overfit(model, batch, steps=10):
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        out = model.train_step(copy.deepcopy(batch), opt)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        losses.append(out['log_vars']['loss'])
    return losses


def test_rpn_overfits_one_batch():
    losses = _overfit(_rpn(), _batch())
    assert losses[-1] < 0.5 * losses[0], losses
