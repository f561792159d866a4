"""Mask Scoring R-CNN end to end on a tiny model: mmdet's loss keys, the result format with
mask scores, every checkpoint mode on every RoI unit (``mask_iou`` included), mmdet 2.x's
ms_rcnn state-dict keys. The audit against mmdet 2.28.2 (same weights, batch and seed) found
losses, gradients, BN buffers, detections, masks and mask scores equal."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.detectors import img_meta
from tests.helpers.rcnn_variants import masks_batch, ms_rcnn_cfg, train_step

one_thread = pytest.fixture(autouse=True)(one_thread)
ROI_UNITS = ['roi_head.bbox', 'roi_head.mask', 'roi_head.mask_iou']


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(ms_rcnn_cfg(**kw))


def test_train_step_has_mmdets_losses_and_every_roi_gradient():
    model = _model()
    log_vars, grads, _ = train_step(model, masks_batch())
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox',
                              'loss_mask', 'loss_mask_iou', 'loss']
    assert log_vars['loss_mask_iou'] > 0
    iou = {n for n, _ in model.named_parameters() if n.startswith('roi_head.mask_iou_head.')}
    assert iou and iou <= set(grads) and all(grads[n].abs().sum() > 0 for n in iou)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(mode):
    plain = _model()
    assert list(plain.checkpoint_units())[-3:] == ROI_UNITS
    state = copy.deepcopy(plain.state_dict())
    ref = train_step(plain, masks_batch())
    model = _model()
    model.load_state_dict(state)
    model.set_checkpoint_plan({'roi_head': mode})
    got = train_step(model, masks_batch())
    assert got[0] == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


def test_with_cp_sets_the_mask_iou_unit_too():
    cfg = ms_rcnn_cfg()
    cfg['roi_head']['with_cp'] = True
    model = build_detector(cfg)
    assert [model.checkpoint_plan()[u] for u in ROI_UNITS] == ['full'] * 3


def test_simple_test_scores_each_mask_by_box_score_times_predicted_iou():
    model = _model().eval()
    model.test_cfg['rcnn']['score_thr'] = 0.0
    img = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    metas = [img_meta()]
    with torch.no_grad():
        [(bbox_results, (segms, scores))] = model.simple_test(img, metas, rescale=True)
        x = model.extract_feat(img)
        det_bboxes, det_labels = model.roi_head.simple_test_bboxes(
            x, metas, model.rpn_head.simple_test_rpn(x, metas), model.roi_head.test_cfg)
        mask = model.roi_head._mask_forward(x, torch.cat([det_bboxes[0].new_zeros(
            len(det_bboxes[0]), 1), det_bboxes[0][:, :4]], 1))
        labels = det_labels[0]
        iou = model.roi_head.mask_iou_head(mask['mask_feats'],
                                           mask['mask_pred'][range(len(labels)), labels])
    assert len(scores) == len(segms) == len(bbox_results) == 3
    expected = (iou[range(len(labels)), labels] * det_bboxes[0][:, 4]).numpy()
    for c in range(3):
        assert len(scores[c]) == len(segms[c]) == len(bbox_results[c])
        np.testing.assert_allclose(scores[c], expected[labels.numpy() == c], rtol=1e-6)


def test_simple_test_without_detections_gives_empty_masks_and_scores():
    model = _model().eval()
    model.test_cfg['rcnn']['score_thr'] = 1.1
    img = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        [(bbox_results, (segms, scores))] = model.simple_test(img, [img_meta()])
    assert segms == [[], [], []] and scores == [[], [], []]


def test_mmdet_ms_rcnn_head_keys_load_strictly():
    """``roi_head.mask_iou_head.*`` of mmdet's ms_rcnn (num_convs=4, num_fcs=2, 14x14)."""
    cfg = ms_rcnn_cfg()
    cfg['roi_head']['mask_iou_head'] = dict(type='MaskIoUHead', num_convs=4, num_fcs=2,
                                            roi_feat_size=14, in_channels=16,
                                            conv_out_channels=16, fc_out_channels=32,
                                            num_classes=3)
    model = build_detector(cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()
              if k.startswith('roi_head.mask_iou_head.')}
    expected = {f'roi_head.mask_iou_head.convs.{i}.weight': (16, 17 if i == 0 else 16, 3, 3)
                for i in range(4)}
    expected.update({f'roi_head.mask_iou_head.convs.{i}.bias': (16, ) for i in range(4)})
    expected.update({'roi_head.mask_iou_head.fcs.0.weight': (32, 16 * 7 * 7),
                     'roi_head.mask_iou_head.fcs.0.bias': (32, ),
                     'roi_head.mask_iou_head.fcs.1.weight': (32, 32),
                     'roi_head.mask_iou_head.fcs.1.bias': (32, ),
                     'roi_head.mask_iou_head.fc_mask_iou.weight': (3, 32),
                     'roi_head.mask_iou_head.fc_mask_iou.bias': (3, )})
    assert shapes == expected


def test_arguments_are_checked():
    cfg = ms_rcnn_cfg()
    cfg['roi_head']['mask_iou_head'] = None
    with pytest.raises(ValueError, match='mask_iou_head'):
        build_detector(cfg)
    cfg = ms_rcnn_cfg()
    del cfg['roi_head']['mask_head']
    with pytest.raises(ValueError, match='mask_head'):
        build_detector(cfg)
