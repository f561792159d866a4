"""Cascade (Mask) R-CNN end to end on a tiny model: mmdet's loss keys and stage weights, the
result formats, every checkpoint mode on every unit, mmdet 2.x's cascade_mask_rcnn_r50_fpn
state-dict keys, and its config files."""
import copy
import importlib.util
import os.path as osp

import numpy as np
import pytest
import torch
from mmengine.config import Config

from ckptzoo.core.mask import PolygonMasks
from ckptzoo.models import CascadeRCNN
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread, counting_calls
from tests.helpers.detectors import cascade_cfg, img_meta

one_thread = pytest.fixture(autouse=True)(one_thread)

NUM_CLASSES = 3
ROI_UNITS = ['roi_head.bbox.0', 'roi_head.mask.0', 'roi_head.bbox.1', 'roi_head.mask.1',
             'roi_head.bbox.2', 'roi_head.mask.2']
POLYGONS = [[[np.array([8., 10., 40., 12., 38., 50., 10., 48.])],
             [np.array([30., 4., 60., 6., 58., 30.])]],
            [[np.array([5., 5., 30., 5., 30., 30.]), np.array([40., 36., 52., 40., 44., 52.])]]]


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(cascade_cfg(**kw))


def _batch(with_mask=True):
    g = torch.Generator().manual_seed(0)
    batch = dict(img=torch.randn(2, 3, 64, 64, generator=g),
                 img_metas=[img_meta(), img_meta(56, 60)],
                 gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                            torch.tensor([[5., 5., 52., 52.]])],
                 gt_labels=[torch.tensor([0, 2]), torch.tensor([1])])
    if with_mask:
        batch['gt_masks'] = [PolygonMasks(p, 64, 64) for p in POLYGONS]
    return batch


def _step(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize('with_mask', [True, False])
def test_train_step_losses_per_stage_and_gradients(with_mask):
    model = _model(with_mask=with_mask)
    log_vars, grads, _ = _step(model, _batch(with_mask))
    stage_keys = ['loss_cls', 'acc', 'loss_bbox'] + (['loss_mask'] if with_mask else [])
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox'] + [
        f's{i}.{k}' for i in range(3) for k in stage_keys] + ['loss']
    assert all(np.isfinite(v) for v in log_vars.values())
    # mmdet's _parse_losses: every key with 'loss' in it, the stage losses included
    assert log_vars['loss'] == pytest.approx(sum(v for k, v in log_vars.items()
                                                 if 'loss' in k and k != 'loss'), rel=1e-6)
    for i in range(3):
        assert log_vars[f's{i}.loss_bbox'] > 0 and 0 <= log_vars[f's{i}.acc'] <= 100
    roi = {n for n, _ in model.named_parameters() if n.startswith('roi_head.')}
    assert roi <= set(grads) and all(grads[n].abs().sum() > 0 for n in roi)
    assert any(n.startswith('roi_head.bbox_head.2.') for n in roi)


