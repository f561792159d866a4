"""SCNet end to end on a tiny model: mmdet's loss keys with each optional branch, every
checkpoint mode on every RoI unit (semantic, glbctx, per stage box, mask) exact, the result
format, and mmdet 2.x's scnet_r50_fpn_1x_coco state-dict layout."""
import copy
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.core.mask import PolygonMasks
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import RPN_HEAD_KEYS, img_meta, resnet50_fpn_keys
from tests.helpers.mmdet_config_count import mmdet_configs_root
from tests.helpers.scnet import scnet_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)

ROI_UNITS = ['roi_head.semantic', 'roi_head.glbctx'] + [f'roi_head.bbox.{i}' for i in range(3)] \
    + ['roi_head.mask']
POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]


def _batch(with_semantic=True):
    g = torch.Generator().manual_seed(0)
    batch = dict(img=torch.randn(2, 3, 64, 64, generator=g),
                 img_metas=[img_meta(), img_meta(56, 60)],
                 gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                            torch.tensor([[5., 5., 52., 52.]])],
                 gt_labels=[torch.tensor([0, 2]), torch.tensor([1])],
                 gt_masks=[PolygonMasks(p, 64, 64) for p in POLYGONS])
    if with_semantic:
        seg = torch.randint(0, 5, (2, 1, 8, 8), generator=g).to(torch.uint8)
        seg[1, :, 7:] = 255  # padding, ignored
        batch['gt_semantic_seg'] = seg
    return batch


def _step(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize('kw', [{}, dict(with_semantic=False), dict(with_glbctx=False),
                                dict(with_feat_relay=False)])
def test_train_step_losses_and_gradients(kw):
    torch.manual_seed(0)
    model = build_detector(scnet_cfg(**kw))
    model.init_weights()  # one mask head, not the cascade's list
    log_vars, grads, _ = _step(model, _batch(kw.get('with_semantic', True)))
    stage = ['loss_cls', 'acc', 'loss_bbox']
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox'] + (
        ['loss_semantic_seg'] if kw.get('with_semantic', True) else []) + (
        ['loss_glbctx'] if kw.get('with_glbctx', True) else []) + [
        f's{i}.{k}' for i in range(3) for k in stage] + ['loss_mask', 'loss']
    assert all(np.isfinite(v) for v in log_vars.values())
    roi = {n for n, _ in model.named_parameters() if n.startswith('roi_head.')}
    assert roi <= set(grads) and all(grads[n].abs().sum() > 0 for n in roi)


def test_a_semantic_head_needs_the_semantic_map():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match='gt_semantic_seg'):
        build_detector(scnet_cfg()).train_step(_batch(with_semantic=False), None)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(mode):
    """Losses, every gradient and the BN buffers (every SCNet head has BN here) of a plain
    step, with the mode on every RoI unit and on the mask and context units only."""
    cfg = scnet_cfg(norm_cfg=dict(type='BN'))
    torch.manual_seed(0)
    plain = build_detector(cfg)
    assert list(plain.checkpoint_units())[-6:] == ROI_UNITS
    state = copy.deepcopy(plain.state_dict())
    batch = _batch()
    ref = _step(plain, batch)
    for plan in ({'roi_head': mode}, {'roi_head.mask': mode, 'roi_head.glbctx': mode}):
        model = build_detector(cfg)
        model.load_state_dict(state)
        model.set_checkpoint_plan(plan)
        (log_r, grads_r, bufs_r), (log_g, grads_g, bufs_g) = ref, _step(model, batch)
        assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
        assert grads_g.keys() == grads_r.keys()
        for name, grad in grads_r.items():
            torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                       msg=lambda m: f'{name}: {m}')
        for name, buf in bufs_r.items():
            torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0)


@pytest.mark.parametrize('kw', [{}, dict(with_feat_relay=False, with_glbctx=False,
                                         with_semantic=False)])
