"""mmdet's DETR transformers (models/utils/transformer.py): keys and shapes, inverse_sigmoid,
DynamicConv, and every checkpoint mode exact (dropout 0.1, train mode, float64) for DETR's
Transformer and Deformable DETR's, with box refinement and two-stage."""
import copy

import pytest
import torch
import torch.nn as nn

from ckptzoo.models.utils.transformer import inverse_sigmoid
from ckptzoo.registry import TRANSFORMER, build_model
from tests.helpers.detr import Wrapped, deformable_transformer_cfg, detr_transformer_cfg
from tests.helpers.unit_modes import assert_mode_exact

MODES = [('full', None), ('selective', None), ('offload', None)]


def test_inverse_sigmoid():
    x = torch.tensor([0.0, 0.25, 0.5, 1.0, 2.0])
    torch.testing.assert_close(inverse_sigmoid(x)[1:3], torch.logit(x[1:3]))
    assert inverse_sigmoid(x)[0] == torch.log(torch.tensor(1e-5))
    assert inverse_sigmoid(x)[4] == inverse_sigmoid(x)[3]


def _detr():
    torch.manual_seed(0)
    return TRANSFORMER.build(detr_transformer_cfg())


def _detr_call(self, inputs):
    x, query = inputs
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[1, 2:] = True
    return self.net(x, mask, query, torch.ones_like(x) * 0.1)


def test_detr_transformer_keys_shapes_units():
    tr = _detr()
    keys = list(tr.state_dict())
    assert keys[:4] == ['encoder.layers.0.attentions.0.attn.in_proj_weight',
                        'encoder.layers.0.attentions.0.attn.in_proj_bias',
                        'encoder.layers.0.attentions.0.attn.out_proj.weight',
                        'encoder.layers.0.attentions.0.attn.out_proj.bias']
    assert 'decoder.layers.1.attentions.1.attn.in_proj_weight' in keys
    assert 'decoder.post_norm.weight' in keys and 'encoder.post_norm.weight' not in keys
    out, memory = tr(torch.randn(2, 16, 3, 4), torch.zeros(2, 3, 4, dtype=torch.bool),
                     torch.randn(5, 16), torch.randn(2, 16, 3, 4))
    assert out.shape == (2, 2, 5, 16) and memory.shape == (2, 16, 3, 4)
    assert list(tr.checkpoint_units()) == ['encoder.layers.0', 'encoder.layers.1',
                                           'decoder.layers.0', 'decoder.layers.1']
    tr.init_weights()
    assert tr.encoder.layers[0].ffns[0].layers[0][0].bias.abs().sum() == 0  # xavier, bias 0


@pytest.mark.parametrize('mode, segments', MODES + [
    (None, [['net.encoder.layers.0', 'net.encoder.layers.1'],
            ['net.decoder.layers.0', 'net.decoder.layers.1']])])
def test_detr_transformer_every_mode_exact(mode, segments, monkeypatch):
    plain = Wrapped(_detr(), _detr_call).double().train()
    inputs = [torch.randn(2, 16, 3, 4, dtype=torch.float64),
              torch.randn(5, 16, dtype=torch.float64)]
    assert_mode_exact(plain, inputs, monkeypatch, mode=mode, segments=segments)


def _deformable(two_stage=False):
    torch.manual_seed(0)
    tr = TRANSFORMER.build(deformable_transformer_cfg(as_two_stage=two_stage))
    tr.init_weights()
    return tr


def _deformable_call(refine, two_stage):
    def call(self, inputs):
        f0, f1, query = inputs
        masks = [torch.zeros(2, 5, 6, dtype=torch.bool), torch.zeros(2, 3, 3, dtype=torch.bool)]
        masks[0][1, 4:] = True
        masks[1][1, :, 2:] = True
        pos = [torch.ones_like(f0) * 0.1, torch.ones_like(f1) * 0.2]
        return self.net([f0, f1], masks, None if two_stage else query, pos,
                        reg_branches=self.extra[0] if refine else None,
                        cls_branches=self.extra[1] if two_stage else None)
    return call


def _branches(n):
    torch.manual_seed(1)
    return nn.ModuleList([nn.ModuleList([nn.Linear(16, 4) for _ in range(n)]),
                          nn.ModuleList([nn.Linear(16, 3) for _ in range(n)])])