def test_stage_loss_weights_scale_the_losses_but_not_acc(monkeypatch):
    """The same step with stage weights (1, 0.5, 0.25) and (1, 1, 1): each stage's losses in
    the ratio of its weight, its acc unchanged."""
    batch = _batch()
    weighted = _step(_model(), batch)[0]
    model = _model()
    model.roi_head.stage_loss_weights = [1, 1, 1]
    plain = _step(model, batch)[0]
    for i, w in enumerate((1, 0.5, 0.25)):
        for k in ('loss_cls', 'loss_bbox', 'loss_mask'):
            assert weighted[f's{i}.{k}'] == pytest.approx(w * plain[f's{i}.{k}'], rel=1e-6)
        assert weighted[f's{i}.acc'] == plain[f's{i}.acc']


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(monkeypatch, mode):
    """Losses, every gradient and the BN buffers of a plain step, with the mode on every RoI
    unit, and on the box units of the later stages only; each unit ran the mode."""
    plain = _model()
    units = list(plain.checkpoint_units())
    assert units[-6:] == ROI_UNITS and units[0] == 'backbone.stem'
    state = copy.deepcopy(plain.state_dict())
    batch = _batch()
    ref = _step(plain, batch)
    for key, expected in (('roi_head', 6), ('roi_head.bbox.[12]', 2)):
        model = _model()
        model.load_state_dict(state)
        model.set_checkpoint_plan({key: mode})
        with monkeypatch.context() as patch:
            calls = counting_calls(patch)
            got = _step(model, batch)
        (log_r, grads_r, bufs_r), (log_g, grads_g, bufs_g) = ref, got
        assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
        assert grads_g.keys() == grads_r.keys()
        for name, grad in grads_r.items():
            torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                       msg=lambda m: f'{name}: {m}')
        for name, buf in bufs_r.items():
            torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0)
        ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
        assert ran == (0 if mode is None else expected), calls


def test_with_cp_and_plan_keys_shared_with_the_standard_head():
    cfg = cascade_cfg()
    cfg['roi_head']['with_cp'] = True
    torch.manual_seed(0)
    model = build_detector(cfg)
    plan = model.checkpoint_plan()
    assert all(plan[u] == 'full' for u in ROI_UNITS)
    # 'roi_head.mask' names every stage's mask unit, as it names StandardRoIHead's one
    plan = model.set_checkpoint_plan({'roi_head.mask': None})
    assert [plan[u] for u in ROI_UNITS] == ['full', None] * 3
    assert model.checkpoint_chains() == [c for c in model.checkpoint_chains()
                                         if not c[0].startswith('roi_head')]


def _test_metas():
    metas = [img_meta(), img_meta()]
    metas[1].update(ori_shape=(40, 50, 3), img_shape=(50, 62, 3),
                    scale_factor=np.full(4, 1.25, dtype=np.float32))
    return metas


@pytest.mark.parametrize('with_mask', [True, False])
def test_simple_test_results_in_mmdet_format(with_mask):
    model = _model(with_mask=with_mask, score_thr=0.0, max_per_img=10).eval()
    img = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        rescaled = model(img=[img], img_metas=[_test_metas()], return_loss=False, rescale=True)
        plain = model.simple_test(img, _test_metas(), rescale=False)
    for results, shapes in ((rescaled, [(64, 64), (40, 50)]), (plain, [(64, 64), (50, 62)])):
        assert isinstance(results, list) and len(results) == 2
        for result, shape in zip(results, shapes):
            bbox_results, segm_results = result if with_mask else (result, None)
            assert isinstance(bbox_results, list) and len(bbox_results) == NUM_CLASSES
            assert sum(len(b) for b in bbox_results) == 10
            assert all(b.dtype == np.float32 and b.shape[1] == 5 for b in bbox_results)
            if with_mask:
                assert isinstance(result, tuple) and len(segm_results) == NUM_CLASSES
                for boxes, masks in zip(bbox_results, segm_results):
                    assert len(masks) == len(boxes)
                    assert all(m.dtype == np.bool_ and m.shape == shape for m in masks)
    # rescale divides the boxes by the scale factor
    np.testing.assert_allclose(np.vstack(rescaled[1][0] if with_mask else rescaled[1])[:, :4] *
                               1.25, np.vstack(plain[1][0] if with_mask else plain[1])[:, :4],
                               rtol=1e-5, atol=1e-4)


