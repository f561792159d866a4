"""mmcv 1.x's transformer bricks: keys, defaults, mmcv's deprecated arguments (without mmcv's
leak into its default dicts), a post-norm layer equal to torch's TransformerEncoderLayer, bad
arguments, and every checkpoint mode of a layer sequence exact with dropout."""
import copy

import pytest
import torch
import torch.nn as nn

from ckptzoo.models.utils.transformer_layers import (FFN, BaseTransformerLayer,
                                                     MultiheadAttention,
                                                     TransformerLayerSequence)
from ckptzoo.registry import ATTENTION, FEEDFORWARD_NETWORK, MODELS, TRANSFORMER_LAYER, \
    TRANSFORMER_LAYER_SEQUENCE, build_model
from tests.helpers.unit_modes import assert_mode_exact

ENC = dict(type='BaseTransformerLayer',
           attn_cfgs=dict(type='MultiheadAttention', embed_dims=16, num_heads=2, dropout=0.1),
           feedforward_channels=24, ffn_dropout=0.1,
           operation_order=('self_attn', 'norm', 'ffn', 'norm'))


def test_registry_names_are_mmcv_aliases():
    assert ATTENTION is FEEDFORWARD_NETWORK is TRANSFORMER_LAYER is \
        TRANSFORMER_LAYER_SEQUENCE is MODELS
    for name in ('MultiheadAttention', 'FFN', 'BaseTransformerLayer',
                 'TransformerLayerSequence', 'MultiScaleDeformableAttention'):
        assert MODELS.get(name) is not None, name


def test_multihead_attention_keys_and_deprecated_dropout():
    attn = MultiheadAttention(16, 2, dropout=0.3)
    assert set(attn.state_dict()) == {'attn.in_proj_weight', 'attn.in_proj_bias',
                                      'attn.out_proj.weight', 'attn.out_proj.bias'}
    assert attn.attn.dropout == 0.3 and attn.dropout_layer.p == 0.3
    # mmcv writes dropout into its default dict, so the next default module would drop too
    assert MultiheadAttention(16, 2).dropout_layer.p == 0.0
    with pytest.raises(ValueError, match='num_heads=3 must divide embed_dims=16'):
        MultiheadAttention(16, 3)


def test_multihead_attention_batch_first_and_positions():
    torch.manual_seed(0)
    attn = MultiheadAttention(16, 2).eval()
    q, k, qp, kp = (torch.randn(5, 2, 16), torch.randn(7, 2, 16), torch.randn(5, 2, 16),
                    torch.randn(7, 2, 16))
    out = attn(q, k, query_pos=qp, key_pos=kp)
    want = q + attn.attn(q + qp, k + kp, k)[0]
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    bf = copy.deepcopy(attn)
    bf.batch_first = True
    torch.testing.assert_close(bf(q.transpose(0, 1), k.transpose(0, 1), query_pos=qp.transpose(
        0, 1), key_pos=kp.transpose(0, 1)).transpose(0, 1), out, rtol=0, atol=1e-6)


def test_ffn_keys_defaults_and_errors():
    ffn = FFN(16, 24, num_fcs=3)
    assert list(ffn.state_dict()) == ['layers.0.0.weight', 'layers.0.0.bias',
                                      'layers.1.0.weight', 'layers.1.0.bias',
                                      'layers.2.weight', 'layers.2.bias']
    x = torch.randn(3, 16)
    torch.testing.assert_close(FFN(16, 24, add_identity=False).eval()(x).shape, x.shape)
    with pytest.raises(ValueError, match='num_fcs must be an int >= 2'):
        FFN(16, 24, num_fcs=1)
    with pytest.warns(DeprecationWarning):
        assert FFN(16, 24, dropout=0.2).layers[-1].p == 0.2


