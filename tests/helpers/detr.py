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


def _head_common(num_classes, num_query):
    return dict(num_classes=num_classes, num_query=num_query,
                loss_bbox=dict(type='L1Loss', loss_weight=5.0),
                loss_iou=dict(type='GIoULoss', loss_weight=2.0))


def detr_cfg(num_classes=3, num_query=6, dropout=0.1, layers=(2, 3), with_cp=False):
    """mmdet's detr_r50 config at toy size (ResNet-18 / 8 channels, 16 wide, 2 + 3 layers)."""
    return dict(
        type='DETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, num_stages=4, out_indices=(3, ),
                      frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=False, style='pytorch'),
        bbox_head=dict(
            type='DETRHead', in_channels=64, with_cp=with_cp,
            transformer=detr_transformer_cfg(layers=layers, dropout=dropout),
            positional_encoding=dict(type='SinePositionalEncoding', num_feats=8, normalize=True),
            loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                          loss_weight=1.0, class_weight=1.0),
            **_head_common(num_classes, num_query)),
        train_cfg=dict(assigner=dict(
            type='HungarianAssigner', cls_cost=dict(type='ClassificationCost', weight=1.),
            reg_cost=dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            iou_cost=dict(type='IoUCost', iou_mode='giou', weight=2.0))),
        test_cfg=dict(max_per_img=100))


def deformable_detr_cfg(num_classes=3, num_query=6, dropout=0.1, layers=(2, 3),
                        with_box_refine=False, as_two_stage=False, with_cp=False):
    """mmdet's deformable_detr_r50 configs at toy size (4 levels of 16 channels)."""
    return dict(
        type='DeformableDETR',
        backbone=dict(type='ResNet', depth=18, base_channels=8, num_stages=4,
                      out_indices=(1, 2, 3), frozen_stages=-1,
                      norm_cfg=dict(type='BN', requires_grad=True), norm_eval=False,
                      style='pytorch'),
        neck=dict(type='ChannelMapper', in_channels=[16, 32, 64], kernel_size=1,
                  out_channels=16, act_cfg=None, norm_cfg=dict(type='GN', num_groups=4),
                  num_outs=4),
        bbox_head=dict(
            type='DeformableDETRHead', in_channels=64, sync_cls_avg_factor=True,
            with_box_refine=with_box_refine, as_two_stage=as_two_stage, with_cp=with_cp,
            transformer=deformable_transformer_cfg(layers=layers, levels=4, dropout=dropout,
                                                   proposals=num_query),
            positional_encoding=dict(type='SinePositionalEncoding', num_feats=8,
                                     normalize=True, offset=-0.5),
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=2.0),
            **_head_common(num_classes, num_query)),
        train_cfg=dict(assigner=dict(
            type='HungarianAssigner', cls_cost=dict(type='FocalLossCost', weight=2.0),
            reg_cost=dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            iou_cost=dict(type='IoUCost', iou_mode='giou', weight=2.0))),
        test_cfg=dict(max_per_img=100))


def detr_batch(dtype=None):
    """Two padded images (64 x 60 and 48 x 64 in a 64 x 64 batch), 3 and 1 boxes."""
    import numpy as np
    import torch
    from tests.helpers.detectors import img_meta
    g = torch.Generator().manual_seed(0)
    metas = [img_meta(64, 60), img_meta(48, 64, scale=2.0)]
    metas[1]['ori_filename'] = 'second.jpg'
    metas[1]['ori_shape'] = (24, 32, 3)
    assert isinstance(metas[0]['scale_factor'], np.ndarray)
    batch = dict(img=torch.randn(2, 3, 64, 64, generator=g), img_metas=metas,
                 gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 58., 30.],
                                          [2., 2., 20., 60.]]),
                            torch.tensor([[5., 5., 52., 44.]])],
                 gt_labels=[torch.tensor([0, 2, 1]), torch.tensor([1])])
    if dtype is not None:
        batch['img'] = batch['img'].to(dtype)
        batch['gt_bboxes'] = [b.to(dtype) for b in batch['gt_bboxes']]
    return batch


def detector_train_run(model, batch, seed=5):
    """Seeded forward_train + backward of the summed losses: (losses, grads, buffers)."""
    import copy

    import torch
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    losses = model.forward_train(**copy.deepcopy(batch))
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    return ({k: v.detach() for k, v in losses.items()},
            {n: p.grad for n, p in model.named_parameters()},
            {n: b.clone() for n, b in model.named_buffers()})


def assert_detector_mode_exact(plain, batch, monkeypatch, mode=None, segments=None,
                               atol=1e-10):
    """``plain`` (train, float64) against a copy under ``{'*': mode}`` or ``segments``:
    every loss, every gradient and buffer equal, and the plan really checkpoints."""
    import copy

    import torch

    from tests.helpers.unit_modes import Counting
    model = copy.deepcopy(plain)
    if mode is not None:
        model.set_checkpoint_plan({'*': mode})
    if segments is not None:
        model.set_checkpoint_segments(segments)
    ref = detector_train_run(plain, batch)
    counting = Counting(monkeypatch)
    got = detector_train_run(model, batch)
    assert counting.calls > 0
    assert list(ref[0]) == list(got[0])
    for k in ref[0]:
        torch.testing.assert_close(got[0][k], ref[0][k], rtol=0, atol=atol, msg=k)
    for n, g in ref[1].items():
        if g is None:
            assert got[1][n] is None, n
        else:
            torch.testing.assert_close(got[1][n], g, rtol=0, atol=atol,
                                       msg=lambda m: f'{n}: {m}')
    for n, b in ref[2].items():
        torch.testing.assert_close(got[2][n], b, rtol=0, atol=0, msg=lambda m: f'{n}: {m}')
    return ref