@pytest.mark.parametrize('rescale', [True, False])
def test_simple_test_results_in_mmdet_format(kw, rescale):
    torch.manual_seed(0)
    model = build_detector(scnet_cfg(score_thr=0.0, max_per_img=10, **kw)).eval()
    img = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    metas = [img_meta(), img_meta()]
    metas[1].update(ori_shape=(40, 50, 3), img_shape=(50, 62, 3),
                    scale_factor=np.full(4, 1.25, dtype=np.float32))
    with torch.no_grad():
        results = model(img=[img], img_metas=[metas], return_loss=False, rescale=rescale)
        roi_outs = model.forward_dummy(img)[-1]
    assert len(roi_outs) == 7 and roi_outs[-1].shape[1:] == (3, 28, 28)
    for (bboxes, segms), shape in zip(results, [(64, 64), (40, 50)]):
        assert len(bboxes) == 3 and sum(len(b) for b in bboxes) == 10
        for boxes, masks in zip(bboxes, segms):
            assert len(masks) == len(boxes)
            assert all(m.dtype == np.bool_ for m in masks)
            assert all(m.shape == shape for m in masks) or not rescale


def _scnet_roi_keys():
    """``{key: shape}`` of mmdet 2.x's SCNetRoIHead in scnet_r50_fpn_1x_coco.py, written
    from mmdet's module structure (``SimplifiedBasicBlock`` s without norm: biased convs)."""
    keys = {}

    def conv(name, cout, cin, k):
        keys.update({f'{name}.weight': (cout, cin, k, k), f'{name}.bias': (cout, )})

    def blocks(prefix, n):
        for i in range(n):
            conv(f'{prefix}.convs.{i}.conv1', 256, 256, 3)
            conv(f'{prefix}.convs.{i}.conv2', 256, 256, 3)
    for s in range(3):
        p = f'roi_head.bbox_head.{s}'
        keys.update({f'{p}.shared_fcs.0.weight': (1024, 256 * 49),
                     f'{p}.shared_fcs.0.bias': (1024, ), f'{p}.shared_fcs.1.weight': (1024, 1024),
                     f'{p}.shared_fcs.1.bias': (1024, ), f'{p}.fc_cls.weight': (81, 1024),
                     f'{p}.fc_cls.bias': (81, ), f'{p}.fc_reg.weight': (4, 1024),
                     f'{p}.fc_reg.bias': (4, )})
    blocks('roi_head.mask_head', 6)
    keys.update({'roi_head.mask_head.upsample.weight': (256, 256, 2, 2),
                 'roi_head.mask_head.upsample.bias': (256, )})
    conv('roi_head.mask_head.conv_logits', 80, 256, 1)
    p = 'roi_head.semantic_head'
    for i in range(5):
        conv(f'{p}.lateral_convs.{i}.conv', 256, 256, 1)
    blocks(p, 2)
    conv(f'{p}.conv_embedding.conv', 256, 256, 1)
    conv(f'{p}.conv_logits', 183, 256, 1)
    keys.update({'roi_head.feat_relay_head.fc.weight': (256 * 49, 1024),
                 'roi_head.feat_relay_head.fc.bias': (256 * 49, )})
    blocks('roi_head.glbctx_head', 2)
    keys.update({'roi_head.glbctx_head.fc.weight': (80, 256),
                 'roi_head.glbctx_head.fc.bias': (80, )})
    return keys


@pytest.mark.skipif(mmdet_configs_root() is None, reason='mmdet 2.28.2 configs not installed')
def test_mmdet_scnet_state_dict_layout_loads_strictly():
    cfg = Config.fromfile(osp.join(mmdet_configs_root(), 'scnet', 'scnet_r50_fpn_1x_coco.py'),
                          import_custom_modules=False)
    cfg.model.backbone.init_cfg = None
    with torch.device('meta'):
        model = build_detector(cfg.model.to_dict())
    state = model.state_dict()
    expected = {**resnet50_fpn_keys(), **RPN_HEAD_KEYS, **_scnet_roi_keys()}
    assert sorted(state) == sorted(expected)
    assert all(tuple(state[k].shape) == shape for k, shape in expected.items())
