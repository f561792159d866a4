"""Grid R-CNN end to end on a tiny model: mmdet's loss keys, ``max_num_grid``, every
checkpoint mode on the RoI units (``grid`` after ``bbox``), the refined test boxes, mmdet
2.x's grid-head state-dict keys. The audit against mmdet 2.28.2 (its
``grid_rcnn_r50_fpn_gn-head_1x`` config at tiny sizes, same weights, batch and seed) found
losses and detections equal and gradients within 3e-9; mmdet's test-time clip is a no-op
(``clamp_`` on a copy), ours clips."""
import copy

import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import img_meta
from tests.helpers.grid_rcnn import grid_rcnn_cfg
from tests.helpers.rcnn_variants import masks_batch, train_step

one_thread = pytest.fixture(autouse=True)(one_thread)
ROI_UNITS = ['roi_head.bbox', 'roi_head.grid']


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(grid_rcnn_cfg(**kw))


def test_train_step_has_mmdets_losses_and_every_grid_gradient():
    model = _model()
    log_vars, grads, _ = train_step(model, masks_batch(with_mask=False))
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_grid',
                              'loss']
    assert log_vars['loss_grid'] > 0 and 'loss_bbox' not in log_vars  # with_reg=False
    grid = {n for n, _ in model.named_parameters() if n.startswith('roi_head.grid_head.')}
    assert grid and grid <= set(grads) and all(grads[n].abs().sum() > 0 for n in grid)


def test_max_num_grid_bounds_the_rois_of_the_grid_head():
    model = _model(max_num_grid=3)
    seen = []
    model.roi_head.grid_head.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    train_step(model, masks_batch(with_mask=False))
    assert seen == [3]


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(mode):
    plain = _model()
    assert list(plain.checkpoint_units())[-2:] == ROI_UNITS
    state = copy.deepcopy(plain.state_dict())
    ref = train_step(plain, masks_batch(with_mask=False))
    model = _model()
    model.load_state_dict(state)
    model.set_checkpoint_plan({'roi_head': mode})
    got = train_step(model, masks_batch(with_mask=False))
    assert got[0] == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


def test_with_cp_sets_the_grid_unit_too():
    cfg = grid_rcnn_cfg()
    cfg['roi_head']['with_cp'] = True
    model = build_detector(cfg)
    assert [model.checkpoint_plan()[u] for u in ROI_UNITS] == ['full'] * 2
    assert list(model.roi_head.checkpoint_units()) == ['bbox', 'grid']


def test_simple_test_refines_the_detections_by_the_grid():
    model = _model().eval()
    model.test_cfg['rcnn']['score_thr'] = 0.0
    img = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    metas = [img_meta()]
    with torch.no_grad():
        [bbox_results] = model.simple_test(img, metas, rescale=True)
        x = model.extract_feat(img)
        det_bboxes, det_labels = model.roi_head.simple_test_bboxes(
            x, metas, model.rpn_head.simple_test_rpn(x, metas), model.roi_head.test_cfg)
        rois = torch.cat([det_bboxes[0].new_zeros(len(det_bboxes[0]), 1),
                          det_bboxes[0][:, :4]], 1)
        fused = model.roi_head.grid_head(model.roi_head.grid_roi_extractor(x[:4], rois))['fused']
        refined = model.roi_head.grid_head.get_bboxes(det_bboxes[0], fused, metas)
    assert len(bbox_results) == 3 and sum(len(r) for r in bbox_results) == len(refined) > 0
    for c in range(3):
        torch.testing.assert_close(torch.from_numpy(bbox_results[c]),
                                   refined[det_labels[0] == c])
    assert not torch.equal(refined[:, :4], det_bboxes[0][:, :4])


def test_simple_test_without_detections_gives_empty_arrays():
    model = _model().eval()
    model.test_cfg['rcnn']['score_thr'] = 1.1
    with torch.no_grad():
        [bbox_results] = model.simple_test(torch.randn(1, 3, 64, 64), [img_meta()])
    assert [r.shape for r in bbox_results] == [(0, 5)] * 3


def test_mmdet_grid_head_keys_load_strictly():
    """``roi_head.grid_head.*`` of mmdet's grid_rcnn (GN convs, grouped deconvs, the 24
    first- and second-order transitions of a 3x3 grid)."""
    model = _model()
    shapes = {k[len('roi_head.grid_head.'):]: tuple(v.shape)
              for k, v in model.state_dict().items() if k.startswith('roi_head.grid_head.')}
    expected = {}
    for i in range(2):
        expected.update({f'convs.{i}.conv.weight': (72, 16 if i == 0 else 72, 3, 3),
                         f'convs.{i}.conv.bias': (72, ), f'convs.{i}.gn.weight': (72, ),
                         f'convs.{i}.gn.bias': (72, )})
    expected.update({'deconv1.weight': (72, 8, 4, 4), 'deconv1.bias': (72, ),
                     'norm1.weight': (72, ), 'norm1.bias': (72, ),
                     'deconv2.weight': (72, 1, 4, 4), 'deconv2.bias': (9, )})
    nbrs = model.roi_head.grid_head.neighbor_points
    assert sum(len(n) for n in nbrs) == 24
    for order in ('forder_trans', 'sorder_trans'):
        for i, points in enumerate(nbrs):
            for j in range(len(points)):
                expected.update({f'{order}.{i}.{j}.0.weight': (8, 1, 5, 5),
                                 f'{order}.{i}.{j}.0.bias': (8, ),
                                 f'{order}.{i}.{j}.1.weight': (8, 8, 1, 1),
                                 f'{order}.{i}.{j}.1.bias': (8, )})
    assert shapes == expected
    fresh = _model()
    fresh.load_state_dict(model.state_dict(), strict=True)


def test_arguments_are_checked():
    cfg = grid_rcnn_cfg()
    cfg['roi_head']['grid_head'] = None
    with pytest.raises(ValueError, match='grid_head'):
        build_detector(cfg)
    cfg = grid_rcnn_cfg()
    cfg['train_cfg']['rcnn']['grid_radius'] = 1
    with pytest.raises(Exception, match='grid_radius'):
        build_detector(cfg)


def test_with_a_mask_head_the_grid_unit_comes_between_bbox_and_mask():
    cfg = grid_rcnn_cfg()
    cfg['roi_head'].update(mask_roi_extractor=dict(cfg['roi_head']['grid_roi_extractor']),
                           mask_head=dict(type='FCNMaskHead', num_convs=1, in_channels=16,
                                          conv_out_channels=16, num_classes=3))
    cfg['train_cfg']['rcnn']['mask_size'] = 28
    torch.manual_seed(0)
    model = build_detector(cfg)
    assert list(model.roi_head.checkpoint_units()) == ['bbox', 'grid', 'mask']
    log_vars, _, _ = train_step(model, masks_batch())
    assert {'loss_grid', 'loss_mask'} <= set(log_vars)
