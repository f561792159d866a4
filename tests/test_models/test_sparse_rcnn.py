"""Sparse R-CNN and QueryInst end to end on tiny models: mmdet's loss keys, gradients to every
part (the learned proposals included), the result formats, every checkpoint mode on the RoI
units exact (dropout included), ``with_cp``, and what they refuse."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.core.mask import BitmapMasks
from ckptzoo.models import QueryInst, SparseRCNN
from ckptzoo.registry import build_detector

from tests.helpers.checkpointing import one_thread, counting_calls
from tests.helpers.detectors import img_meta
from tests.helpers.sparse_rcnn import sparse_batch, sparse_cfg

one_thread = pytest.fixture(autouse=True)(one_thread)


def _model(**kw):
    torch.manual_seed(0)
    return build_detector(sparse_cfg(**kw))


def _step(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    out = model.train_step(copy.deepcopy(batch), None)
    out['loss'].backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out['log_vars'], grads, {n: b.clone() for n, b in model.named_buffers()}


@pytest.mark.parametrize('with_mask', [False, True])
def test_train_step_losses_and_gradients(with_mask):
    model = _model(with_mask=with_mask)
    assert isinstance(model, QueryInst if with_mask else SparseRCNN)
    log_vars, grads, _ = _step(model, sparse_batch(BitmapMasks if with_mask else None))
    names = ['loss_cls', 'pos_acc', 'loss_bbox', 'loss_iou'] + (['loss_mask'] if with_mask
                                                                else [])
    assert list(log_vars) == [f'stage{i}_{n}' for i in range(2) for n in names] + ['loss']
    assert all(np.isfinite(v) for v in log_vars.values())
    assert log_vars['loss'] == pytest.approx(sum(v for k, v in log_vars.items()
                                                 if 'loss' in k and k != 'loss'), rel=1e-6)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == set(grads)
    for name in ('rpn_head.init_proposal_bboxes.weight',
                 'rpn_head.init_proposal_features.weight',
                 'roi_head.bbox_head.1.fc_reg.weight', 'backbone.conv1.weight'):
        assert grads[name].abs().sum() > 0, name
    if with_mask:
        assert grads['roi_head.mask_head.1.conv_logits.weight'].abs().sum() > 0


@pytest.mark.parametrize('with_mask', [False, True])
def test_simple_test_result_format(with_mask):
    model = _model(with_mask=with_mask).eval()
    metas = [img_meta(), img_meta(56, 60)]
    metas[1]['scale_factor'] = np.full(4, 1.25, dtype=np.float32)
    metas[1]['ori_shape'] = (45, 48, 3)
    with torch.no_grad():
        results = model.forward_test(torch.randn(2, 3, 64, 64), metas, rescale=True)
    assert len(results) == 2
    for i, result in enumerate(results):
        if with_mask:
            result, segms = result
            assert len(segms) == 3
            for c in range(3):
                assert len(segms[c]) == len(result[c])
                assert all(m.shape == ((64, 64) if i == 0 else (45, 48)) and m.dtype == bool
                           for m in segms[c])
        assert len(result) == 3 and sum(len(r) for r in result) == 8
        assert all(r.shape[1] == 5 and r.dtype == np.float32 for r in result)


@pytest.mark.filterwarnings('ignore:checkpoint mode .offload.')
@pytest.mark.parametrize('with_mask', [False, True])
@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_mode_on_the_roi_units_equals_plain(monkeypatch, mode, with_mask):
    """Losses, every gradient and the BN buffers of a plain step (dropout 0.1 in the DII
    heads, so the recompute must replay it), with the mode on every RoI unit; each ran it."""
    plain = _model(with_mask=with_mask, dropout=0.1)
    units = [u for u in plain.checkpoint_units() if u.startswith('roi_head.')]
    assert units == [f'roi_head.{k}.{i}' for i in range(2)
                     for k in (('bbox', 'mask') if with_mask else ('bbox', ))]
    state = copy.deepcopy(plain.state_dict())
    batch = sparse_batch(BitmapMasks if with_mask else None)
    ref = _step(plain, batch)
    model = _model(with_mask=with_mask, dropout=0.1)
    model.load_state_dict(state)
    model.set_checkpoint_plan({'roi_head': mode})
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
    assert ran == len(units), calls


def test_with_cp_sets_full_on_every_roi_unit():
    cfg = sparse_cfg(with_mask=True)
    cfg['roi_head']['with_cp'] = True
    torch.manual_seed(0)
    plan = build_detector(cfg).checkpoint_plan()
    assert {k: v for k, v in plan.items() if k.startswith('roi_head.')} == {
        f'roi_head.{k}.{i}': 'full' for i in range(2) for k in ('bbox', 'mask')}


def test_forward_dummy_and_refusals():
    model = _model(with_mask=True)
    outs = model.forward_dummy(torch.randn(1, 3, 64, 64))
    assert len(outs) == 2 and all(len(o) == 2 for o in outs)
    batch = sparse_batch(BitmapMasks)
    with pytest.raises(ValueError, match='external proposals'):
        model.forward_train(**batch, proposals=[torch.zeros(3, 4)] * 2)
    # mmdet's error (its EmbeddingRPNHead's)
    with pytest.raises(NotImplementedError,
                       match='EmbeddingRPNHead does not support test-time augmentation'):
        model.aug_test([batch['img']] * 2, [batch['img_metas']] * 2)
    cfg = sparse_cfg()
    cfg.pop('rpn_head')
    with pytest.raises(ValueError, match='rpn_head'):
        build_detector(cfg)


def test_the_planners_probe_measures_the_roi_units(tmp_path):
    """The memory probe steps a Sparse R-CNN training run (generated VOC data) and prices each
    stage's unit: a 'full' checkpoint keeps less than the plain step."""
    import logging

    from ckptzoo.apis import build_training, set_random_seed
    from ckptzoo.memory.measure.probe import probe, probe_batch, worst_case_shape
    from tests.helpers.configs import SYNTHETIC_CLASSES, tiny_voc_retinanet
    cfg = tiny_voc_retinanet(tmp_path)
    cfg.model = sparse_cfg(num_classes=len(SYNTHETIC_CLASSES))
    cfg.optimizer = dict(type='AdamW', lr=1e-4, weight_decay=1e-4)
    set_random_seed(0)
    run = build_training(cfg, logger=logging.getLogger('test_sparse_rcnn'))
    table = probe(run, probe_batch(run, worst_case_shape(cfg)), modes=(None, 'full'))
    units = {u.name: u for u in table.units}
    for name in ('roi_head.bbox.0', 'roi_head.bbox.1'):
        assert units[name].kept['full'] < units[name].kept[None], name