def test_simple_test_scores_are_the_mean_over_stages_and_boxes_the_last_stages():
    """The detections of the cascade equal the last box head's ``get_bboxes`` of the RoIs
    refined by the first two stages with the mean of the three stages' scores."""
    model = _model(with_mask=False, score_thr=0.0, max_per_img=20).eval()
    head = model.roi_head
    seen = []
    for i in range(3):
        head.bbox_head[i].register_forward_hook(lambda m, a, out, i=i: seen.append((i, out)))
    img = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    metas = [img_meta()]
    with torch.no_grad():
        x = model.extract_feat(img)
        proposals = model.rpn_head.simple_test_rpn(x, metas)
        result = head.simple_test(x, proposals, metas)
        rois = torch.cat([proposals[0].new_zeros(len(proposals[0]), 1), proposals[0][:, :4]], 1)
        for i in range(2):
            cls_score, bbox_pred = seen[i][1]
            rois = head.bbox_head[i].regress_by_class(rois, cls_score[:, :-1].argmax(1),
                                                      bbox_pred, metas[0])
        mean_score = sum(out[0] for _, out in seen) / 3
        dets, labels = head.bbox_head[2].get_bboxes(rois, mean_score, seen[2][1][1],
                                                    metas[0]['img_shape'],
                                                    metas[0]['scale_factor'], cfg=head.test_cfg)
    assert [i for i, _ in seen] == [0, 1, 2]
    expected = [dets[labels == c].numpy() for c in range(NUM_CLASSES)]
    for got, want in zip(result[0], expected):
        np.testing.assert_array_equal(got, want)


def test_simple_test_without_proposals_or_detections():
    model = _model(score_thr=1.1).eval()
    with torch.no_grad():
        (bbox_results, segm_results), = model.simple_test(torch.randn(1, 3, 64, 64),
                                                          [img_meta()], rescale=True)
        x = model.extract_feat(torch.randn(2, 3, 64, 64))
        empty = model.roi_head.simple_test(x, [torch.zeros(0, 5)] * 2, [img_meta()] * 2)
    assert all(b.shape == (0, 5) for b in bbox_results)
    assert segm_results == [[] for _ in range(NUM_CLASSES)]
    assert len(empty) == 2 and all(len(b) == NUM_CLASSES and s == [[]] * NUM_CLASSES
                                   for b, s in empty)


def test_show_result_takes_the_ensemble_of_mmdets_multi_stage_form():
    model = _model(with_mask=False)
    boxes = [np.array([[4., 4., 30., 30., 0.9]], np.float32),
             np.zeros((0, 5), np.float32), np.zeros((0, 5), np.float32)]
    img = np.zeros((64, 64, 3), np.uint8)
    drawn = model.show_result(img, dict(ensemble=boxes))
    np.testing.assert_array_equal(drawn, model.show_result(img, boxes))
    assert drawn.any()


def test_forward_dummy_gives_every_stages_outputs():
    model = _model().eval()
    with torch.no_grad():
        outs = model.forward_dummy(torch.randn(1, 3, 64, 64))
    roi_outs = outs[-1]
    assert len(roi_outs) == 3 * 2 + 3
    assert roi_outs[0].shape == (1000, NUM_CLASSES + 1) and roi_outs[1].shape == (1000, 4)
    assert roi_outs[-1].shape == (100, NUM_CLASSES, 28, 28)


def test_positional_arguments_in_mmdets_order():
    """CascadeRCNN(backbone, neck=None, rpn_head=None, roi_head=None, train_cfg=None, ...)."""
    cfg = cascade_cfg()
    torch.manual_seed(0)
    model = CascadeRCNN(cfg['backbone'], cfg['neck'], cfg['rpn_head'], cfg['roi_head'],
                        cfg['train_cfg'], cfg['test_cfg'])
    assert model.with_neck and model.with_rpn and model.with_mask
    assert model.roi_head.train_cfg[2]['assigner']['pos_iou_thr'] == 0.7


