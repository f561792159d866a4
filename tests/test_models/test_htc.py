"""Hybrid Task Cascade end to end on a tiny model: mmdet's loss keys, every checkpoint mode
on every RoI unit (semantic, per stage box and mask) exact, the result format, and mmdet
2.x's htc_r50_fpn_1x_coco state-dict layout loading strictly."""
import copy
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.core.mask import PolygonMasks
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import (RPN_HEAD_KEYS, htc_cfg, img_meta, load_strictly,
                                     resnet50_fpn_keys)

one_thread = pytest.fixture(autouse=True)(one_thread)

ROI_UNITS = ['roi_head.semantic'] + [f'roi_head.{b}.{i}' for i in range(3)
                                     for b in ('bbox', 'mask')]
POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(htc_cfg(**kw))


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


@pytest.mark.parametrize('with_semantic', [True, False])
def test_train_step_losses_and_gradients(with_semantic):
    model = _model(with_semantic=with_semantic)
    assert model.with_semantic == with_semantic
    log_vars, grads, _ = _step(model, _batch(with_semantic))
    stage = ['loss_cls', 'acc', 'loss_bbox', 'loss_mask']
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox'] + (
        ['loss_semantic_seg'] if with_semantic else []) + [
        f's{i}.{k}' for i in range(3) for k in stage] + ['loss']
    assert all(np.isfinite(v) for v in log_vars.values())
    roi = {n for n, _ in model.named_parameters() if n.startswith('roi_head.')}
    assert roi <= set(grads) and all(grads[n].abs().sum() > 0 for n in roi)
    assert ('roi_head.semantic_head.conv_logits.weight' in roi) == with_semantic


def test_a_semantic_head_needs_the_semantic_map():
    batch = _batch(with_semantic=False)
    with pytest.raises(ValueError, match='gt_semantic_seg'):
        _model().train_step(batch, None)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(mode):
    """Losses, every gradient and the BN buffers (the semantic head has BN here) of a plain
    step, with the mode on every RoI unit and on the later stages' mask units only."""
    cfg = htc_cfg()
    cfg['roi_head']['semantic_head']['norm_cfg'] = dict(type='BN')
    torch.manual_seed(0)
    plain = build_detector(cfg)
    assert list(plain.checkpoint_units())[-7:] == ROI_UNITS
    state = copy.deepcopy(plain.state_dict())
    batch = _batch()
    ref = _step(plain, batch)
    for key in ('roi_head', 'roi_head.mask.[12]'):
        model = build_detector(cfg)
        model.load_state_dict(state)
        model.set_checkpoint_plan({key: mode})
        got = _step(model, batch)
        (log_r, grads_r, bufs_r), (log_g, grads_g, bufs_g) = ref, got
        assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
        assert grads_g.keys() == grads_r.keys()
        for name, grad in grads_r.items():
            torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                       msg=lambda m: f'{name}: {m}')
        for name, buf in bufs_r.items():
            torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0)


@pytest.mark.parametrize('kw', [{}, dict(mask_info_flow=False), dict(with_mask=False)])
def test_simple_test_results_in_mmdet_format(kw):
    model = _model(score_thr=0.0, max_per_img=10, **kw).eval()
    img = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    metas = [img_meta(), img_meta()]
    metas[1].update(ori_shape=(40, 50, 3), img_shape=(50, 62, 3),
                    scale_factor=np.full(4, 1.25, dtype=np.float32))
    with torch.no_grad():
        results = model(img=[img], img_metas=[metas], return_loss=False, rescale=True)
    with_mask = kw.get('with_mask', True)
    for result, shape in zip(results, [(64, 64), (40, 50)]):
        bboxes, segms = result if with_mask else (result, None)
        assert len(bboxes) == 3 and sum(len(b) for b in bboxes) == 10
        if with_mask:
            assert isinstance(result, tuple)
            for boxes, masks in zip(bboxes, segms):
                assert len(masks) == len(boxes)
                assert all(m.dtype == np.bool_ and m.shape == shape for m in masks)


def _htc_roi_keys():
    """``{key: shape}`` of mmdet 2.x's HybridTaskCascadeRoIHead in htc_r50_fpn_1x_coco.py,
    written from mmdet's module structure."""
    keys = {}

    def conv(name, cout, cin, k):
        keys.update({f'{name}.weight': (cout, cin, k, k), f'{name}.bias': (cout, )})
    for s in range(3):
        p = f'roi_head.bbox_head.{s}'
        keys.update({f'{p}.shared_fcs.0.weight': (1024, 256 * 49),
                     f'{p}.shared_fcs.0.bias': (1024, ), f'{p}.shared_fcs.1.weight': (1024, 1024),
                     f'{p}.shared_fcs.1.bias': (1024, ), f'{p}.fc_cls.weight': (81, 1024),
                     f'{p}.fc_cls.bias': (81, ), f'{p}.fc_reg.weight': (4, 1024),
                     f'{p}.fc_reg.bias': (4, )})
        p = f'roi_head.mask_head.{s}'
        for i in range(4):
            conv(f'{p}.convs.{i}.conv', 256, 256, 3)
        keys.update({f'{p}.upsample.weight': (256, 256, 2, 2), f'{p}.upsample.bias': (256, )})
        conv(f'{p}.conv_logits', 80, 256, 1)
        if s:
            conv(f'{p}.conv_res.conv', 256, 256, 1)
    p = 'roi_head.semantic_head'
    for i in range(5):
        conv(f'{p}.lateral_convs.{i}.conv', 256, 256, 1)
    for i in range(4):
        conv(f'{p}.convs.{i}.conv', 256, 256, 3)
    conv(f'{p}.conv_embedding.conv', 256, 256, 1)
    conv(f'{p}.conv_logits', 183, 256, 1)
    return keys


def test_mmdet_htc_state_dict_layout_loads_strictly(monkeypatch):
    config = osp.join(osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__)))),
                      'configs', 'coco', 'htc_r50_fpn_1x_coco.py')
    cfg = Config.fromfile(config)
    cfg.model.backbone.init_cfg = None
    for fn in ('kaiming_uniform_', 'uniform_', 'kaiming_normal_', 'normal_'):
        monkeypatch.setattr(torch.nn.init, fn, lambda tensor, *args, **kwargs: tensor)
    model = build_detector(cfg.model.to_dict())
    load_strictly(model, {**resnet50_fpn_keys(), **RPN_HEAD_KEYS, **_htc_roi_keys()})
