"""Panoptic FPN end to end on a tiny model (mmdet's panoptic_fpn_r50_fpn_1x_coco schema): the
losses of a training step (``loss_seg`` included), every parameter learning, mmdet 2.28.2's
result format ``[dict(pan_results=(H, W) int32)]``, every checkpoint mode on every unit, the
chunked test-time masks and labels equal to the unchunked ones, mmdet's R50 state-dict keys."""
import copy
import warnings

import numpy as np
import pytest
import torch

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.evaluation.panoptic_utils import INSTANCE_OFFSET
from ckptzoo.models import PanopticFPN, TwoStagePanopticSegmentor
from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread, counting_calls
from tests.helpers.detectors import img_meta
from tests.helpers.panoptic import NUM_STUFF, NUM_THINGS, panoptic_batch, panoptic_fpn_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)

UNITS = (['backbone.stem'] + [f'backbone.layer{i}.{j}' for i in range(1, 5) for j in range(2)]
         + [f'neck.level{i}' for i in (3, 2, 1, 0)] + [f'rpn_head.level{i}' for i in range(5)]
         + ['roi_head.bbox', 'roi_head.mask'] + [f'semantic_head.level{i}' for i in range(4)])


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(panoptic_fpn_cfg(**kw))


def _step(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


def test_train_step_losses_and_gradients():
    model = _model()
    assert isinstance(model, PanopticFPN) and isinstance(model, TwoStagePanopticSegmentor)
    assert model.with_semantic_head and model.with_panoptic_fusion_head
    assert (model.num_things_classes, model.num_stuff_classes, model.num_classes) == \
        (NUM_THINGS, NUM_STUFF, NUM_THINGS + NUM_STUFF)
    log_vars, grads, _ = _step(model, panoptic_batch(BitmapMasks))
    assert list(log_vars) == ['loss_rpn_cls', 'loss_rpn_bbox', 'loss_cls', 'acc', 'loss_bbox',
                              'loss_mask', 'loss_seg', 'loss']
    assert all(np.isfinite(v) for v in log_vars.values()) and log_vars['loss_seg'] > 0
    assert set(grads) == {n for n, _ in model.named_parameters()}
    assert all(g.abs().sum() > 0 for g in grads.values())


def _test_inputs(n=2):
    g = torch.Generator().manual_seed(1)
    metas = [img_meta(), img_meta(56, 60, scale=1.25)][:n]
    if n > 1:
        metas[1]['ori_shape'] = (45, 48, 3)
    return torch.randn(n, 3, 64, 64, generator=g), metas


@pytest.mark.parametrize('rescale', [True, False])
def test_simple_test_gives_mmdets_panoptic_results(rescale):
    model = _model().eval()
    img, metas = _test_inputs()
    with torch.no_grad():
        results = model.forward_test(img, copy.deepcopy(metas), rescale=rescale)
    assert len(results) == 2
    shapes = [(64, 64), (45, 48)] if rescale else [(64, 64), (64, 64)]
    for result, shape in zip(results, shapes):
        assert list(result) == ['pan_results']
        pan = result['pan_results']
        assert isinstance(pan, np.ndarray) and pan.dtype == np.int32 and pan.shape == shape
        labels = pan % INSTANCE_OFFSET
        assert labels.min() >= 0 and labels.max() <= NUM_THINGS + NUM_STUFF
        things = pan >= INSTANCE_OFFSET
        assert (labels[things] < NUM_THINGS).all() and (labels[~things] >= NUM_THINGS).all()
        assert things.any()  # score_thr 0: instances are laid


def test_chunked_masks_and_labels_equal_the_unchunked(monkeypatch):
    """Limits small enough to paste one mask and upsample one channel at a time give the same
    panoptic maps."""
    from ckptzoo.models.detectors import panoptic_two_stage_segmentor as mod
    model = _model().eval()
    img, metas = _test_inputs()
    with torch.no_grad():
        ref = model.simple_test(img, copy.deepcopy(metas), rescale=True)
        monkeypatch.setattr(mod, 'GPU_MEM_LIMIT', 1)
        model.semantic_head.upsample_mem_limit = 1
        got = model.simple_test(img, copy.deepcopy(metas), rescale=True)
    for a, b in zip(ref, got):
        assert np.array_equal(a['pan_results'], b['pan_results'])


def test_no_detection_gives_a_stuff_map():
    model = _model(score_thr=1.1).eval()
    img, metas = _test_inputs(1)
    with torch.no_grad():
        pan = model.simple_test(img, metas, rescale=True)[0]['pan_results']
    assert pan.shape == (64, 64) and (pan < INSTANCE_OFFSET).all() and (pan >= NUM_THINGS).all()


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('mode', [None, 'full', 'selective', 'offload'])
def test_every_mode_on_every_unit_equals_plain(monkeypatch, mode):
    """Losses, every gradient and the BN buffers equal the plain step with the mode on every
    unit at once, and on the semantic head's units alone; each unit really ran the mode."""
    plain = _model()
    assert list(plain.checkpoint_units()) == UNITS
    state = copy.deepcopy(plain.state_dict())
    batch = panoptic_batch(BitmapMasks)
    log_r, grads_r, bufs_r = _step(plain, batch)
    for units, count in (('*', len(UNITS)), ('semantic_head', 4)):
        model = _model()
        model.load_state_dict(state)
        model.set_checkpoint_plan({units: mode})
        with monkeypatch.context() as patch:
            calls = counting_calls(patch)
            log_g, grads_g, bufs_g = _step(model, batch)
        assert log_g == pytest.approx(log_r, rel=1e-6, abs=1e-7)
        assert grads_g.keys() == grads_r.keys()
        for name, grad in grads_r.items():
            torch.testing.assert_close(grads_g[name], grad, rtol=0, atol=1e-6,
                                       msg=lambda m: f'{name}: {m}')
        for name, buf in bufs_r.items():
            torch.testing.assert_close(bufs_g[name], buf, rtol=0, atol=0)
        ran = calls['offload'] if mode == 'offload' else calls['checkpoint']
        assert ran == (0 if mode is None else count), calls


def test_with_cp_of_the_semantic_head():
    model = _model(with_cp=True)
    plan = model.checkpoint_plan()
    assert [plan[f'semantic_head.level{i}'] for i in range(4)] == ['full'] * 4
    assert plan['roi_head.mask'] is None


def test_mmdet_r50_config_keys():
    """mmdet 2.28.2's panoptic_fpn_r50_fpn_1x_coco model has 383 state-dict keys: Mask R-CNN's
    360 and the semantic head's 23."""
    from mmengine.config import Config
    import os.path as osp

    from tests.helpers.mmdet_config_count import mmdet_configs_root
    root = mmdet_configs_root()
    if root is None:
        pytest.skip('mmdet 2.28.2 (its configs) not installed')
    cfg = Config.fromfile(osp.join(root, 'panoptic_fpn/panoptic_fpn_r50_fpn_1x_coco.py'),
                          import_custom_modules=False)
    with warnings.catch_warnings(), torch.device('meta'):
        warnings.simplefilter('ignore')
        model = build_detector(cfg.model)
    keys = list(model.state_dict())
    assert len(keys) == 383
    assert sum(k.startswith('semantic_head.') for k in keys) == 23
    assert model.panoptic_fusion_head.test_cfg['stuff_area_limit'] == 4096


def test_errors_name_what_is_missing():
    cfg = panoptic_fpn_cfg()
    cfg.pop('semantic_head')
    model = build_detector(cfg)
    with pytest.raises(ValueError, match='semantic_head'):
        model.forward_train(**panoptic_batch(BitmapMasks))
    model = _model().eval()
    with pytest.raises(NotImplementedError, match='test-time augmentation'):
        model.aug_test([torch.zeros(1, 3, 64, 64)] * 2, [[img_meta()]] * 2)
    with pytest.raises(NotImplementedError):
        model.forward_dummy(torch.zeros(1, 3, 64, 64))
    cfg = panoptic_fpn_cfg()
    cfg['test_cfg']['panoptic'].pop('stuff_area_limit')
    model = build_detector(cfg).eval()
    img, metas = _test_inputs(1)
    with pytest.raises(ValueError, match='stuff_area_limit'), torch.no_grad():
        model.simple_test(img, metas)
    cfg = panoptic_fpn_cfg()
    for key in ('mask_roi_extractor', 'mask_head'):
        cfg['roi_head'].pop(key)
    with pytest.raises(ValueError, match='mask_head'), torch.no_grad():
        build_detector(cfg).eval().simple_test(img, metas)
    cfg = panoptic_fpn_cfg()
    cfg['test_cfg']['bogus'] = 1
    with pytest.raises(Exception, match='bogus'):
        build_detector(cfg)


def test_show_result_draws_the_segments():
    model = _model().eval()
    img, metas = _test_inputs(1)
    with torch.no_grad():
        result = model.simple_test(img, metas, rescale=True)[0]
    model.CLASSES = ('a', 'b', 'c', 's1', 's2')
    drawn = model.show_result(np.zeros((64, 64, 3), np.uint8), result)
    assert drawn.shape == (64, 64, 3) and drawn.any()


def test_fp16_train_step_runs_the_semantic_head_in_half_and_its_loss_in_float():
    """The fp16 configs (panoptic_fpn_r2_50_fpn_fp16_1x_coco): the semantic head's convs under
    autocast, its loss in float32 (mmdet's force_fp32)."""
    from ckptzoo.runner.fp16 import wrap_fp16_model
    model = wrap_fp16_model(_model())
    assert model.semantic_head.fp16_enabled
    dtypes = []
    model.semantic_head.conv_logits.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
    log_vars, grads, _ = _step(model, panoptic_batch(BitmapMasks))
    assert dtypes == [torch.float16]
    assert np.isfinite(log_vars['loss_seg']) and log_vars['loss_seg'] > 0
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_a_few_steps_fit_the_batch():
    """Adam on one batch: the total and the semantic losses fall; the test map of a training
    image then has instances of the labelled classes and the lower stuff band."""
    from tests.helpers.panoptic import LABELS, gt_semantic_seg
    model = _model()
    batch = panoptic_batch(BitmapMasks)
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    logs = []
    for _ in range(30):
        out = model.train_step(copy.deepcopy(batch), opt)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        logs.append(out['log_vars'])
    assert logs[-1]['loss'] < 0.4 * logs[0]['loss']
    assert logs[-1]['loss_seg'] < 0.6 * logs[0]['loss_seg']
    model.eval()
    with torch.no_grad():
        pan = model.simple_test(batch['img'][:1], [img_meta()], rescale=True)[0]['pan_results']
    things = pan >= INSTANCE_OFFSET
    assert set(np.unique(pan[things] % INSTANCE_OFFSET)) <= set(LABELS[0]) and things.any()
    lower_stuff = (gt_semantic_seg()[0, 0] == NUM_THINGS + 1).numpy() & ~things
    assert (pan[lower_stuff] == NUM_THINGS + 1).mean() > 0.9


def test_given_proposals_some_empty():
    """An image without proposals gets a stuff-only map, its neighbour its instances."""
    model = _model().eval()
    img, metas = _test_inputs()
    with torch.no_grad():
        results = model.forward_test(img, copy.deepcopy(metas), rescale=True,
                                     proposals=[torch.zeros(0, 4),
                                                torch.tensor([[4., 4., 30., 30.]])])
    assert [r['pan_results'].shape for r in results] == [(64, 64), (45, 48)]
    assert (results[0]['pan_results'] < INSTANCE_OFFSET).all()
