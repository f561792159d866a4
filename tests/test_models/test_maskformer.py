"""MaskFormer (mmdet 2.x's): a tiny model from an mmdet-schema config trains, tests in
mmdet's result formats, and every checkpoint mode equals the plain run (dropout replayed)."""
import copy

import pytest
import torch

from ckptzoo.registry import build_detector
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import metas, mf_cfg, panoptic_batch

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _run(model, batch, seed=7):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    losses = model.forward_train(**copy.deepcopy(batch))
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    return ({k: v.detach() for k, v in losses.items()},
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
            {n: b.clone() for n, b in model.named_buffers()})


def test_units_and_keys():
    model = build_detector(mf_cfg())
    names = [n for n in model.checkpoint_units() if n.startswith('panoptic_head')]
    assert sorted(names) == sorted([
        'panoptic_head.pixel_decoder.last_feat', 'panoptic_head.pixel_decoder.level2',
                     'panoptic_head.pixel_decoder.level1', 'panoptic_head.pixel_decoder.level0',
                     'panoptic_head.pixel_decoder.mask_feature',
                     'panoptic_head.pixel_decoder.encoder.layers.0',
                     'panoptic_head.pixel_decoder.encoder.layers.1',
                     'panoptic_head.transformer_decoder.layers.0',
                     'panoptic_head.transformer_decoder.layers.1',
                     'panoptic_head.transformer_decoder.layers.2'])
    keys = model.state_dict()
    for key in ('panoptic_head.pixel_decoder.encoder_in_proj.weight',
                'panoptic_head.pixel_decoder.encoder_out_proj.gn.weight',
                'panoptic_head.pixel_decoder.lateral_convs.0.conv.weight',
                'panoptic_head.transformer_decoder.post_norm.weight',
                'panoptic_head.query_embed.weight', 'panoptic_head.mask_embed.4.weight',
                'panoptic_head.cls_embed.weight'):
        assert key in keys, key
    assert 'panoptic_head.pixel_decoder.last_feat_conv.conv.weight' not in keys
    assert keys['panoptic_head.cls_embed.weight'].shape == (6, 64)


def test_train_and_test_result_formats():
    model = build_detector(mf_cfg(drop=0.1))
    model.train()
    losses, grads, _ = _run(model, panoptic_batch())
    assert sorted(losses) == sorted(['loss_cls', 'loss_mask', 'loss_dice'] + [
        f'd{i}.loss_{k}' for i in range(2) for k in ('cls', 'mask', 'dice')])
    assert all(torch.isfinite(v) for v in losses.values())
    model.eval()
    with torch.no_grad():
        results = model.simple_test(panoptic_batch()['img'], metas())
        cls, masks = model.panoptic_head.simple_test(
            model.extract_feat(panoptic_batch()['img']), metas())
    assert cls.shape == (2, 10, 6) and masks.shape == (2, 10, 64, 64)
    for result, meta in zip(results, metas()):
        assert result['pan_results'].shape == meta['img_shape'][:2]
        bbox_results, mask_results = result['ins_results']
        assert len(bbox_results) == 3 and all(b.shape[1] == 5 for b in bbox_results)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    torch.manual_seed(0)
    cfg = mf_cfg(drop=0.1)
    cfg['backbone'].update(norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False)
    model = build_detector(cfg)
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


def test_pixel_decoder_input_projection():
    """mmdet's rule: a PixelDecoder whose last input width differs from the decoder's
    embed_dims (or enforce_decoder_input_project) gets a 1x1 ``decoder_input_proj``."""
    cfg = mf_cfg()
    head = cfg['panoptic_head']
    head['pixel_decoder'] = dict(type='PixelDecoder', norm_cfg=dict(type='GN', num_groups=32),
                                 act_cfg=dict(type='ReLU'))
    model = build_detector(cfg)
    assert isinstance(model.panoptic_head.decoder_input_proj, torch.nn.Conv2d)
    model.train()
    losses, _, _ = _run(model, panoptic_batch())
    assert all(torch.isfinite(v) for v in losses.values())
    assert [n for n in model.checkpoint_units() if 'pixel_decoder' in n][0] == \
        'panoptic_head.pixel_decoder.last_feat'


def test_decoder_segment_is_exact():
    """One segment over the decoder layers (each with its prediction): the plain run's losses
    and gradients."""
    torch.manual_seed(0)
    model = build_detector(mf_cfg(drop=0.1))
    model.train()
    batch = panoptic_batch()
    ref = _run(model, batch)
    model.set_checkpoint_segments([['panoptic_head.transformer_decoder.layers.0',
                                    'panoptic_head.transformer_decoder.layers.2']])
    got = _run(model, batch)
    for a, b in zip(ref[:2], got[:2]):
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=lambda m: f'{k}: {m}')