def _cascade_mask_rcnn_r50_fpn_shapes(num_classes=80, with_mask=True):
    """mmdet 2.x cascade_mask_rcnn_r50_fpn's RoI head: key -> shape, from its module
    structure (a ModuleList of Shared2FCBBoxHead, class-agnostic, and of FCNMaskHead)."""
    shapes = {}
    for i in range(3):
        box = f'roi_head.bbox_head.{i}'
        shapes.update({f'{box}.fc_cls.weight': (num_classes + 1, 1024),
                       f'{box}.fc_cls.bias': (num_classes + 1, ),
                       f'{box}.fc_reg.weight': (4, 1024), f'{box}.fc_reg.bias': (4, ),
                       f'{box}.shared_fcs.0.weight': (1024, 256 * 7 * 7),
                       f'{box}.shared_fcs.0.bias': (1024, ),
                       f'{box}.shared_fcs.1.weight': (1024, 1024),
                       f'{box}.shared_fcs.1.bias': (1024, )})
    for i in range(3 if with_mask else 0):
        mask = f'roi_head.mask_head.{i}'
        for j in range(4):
            shapes[f'{mask}.convs.{j}.conv.weight'] = (256, 256, 3, 3)
            shapes[f'{mask}.convs.{j}.conv.bias'] = (256, )
        shapes.update({f'{mask}.upsample.weight': (256, 256, 2, 2),
                       f'{mask}.upsample.bias': (256, ),
                       f'{mask}.conv_logits.weight': (num_classes, 256, 1, 1),
                       f'{mask}.conv_logits.bias': (num_classes, )})
    return shapes


def _mmdet_config(name):
    spec = importlib.util.find_spec('mmdet')  # finds the package folder, imports nothing
    if spec is None:
        pytest.skip('mmdet 2.28.2 (its config files) is not installed')
    return Config.fromfile(osp.join(spec.submodule_search_locations[0], '.mim', 'configs', name))


@pytest.mark.parametrize('name, with_mask', [
    ('cascade_rcnn/cascade_mask_rcnn_r50_fpn_1x_coco.py', True),
    ('cascade_rcnn/cascade_rcnn_r50_fpn_1x_coco.py', False)])
def test_mmdet_checkpoint_layout_loads_strictly(name, with_mask):
    """mmdet's own config file builds the RoI head of mmdet's layout (in its key order), and a
    checkpoint of that layout loads with strict=True, every tensor in place."""
    from tests.helpers.detectors import RPN_HEAD_KEYS, resnet50_fpn_keys
    cfg = _mmdet_config(name)
    cfg.model.backbone.init_cfg = None
    with torch.device('meta'):
        model = build_detector(cfg.model)
    roi = _cascade_mask_rcnn_r50_fpn_shapes(with_mask=with_mask)
    state = model.state_dict()
    assert [k for k in state if k.startswith('roi_head.')] == list(roi)
    shapes = {**resnet50_fpn_keys(), **RPN_HEAD_KEYS, **roi}
    assert {k: tuple(v.shape) for k, v in state.items()} == shapes
    assert type(model.roi_head).__name__ == 'CascadeRoIHead' and model.with_mask == with_mask
    assert [list(h.bbox_coder.stds) for h in model.roi_head.bbox_head] == [
        [0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1], [0.033, 0.033, 0.067, 0.067]]
    assert [a.pos_iou_thr for a in model.roi_head.bbox_assigner] == [0.5, 0.6, 0.7]
    assert list(model.checkpoint_units())[-(6 if with_mask else 3):] == (
        ROI_UNITS if with_mask else ROI_UNITS[::2])
    # the RoI head of a tiny model of that structure loads a checkpoint of those keys
    tiny = build_detector(cascade_cfg(num_classes=80, feat=256, fc=1024, mask_convs=4,
                                      with_mask=with_mask))
    gen = torch.Generator().manual_seed(0)
    ckpt = {k: torch.randn(s, generator=gen) for k, s in roi.items()}
    ckpt.update({k: v for k, v in tiny.state_dict().items() if not k.startswith('roi_head.')})
    tiny.load_state_dict(ckpt, strict=True)
    for k in roi:
        assert torch.equal(tiny.state_dict()[k], ckpt[k]), k
