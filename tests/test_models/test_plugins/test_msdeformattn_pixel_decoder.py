"""MSDeformAttnPixelDecoder (mmdet 2.x's): output shapes and keys, units (input projections,
encoder layers, top-down stages, mask feature), every checkpoint mode exact, bad configs, and
the top-down convs matched to their levels when more than one level is left to them (mmdet
indexed them by the level and failed)."""
import copy

import pytest
import torch

from ckptzoo.registry import MODELS
from tests.helpers.checkpointing import one_thread as _one_thread
from tests.helpers.maskformer import m2f_cfg

one_thread = pytest.fixture(autouse=True)(_one_thread)


def _cfg(levels=3, drop=0.1):
    cfg = copy.deepcopy(m2f_cfg(drop=drop)['panoptic_head']['pixel_decoder'])
    cfg['encoder']['transformerlayers']['attn_cfgs']['num_levels'] = levels
    return dict(cfg, in_channels=[16, 32, 64, 64], strides=[4, 8, 16, 32], feat_channels=64,
                out_channels=32)


def _feats():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, c, s, s, generator=g) for c, s in ((16, 16), (32, 8), (64, 4),
                                                               (64, 2))]


def test_shapes_keys_units():
    dec = MODELS.build(_cfg())
    mask_feature, outs = dec(_feats())
    assert mask_feature.shape == (2, 32, 16, 16)
    assert [o.shape[-1] for o in outs] == [2, 4, 8] and all(o.shape[1] == 64 for o in outs)
    keys = dec.state_dict()
    assert 'input_convs.2.gn.weight' in keys and 'level_encoding.weight' in keys
    assert 'lateral_convs.0.conv.weight' in keys and 'mask_feature.weight' in keys
    assert 'encoder.layers.1.attentions.0.sampling_offsets.weight' in keys
    assert sorted(dec.checkpoint_units()) == sorted(
        ['input0', 'input1', 'input2', 'level0', 'mask_feature', 'encoder.layers.0',
         'encoder.layers.1'])


@pytest.mark.parametrize('mode', ['full', 'selective', 'offload'])
def test_every_checkpoint_mode_is_exact(mode):
    torch.manual_seed(0)
    dec = MODELS.build(_cfg())
    dec.train()

    def run():
        dec.zero_grad(set_to_none=True)
        torch.manual_seed(3)
        mask_feature, outs = dec(_feats())
        g = torch.Generator().manual_seed(1)
        sum((t * torch.randn(t.shape, generator=g)).sum() for t in [mask_feature] + outs
            ).backward()
        return [mask_feature.detach()] + [o.detach() for o in outs], \
            {n: p.grad.clone() for n, p in dec.named_parameters() if p.grad is not None}
    ref = run()
    dec.set_checkpoint_plan({'*': mode})
    got = run()
    for a, b in zip(ref[0], got[0]):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
    assert ref[1].keys() == got[1].keys() and len(ref[1]) > 20
    for k in ref[1]:
        torch.testing.assert_close(got[1][k], ref[1][k], rtol=0, atol=1e-6)


def test_two_encoder_levels_of_four_inputs():
    dec = MODELS.build(_cfg(levels=2))
    assert dec.lateral_convs[0].conv.in_channels == 32  # the level below the encoder's
    mask_feature, outs = dec(_feats())
    assert mask_feature.shape == (2, 32, 16, 16) and len(outs) == 3


def test_bad_configs():
    with pytest.raises(ValueError, match='strides'):
        MODELS.build(dict(_cfg(), strides=[8, 16, 32]))
    with pytest.raises(ValueError, match='num_levels'):
        MODELS.build(_cfg(levels=5))
    with pytest.raises(ValueError, match='expects 4 levels'):
        MODELS.build(_cfg())(_feats()[1:])
