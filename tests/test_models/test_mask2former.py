"""Mask2Former (mmdet 2.x's): a tiny model from an mmdet-schema config trains (finite losses,
every decoder layer's), tests in mmdet's result formats, and every checkpoint mode equals the
plain run (dropout 0.1 replayed, the point sampling unchanged, BN buffers)."""
import copy

import numpy as np
import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import m2f_cfg, metas, panoptic_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _trainable_bn(cfg):
    cfg['backbone'].update(norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False)
    return cfg


def _run(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    losses = model.forward_train(**copy.deepcopy(batch))
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    return ({k: v.detach() for k, v in losses.items()},
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


def test_units_cover_pixel_decoder_encoder_and_decoder_layers():
    model = build_detector(m2f_cfg())
    names = [n for n in model.checkpoint_units() if n.startswith('panoptic_head')]
    assert sorted(names) == sorted([
        'panoptic_head.pixel_decoder.input0', 'panoptic_head.pixel_decoder.input1',
                     'panoptic_head.pixel_decoder.input2', 'panoptic_head.pixel_decoder.level0',
                     'panoptic_head.pixel_decoder.mask_feature',
                     'panoptic_head.pixel_decoder.encoder.layers.0',
                     'panoptic_head.pixel_decoder.encoder.layers.1',
                     'panoptic_head.query_head',
                     'panoptic_head.transformer_decoder.layers.0',
                     'panoptic_head.transformer_decoder.layers.1',
                     'panoptic_head.transformer_decoder.layers.2'])
    head = build_detector(dict(m2f_cfg(), panoptic_head=dict(m2f_cfg()['panoptic_head'],
                                                             with_cp=True))).panoptic_head
    assert set(head.checkpoint_plan().values()) == {'full'}


def test_train_and_test_result_formats():
    model = build_detector(m2f_cfg())
    model.train()
    losses, grads, _ = _run(model, panoptic_batch())
    assert sorted(losses) == sorted(['loss_cls', 'loss_mask', 'loss_dice'] + [
        f'd{i}.loss_{k}' for i in range(3) for k in ('cls', 'mask', 'dice')])
    assert all(torch.isfinite(v) for v in losses.values())
    assert grads['panoptic_head.query_feat.weight'].abs().sum() > 0
    model.eval()
    with torch.no_grad():
        results = model.simple_test(panoptic_batch()['img'], metas(), rescale=True)
    assert len(results) == 2
    for result, meta in zip(results, metas()):
        pan = result['pan_results']
        assert isinstance(pan, np.ndarray) and pan.shape == meta['ori_shape'][:2]
        bbox_results, mask_results = result['ins_results']
        assert len(bbox_results) == 3 and len(mask_results) == 3
        assert all(b.shape[1] == 5 and b.dtype == np.float32 for b in bbox_results)
        assert sum(len(b) for b in bbox_results) == sum(len(m) for m in mask_results)
        assert all(m.shape == meta['ori_shape'][:2] and m.dtype == bool
                   for ms in mask_results for m in ms)
    img = np.zeros(metas()[0]['ori_shape'], np.uint8)
    assert model.show_result(img, results[0]).shape == img.shape


def test_instance_only_results_are_bbox_and_mask_lists():
    model = build_detector(m2f_cfg(stuff=0, instance=True))
    model.train()
    losses, _, _ = _run(model, panoptic_batch(panoptic=False))
    assert all(torch.isfinite(v) for v in losses.values())
    model.eval()
    with torch.no_grad():
        results = model.simple_test(panoptic_batch()['img'], metas())
    bbox_results, mask_results = results[0]
    assert len(bbox_results) == 3 and len(mask_results) == 3
    img = np.zeros((64, 64, 3), np.uint8)
    assert model.show_result(img, results[0], score_thr=0.).shape == img.shape


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    torch.manual_seed(0)
    model = build_detector(_trainable_bn(m2f_cfg(drop=0.1)))
    model.train()
    batch = panoptic_batch()
    state = copy.deepcopy(model.state_dict())  # BN buffers move in each run
    ref = _run(model, batch)
    model.load_state_dict(state)
    model.set_checkpoint_plan({'*': mode})
    got = _run(model, batch)
    for a, b in zip(ref, got):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=lambda m: f'{k}: {m}')
    assert ref[0]['loss_cls'] != 0


def test_bad_configs_fail_clearly():
    cfg = m2f_cfg()
    cfg['panoptic_head']['num_transformer_feat_level'] = 2
    with pytest.raises(ValueError, match='num_transformer_feat_level'):
        build_detector(cfg)
    cfg = m2f_cfg()
    cfg['panoptic_head']['pixel_decoder']['strides'] = [8, 16, 32]
    with pytest.raises(ValueError, match='strides'):
        build_detector(cfg)
    with pytest.raises(ValueError, match='panoptic_head'):
        build_detector(dict(m2f_cfg(), panoptic_head=None))
    model = build_detector(m2f_cfg())
    batch = panoptic_batch()
    batch['gt_bboxes_ignore'] = [torch.zeros(0, 4)] * 2
    with pytest.raises(NotImplementedError, match='gt_bboxes_ignore'):
        model.forward_train(**batch)


def test_decoder_and_encoder_segments_are_exact():
    """Segments over the decoder layers (each with its prediction) and the encoder layers:
    one checkpoint per span, the same losses and gradients as the plain run."""
    torch.manual_seed(0)
    model = build_detector(m2f_cfg(drop=0.1))
    model.train()
    batch = panoptic_batch()
    ref = _run(model, batch)
    chains = model.checkpoint_chains()
    assert ['panoptic_head.transformer_decoder.layers.0', 'panoptic_head.transformer_decoder.'
            'layers.1', 'panoptic_head.transformer_decoder.layers.2'] in chains
    model.set_checkpoint_segments([
        ['panoptic_head.transformer_decoder.layers.0',
         'panoptic_head.transformer_decoder.layers.2'],
        ['panoptic_head.pixel_decoder.encoder.layers.0',
         'panoptic_head.pixel_decoder.encoder.layers.1']])
    got = _run(model, batch)
    for a, b in zip(ref[:2], got[:2]):
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=lambda m: f'{k}: {m}')
