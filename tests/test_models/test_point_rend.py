"""PointRend end to end on a tiny model: mmdet's loss keys (``loss_point``), refined masks at
test, every checkpoint mode on every RoI unit (``point`` included) exact, the random point
draws unchanged by recompute, mmdet 2.x's state-dict keys. The audit against mmdet 2.28.2
(same weights, batch and seed) found losses, every gradient, BN buffers, the generator's state
after the step, detections and masks (rescaled or not) bitwise equal."""
import copy

import pytest
import torch

from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread
from tests.helpers.point_rend import point_rend_cfg
from tests.helpers.rcnn_variants import masks_batch, train_step

one_thread = pytest.fixture(autouse=True)(one_thread)
ROI_UNITS = ['roi_head.bbox', 'roi_head.mask', 'roi_head.point']


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(point_rend_cfg(**kw))


def test_train_step_has_mmdets_losses_and_every_roi_gradient():
    model = _model()
    log_vars, grads, _ = train_step(model, masks_batch())
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox',
                              'loss_mask', 'loss_point', 'loss']
    assert log_vars['loss_point'] > 0
    roi = {n for n, _ in model.named_parameters()
           if n.startswith(('roi_head.point_head.', 'roi_head.mask_head.'))}
    assert roi and roi <= set(grads) and all(grads[n].abs().sum() > 0 for n in roi)


def test_state_dict_has_mmdets_keys():
    keys = [k for k in _model().state_dict() if k.startswith('roi_head.')]
    assert [k for k in keys if 'mask_head' in k or 'point_head' in k] == [
        'roi_head.mask_head.downsample_conv.conv.weight',
        'roi_head.mask_head.downsample_conv.conv.bias',
        'roi_head.mask_head.fcs.0.weight', 'roi_head.mask_head.fcs.0.bias',
        'roi_head.mask_head.fcs.1.weight', 'roi_head.mask_head.fcs.1.bias',
        'roi_head.mask_head.fc_logits.weight', 'roi_head.mask_head.fc_logits.bias'] + [
        f'roi_head.point_head.{n}' for n in (
            'fcs.0.conv.weight', 'fcs.0.conv.bias', 'fcs.1.conv.weight', 'fcs.1.conv.bias',
            'fcs.2.conv.weight', 'fcs.2.conv.bias', 'fc_logits.weight', 'fc_logits.bias')]


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(mode):
    plain = _model()
    assert list(plain.checkpoint_units())[-3:] == ROI_UNITS
    state = copy.deepcopy(plain.state_dict())
    ref = train_step(plain, masks_batch())
    after_ref = torch.rand(4)
    model = _model()
    model.load_state_dict(state)
    model.set_checkpoint_plan({'roi_head': mode})
    got = train_step(model, masks_batch())
    # the point draws and everything after them: the generator went the same way
    torch.testing.assert_close(torch.rand(4), after_ref, rtol=0, atol=0)
    assert got[0] == pytest.approx(ref[0], rel=1e-6, abs=1e-7)
    assert got[1].keys() == ref[1].keys()
    for name, grad in ref[1].items():
        torch.testing.assert_close(got[1][name], grad, rtol=0, atol=1e-6)
    for name, buf in ref[2].items():
        torch.testing.assert_close(got[2][name], buf, rtol=0, atol=0)


def test_with_cp_sets_the_point_unit_too():
    cfg = point_rend_cfg()
    cfg['roi_head']['with_cp'] = True
    model = build_detector(cfg)
    assert [model.checkpoint_plan()[u] for u in ROI_UNITS] == ['full'] * 3


def test_simple_test_refines_the_coarse_masks():
    model = _model(subdivision_steps=2, subdivision_num_points=20).eval()
    batch = masks_batch()
    calls = []
    point_head = model.roi_head.point_head
    point_head.register_forward_hook(lambda m, i, o: calls.append(o.shape))
    with torch.no_grad():
        results = model.simple_test(batch['img'], batch['img_metas'], rescale=True)
    assert len(results) == 2 and all(len(r) == 2 for r in results)
    bboxes, segms = results[1]
    assert [len(s) for s in segms] == [len(b) for b in bboxes]
    assert all(m.shape == (56, 60) and m.dtype == bool for s in segms for m in s)
    assert len(calls) == 4 and all(s[2] == 20 for s in calls)  # 2 steps x 2 images
    rois = torch.tensor([[0., 4., 4., 40., 40.]])
    refined = model.roi_head._mask_point_forward_test(
        [f[:1] for f in model.extract_feat(batch['img'])], rois, torch.tensor([1]),
        torch.randn(1, 3, 7, 7))
    assert refined.shape == (1, 3, 28, 28)


def test_point_rend_needs_a_mask_head():
    cfg = point_rend_cfg()
    del cfg['roi_head']['mask_head']
    with pytest.raises(ValueError, match='mask_head'):
        build_detector(cfg)
