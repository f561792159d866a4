"""Tiny DETR / Deformable DETR transformer configs in mmdet's schema, and a wrapper that runs a
module on fixed extra inputs so the every-mode helpers (one tensor or a list in) apply."""
import torch.nn as nn

from ckptzoo.models.checkpointing import CheckpointOwnerMixin


def detr_transformer_cfg(embed_dims=16, num_heads=2, ffn=24, layers=(2, 2), dropout=0.1):
    attn = dict(type='MultiheadAttention', embed_dims=embed_dims, num_heads=num_heads,
                dropout=dropout)
    return dict(
        type='Transformer',
        encoder=dict(type='DetrTransformerEncoder', num_layers=layers[0], transformerlayers=dict(
            type='BaseTransformerLayer', attn_cfgs=[attn], feedforward_channels=ffn,
            ffn_dropout=dropout, operation_order=('self_attn', 'norm', 'ffn', 'norm'))),
        decoder=dict(type='DetrTransformerDecoder', return_intermediate=True,
                     num_layers=layers[1], transformerlayers=dict(
                         type='DetrTransformerDecoderLayer', attn_cfgs=attn,
                         feedforward_channels=ffn, ffn_dropout=dropout,
                         operation_order=('self_attn', 'norm', 'cross_attn', 'norm', 'ffn',
                                          'norm'))))


def deformable_transformer_cfg(embed_dims=16, num_heads=2, ffn=24, layers=(2, 2), levels=2,
                               points=2, dropout=0.1, as_two_stage=False, proposals=6):
    msda = dict(type='MultiScaleDeformableAttention', embed_dims=embed_dims,
                num_heads=num_heads, num_levels=levels, num_points=points, dropout=dropout)
    return dict(
        type='DeformableDetrTransformer', as_two_stage=as_two_stage, num_feature_levels=levels,
        two_stage_num_proposals=proposals,
        encoder=dict(type='DetrTransformerEncoder', num_layers=layers[0], transformerlayers=dict(
            type='BaseTransformerLayer', attn_cfgs=msda, feedforward_channels=ffn,
            ffn_dropout=dropout, operation_order=('self_attn', 'norm', 'ffn', 'norm'))),
        decoder=dict(type='DeformableDetrTransformerDecoder', num_layers=layers[1],
                     return_intermediate=True, transformerlayers=dict(
                         type='DetrTransformerDecoderLayer',
                         attn_cfgs=[dict(type='MultiheadAttention', embed_dims=embed_dims,
                                         num_heads=num_heads, dropout=dropout), msda],
                         feedforward_channels=ffn, ffn_dropout=dropout,
                         operation_order=('self_attn', 'norm', 'cross_attn', 'norm', 'ffn',
                                          'norm'))))


class Wrapped(CheckpointOwnerMixin, nn.Module):
    """``net`` run as ``call(net, inputs)``; the tensors ``inputs`` are what the every-mode
    helpers differentiate, the rest lives in ``call``. Extra modules (a head's branches) may
    be given as ``extra``, so their parameters are compared too."""

    def __init__(self, net, call, extra=None):
        super().__init__()
        self.net = net
        self.extra = extra
        self.call = call

    def forward(self, inputs):
        outs = self.call(self, inputs)
        return tuple(o for o in outs if o is not None)