def test_deformable_transformer_keys_shapes():
    tr = _deformable()
    keys = set(tr.state_dict())
    assert {'level_embeds', 'reference_points.weight',
            'encoder.layers.0.attentions.0.sampling_offsets.weight',
            'decoder.layers.1.attentions.1.value_proj.bias'} <= keys
    two = _deformable(two_stage=True)
    assert {'enc_output.weight', 'enc_output_norm.weight', 'pos_trans.weight',
            'pos_trans_norm.weight'} <= set(two.state_dict())
    assert 'reference_points.weight' not in two.state_dict()
    outs = Wrapped(two, _deformable_call(True, True), _branches(3))(
        [torch.randn(2, 16, 5, 6), torch.randn(2, 16, 3, 3), None])
    states, init_ref, refs, enc_cls, enc_coord = outs
    assert states.shape == (2, 6, 2, 16) and init_ref.shape == (2, 6, 4)
    assert refs.shape == (2, 2, 6, 4) and enc_cls.shape == (2, 39, 3)
    assert enc_coord.shape == (2, 39, 4)



def test_two_stage_needs_as_many_encoder_positions_as_proposals():
    """mmdet's topk fails with 'selected index k out of range'; the error names the cause."""
    two = _deformable(two_stage=True)
    two.two_stage_num_proposals = 40  # 5 x 6 + 3 x 3 = 39 positions
    with pytest.raises(ValueError, match='two_stage_num_proposals=40 is more than the 39 '):
        Wrapped(two, _deformable_call(True, True), _branches(3))(
            [torch.randn(2, 16, 5, 6), torch.randn(2, 16, 3, 3), None])
    two.two_stage_num_proposals = 39  # every position a proposal: fine
    Wrapped(two, _deformable_call(True, True), _branches(3))(
        [torch.randn(2, 16, 5, 6), torch.randn(2, 16, 3, 3), None])

@pytest.mark.parametrize('refine, two_stage', [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize('mode, segments', MODES + [
    (None, [['net.encoder.layers.0', 'net.encoder.layers.1'],
            ['net.decoder.layers.0', 'net.decoder.layers.1']])])
def test_deformable_transformer_every_mode_exact(refine, two_stage, mode, segments,
                                                 monkeypatch):
    plain = Wrapped(_deformable(two_stage), _deformable_call(refine, two_stage),
                    _branches(3 if two_stage else 2)).double().train()
    inputs = [torch.randn(2, 16, 5, 6, dtype=torch.float64),
              torch.randn(2, 16, 3, 3, dtype=torch.float64),
              torch.randn(4, 32, dtype=torch.float64)]
    if two_stage:  # the query embedding is unused
        plain.call = _deformable_call(refine, two_stage)
        inputs[2] = torch.zeros(1, dtype=torch.float64)
    ref = assert_mode_exact(plain, inputs, monkeypatch, mode=mode, segments=segments)
    assert ref[1][0].abs().sum() > 0


def test_decoder_layer_errors_and_act_cfg():
    cfg = copy.deepcopy(detr_transformer_cfg()['decoder']['transformerlayers'])
    with pytest.raises(ValueError, match='must have 6 operations'):
        build_model(dict(cfg, operation_order=('self_attn', 'norm', 'ffn', 'norm')))
    layer = build_model(dict(cfg, act_cfg=dict(type='GELU')))
    assert isinstance(layer.ffns[0].activate, nn.GELU)


def test_dynamic_conv():
    conv = build_model(dict(type='DynamicConv', in_channels=8, feat_channels=4,
                            input_feat_shape=3))
    assert set(k.split('.')[0] for k in conv.state_dict()) == {
        'dynamic_layer', 'norm_in', 'norm_out', 'fc_layer', 'fc_norm'}
    assert conv(torch.randn(5, 8), torch.randn(5, 8, 3, 3)).shape == (5, 8)
    no_proj = build_model(dict(type='DynamicConv', in_channels=8, feat_channels=4,
                               out_channels=6, with_proj=False))
    assert no_proj(torch.randn(5, 8), torch.randn(5, 8, 3, 3)).shape == (5, 9, 6)
    with pytest.raises(ValueError, match='input_feat_shape=3 expects 3x3'):
        conv(torch.randn(5, 8), torch.randn(5, 8, 4, 4))
