"""PixelDecoder and TransformerEncoderPixelDecoder (mmdet 2.x's MaskFormer decoders): shapes,
keys, units, every checkpoint mode exact (dropout replayed), the padding mask."""
import copy

import pytest
import torch

from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import metas, mf_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _cfg(kind='TransformerEncoderPixelDecoder'):
    cfg = copy.deepcopy(mf_cfg(drop=0.1)['panoptic_head']['pixel_decoder'])
    if kind == 'PixelDecoder':
        cfg = dict(type='PixelDecoder', norm_cfg=cfg['norm_cfg'], act_cfg=cfg['act_cfg'])
    return dict(cfg, in_channels=[16, 32, 64], feat_channels=64, out_channels=32)


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, c, s, s, generator=g) for c, s in ((16, 16), (32, 8), (64, 4))]


@pytest.mark.parametrize('kind', ['PixelDecoder', 'TransformerEncoderPixelDecoder'])
def test_shapes_keys_units(kind):
    dec = MODELS.build(_cfg(kind))
    mask_feature, memory = dec(_feats(), metas())
    assert mask_feature.shape == (2, 32, 16, 16) and memory.shape == (2, 64, 4, 4)
    keys = dec.state_dict()
    assert 'mask_feature.weight' in keys and 'lateral_convs.1.gn.weight' in keys
    units = ['last_feat', 'level0', 'level1', 'mask_feature']
    if kind == 'PixelDecoder':
        assert 'last_feat_conv.conv.weight' in keys
        torch.testing.assert_close(memory, _feats()[-1])  # the coarsest input as it is
    else:
        assert 'encoder_in_proj.weight' in keys and 'encoder_out_proj.conv.weight' in keys
        assert not any(k.startswith('last_feat_conv') for k in keys)
        units += ['encoder.layers.0', 'encoder.layers.1']
    assert sorted(dec.checkpoint_units()) == sorted(units)


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    torch.manual_seed(0)
    dec = MODELS.build(_cfg())
    dec.train()

    def run():
        dec.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        outs = dec(_feats(), metas())
        g = torch.Generator().manual_seed(1)
        sum((t * torch.randn(t.shape, generator=g)).sum() for t in outs).backward()
        return [o.detach() for o in outs], \
            {n: p.grad.clone() for n, p in dec.named_parameters() if p.grad is not None}
    ref = run()
    dec.set_checkpoint_plan({'*': mode})
    got = run()
    for a, b in zip(ref[0], got[0]):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    for k in ref[1]:
        torch.testing.assert_close(got[1][k], ref[1][k], rtol=0, atol=1e-6)


def test_padding_mask_and_bad_inputs():
    from ckptzoo.models.plugins.pixel_decoder import padding_mask_of
    mask = padding_mask_of(metas(), torch.zeros(1), (16, 16))
    assert not mask[0].any()
    assert mask[1, 14:].all() and mask[1, :, 15:].all() and not mask[1, :14, :15].any()
    dec = MODELS.build(_cfg())
    with pytest.raises(ValueError, match='expects 3 levels'):
        dec(_feats()[1:], metas())
    with pytest.raises(ValueError, match='feat_channels'):
        MODELS.build(dict(_cfg(), feat_channels=32))