def test_layer_keys_and_deprecated_ffn_args_do_not_leak():
    layer = build_model(copy.deepcopy(ENC))
    assert layer.ffns[0].feedforward_channels == 24 and layer.ffns[0].layers[-1].p == 0.1
    assert sorted({k.split('.')[0] for k in layer.state_dict()}) == ['attentions', 'ffns',
                                                                     'norms']
    assert 'norms.1.weight' in layer.state_dict()
    # mmcv keeps feedforward_channels=24 in its default ffn_cfgs for every later layer
    plain = BaseTransformerLayer(attn_cfgs=ENC['attn_cfgs'], operation_order=('self_attn',
                                                                              'ffn'))
    assert plain.ffns[0].feedforward_channels == 1024 and plain.ffns[0].embed_dims == 16


def test_post_norm_layer_equals_torch_encoder_layer():
    """A post-norm self-attention layer is torch's TransformerEncoderLayer with the position
    added to query and key (DETR's encoder layer)."""
    torch.manual_seed(0)
    layer = build_model(dict(ENC, feedforward_channels=24)).eval()
    ref = nn.TransformerEncoderLayer(16, 2, 24, dropout=0.0).eval()
    ref.self_attn.load_state_dict(layer.attentions[0].attn.state_dict())
    ref.linear1.load_state_dict(layer.ffns[0].layers[0][0].state_dict())
    ref.linear2.load_state_dict(layer.ffns[0].layers[1].state_dict())
    ref.norm1.load_state_dict(layer.norms[0].state_dict())
    ref.norm2.load_state_dict(layer.norms[1].state_dict())
    x = torch.randn(6, 2, 16)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    out = layer(x, query_key_padding_mask=mask)
    torch.testing.assert_close(out, ref(x, src_key_padding_mask=mask), rtol=0, atol=1e-5)


@pytest.mark.parametrize('kwargs, match', [
    (dict(operation_order=('self_attn', 'conv')), 'operation_order must be a sequence'),
    (dict(operation_order=('self_attn', 'cross_attn'),
          attn_cfgs=[ENC['attn_cfgs']]), 'a list of 2 dicts'),
    (dict(operation_order=('norm', 'ffn')), 'has no attention'),
    (dict(operation_order=('self_attn', ), ffn_dropout=0.1, act_cfg=None), 'unknown arguments'),
])
def test_layer_bad_arguments(kwargs, match):
    cfg = {'attn_cfgs': ENC['attn_cfgs'], **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        BaseTransformerLayer(**cfg)


def test_sequence_units_and_bad_arguments():
    seq = TransformerLayerSequence(ENC, num_layers=3)
    assert list(seq.checkpoint_units()) == ['layers.0', 'layers.1', 'layers.2']
    assert seq.checkpoint_chains() == [['layers.0', 'layers.1', 'layers.2']]
    assert all(u.mode == 'full' for u in
               TransformerLayerSequence(ENC, num_layers=2, with_cp=True).checkpoint_units()
               .values())
    with pytest.raises(ValueError, match='list of num_layers=2 dicts'):
        TransformerLayerSequence([ENC], num_layers=2)
    with pytest.raises(ValueError, match='num_layers must be a positive int'):
        TransformerLayerSequence(ENC, num_layers=0)


class _Seq(nn.Module):
    """A sequence on one tensor (the query), with key positions and a padding mask fixed."""

    def __init__(self):
        super().__init__()
        self.seq = TransformerLayerSequence(ENC, num_layers=3)
        self.pos = nn.Parameter(torch.randn(6, 2, 16))

    def checkpoint_units(self):
        return self.seq.checkpoint_units()

    def set_checkpoint_plan(self, plan):
        return self.seq.set_checkpoint_plan(plan)

    def set_checkpoint_segments(self, segments):
        return self.seq.set_checkpoint_segments(segments)

    def forward(self, x):
        mask = torch.zeros(2, 6, dtype=torch.bool)
        mask[1, 4:] = True
        return self.seq(x, None, None, query_pos=self.pos, query_key_padding_mask=mask)


@pytest.mark.parametrize('mode, segments', [('full', None), ('selective', None),
                                            ('offload', None), (None, [['layers.0',
                                                                        'layers.2']])])
def test_sequence_every_mode_exact_with_dropout(mode, segments, monkeypatch):
    torch.manual_seed(0)
    plain = _Seq().double().train()
    assert_mode_exact(plain, torch.randn(6, 2, 16, dtype=torch.float64), monkeypatch,
                      mode=mode, segments=segments)
