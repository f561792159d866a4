"""Tiny MaskFormer / Mask2Former configs in mmdet 2.x's schema (ResNet-18, 64-channel heads,
3 thing + 2 stuff classes, 10 queries) and a 64 px panoptic batch, for the tests of the family."""
import numpy as np
import torch

E = 64


def m2f_cfg(things=3, stuff=2, queries=10, dec_layers=3, enc_layers=2, num_points=64, drop=0.0,
            instance=False):
    num_classes = things + stuff
    return dict(
        type='Mask2Former',
        backbone=dict(type='ResNet', depth=18, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=False),
                      norm_eval=True, style='pytorch', init_cfg=None),
        panoptic_head=dict(
            type='Mask2FormerHead', in_channels=[64, 128, 256, 512], strides=[4, 8, 16, 32],
            feat_channels=E, out_channels=E, num_things_classes=things,
            num_stuff_classes=stuff, num_queries=queries, num_transformer_feat_level=3,
            pixel_decoder=dict(
                type='MSDeformAttnPixelDecoder', num_outs=3,
                norm_cfg=dict(type='GN', num_groups=32), act_cfg=dict(type='ReLU'),
                encoder=dict(
                    type='DetrTransformerEncoder', num_layers=enc_layers,
                    transformerlayers=dict(
                        type='BaseTransformerLayer',
                        attn_cfgs=dict(type='MultiScaleDeformableAttention', embed_dims=E,
                                       num_heads=8, num_levels=3, num_points=4,
                                       im2col_step=64, dropout=drop, batch_first=False,
                                       norm_cfg=None, init_cfg=None),
                        ffn_cfgs=dict(type='FFN', embed_dims=E, feedforward_channels=128,
                                      num_fcs=2, ffn_drop=drop,
                                      act_cfg=dict(type='ReLU', inplace=True)),
                        operation_order=('self_attn', 'norm', 'ffn', 'norm')),
                    init_cfg=None),
                positional_encoding=dict(type='SinePositionalEncoding', num_feats=E // 2,
                                         normalize=True),
                init_cfg=None),
            enforce_decoder_input_project=False,
            positional_encoding=dict(type='SinePositionalEncoding', num_feats=E // 2,
                                     normalize=True),
            transformer_decoder=dict(
                type='DetrTransformerDecoder', return_intermediate=True, num_layers=dec_layers,
                transformerlayers=dict(
                    type='DetrTransformerDecoderLayer',
                    attn_cfgs=dict(type='MultiheadAttention', embed_dims=E, num_heads=8,
                                   attn_drop=drop, proj_drop=drop, dropout_layer=None,
                                   batch_first=False),
                    ffn_cfgs=dict(embed_dims=E, feedforward_channels=128, num_fcs=2,
                                  act_cfg=dict(type='ReLU', inplace=True), ffn_drop=drop,
                                  dropout_layer=None, add_identity=True),
                    feedforward_channels=128,
                    operation_order=('cross_attn', 'norm', 'self_attn', 'norm', 'ffn',
                                     'norm')),
                init_cfg=None),
            loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=2.0,
                          reduction='mean', class_weight=[1.0] * num_classes + [0.1]),
            loss_mask=dict(type='CrossEntropyLoss', use_sigmoid=True, reduction='mean',
                           loss_weight=5.0),
            loss_dice=dict(type='DiceLoss', use_sigmoid=True, activate=True, reduction='mean',
                           naive_dice=True, eps=1.0, loss_weight=5.0)),
        panoptic_fusion_head=dict(type='MaskFormerFusionHead', num_things_classes=things,
                                  num_stuff_classes=stuff, loss_panoptic=None, init_cfg=None),
        train_cfg=dict(
            num_points=num_points, oversample_ratio=3.0, importance_sample_ratio=0.75,
            assigner=dict(type='MaskHungarianAssigner',
                          cls_cost=dict(type='ClassificationCost', weight=2.0),
                          mask_cost=dict(type='CrossEntropyLossCost', weight=5.0,
                                         use_sigmoid=True),
                          dice_cost=dict(type='DiceCost', weight=5.0, pred_act=True, eps=1.0)),
            sampler=dict(type='MaskPseudoSampler')),
        test_cfg=dict(panoptic_on=not instance, semantic_on=False, instance_on=True,
                      max_per_image=20, iou_thr=0.8, filter_low_score=True,
                      object_mask_thr=0.8),
        init_cfg=None)


def mf_cfg(things=3, stuff=2, queries=10, dec_layers=3, enc_layers=2, drop=0.0):
    num_classes = things + stuff
    return dict(
        type='MaskFormer',
        backbone=dict(type='ResNet', depth=18, num_stages=4, out_indices=(0, 1, 2, 3),
                      frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=False),
                      norm_eval=True, style='pytorch', init_cfg=None),
        panoptic_head=dict(
            type='MaskFormerHead', in_channels=[64, 128, 256, 512], feat_channels=E,
            out_channels=E, num_things_classes=things, num_stuff_classes=stuff,
            num_queries=queries,
            pixel_decoder=dict(
                type='TransformerEncoderPixelDecoder',
                norm_cfg=dict(type='GN', num_groups=32), act_cfg=dict(type='ReLU'),
                encoder=dict(
                    type='DetrTransformerEncoder', num_layers=enc_layers,
                    transformerlayers=dict(
                        type='BaseTransformerLayer',
                        attn_cfgs=dict(type='MultiheadAttention', embed_dims=E, num_heads=8,
                                       attn_drop=drop, proj_drop=drop, dropout_layer=None,
                                       batch_first=False),
                        ffn_cfgs=dict(embed_dims=E, feedforward_channels=128, num_fcs=2,
                                      act_cfg=dict(type='ReLU', inplace=True), ffn_drop=drop,
                                      dropout_layer=None, add_identity=True),
                        operation_order=('self_attn', 'norm', 'ffn', 'norm'),
                        norm_cfg=dict(type='LN'), init_cfg=None, batch_first=False),
                    init_cfg=None),
                positional_encoding=dict(type='SinePositionalEncoding', num_feats=E // 2,
                                         normalize=True)),
            enforce_decoder_input_project=False,
            positional_encoding=dict(type='SinePositionalEncoding', num_feats=E // 2,
                                     normalize=True),
            transformer_decoder=dict(
                type='DetrTransformerDecoder', return_intermediate=True, num_layers=dec_layers,
                transformerlayers=dict(
                    type='DetrTransformerDecoderLayer',
                    attn_cfgs=dict(type='MultiheadAttention', embed_dims=E, num_heads=8,
                                   attn_drop=drop, proj_drop=drop, dropout_layer=None,
                                   batch_first=False),
                    ffn_cfgs=dict(embed_dims=E, feedforward_channels=128, num_fcs=2,
                                  act_cfg=dict(type='ReLU', inplace=True), ffn_drop=drop,
                                  dropout_layer=None, add_identity=True),
                    feedforward_channels=128,
                    operation_order=('self_attn', 'norm', 'cross_attn', 'norm', 'ffn',
                                     'norm')),
                init_cfg=None),
            loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0,
                          reduction='mean', class_weight=[1.0] * num_classes + [0.1]),
            loss_mask=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                           reduction='mean', loss_weight=20.0),
            loss_dice=dict(type='DiceLoss', use_sigmoid=True, activate=True, reduction='mean',
                           naive_dice=True, eps=1.0, loss_weight=1.0)),
        panoptic_fusion_head=dict(type='MaskFormerFusionHead', num_things_classes=things,
                                  num_stuff_classes=stuff, loss_panoptic=None, init_cfg=None),
        train_cfg=dict(
            assigner=dict(type='MaskHungarianAssigner',
                          cls_cost=dict(type='ClassificationCost', weight=1.0),
                          mask_cost=dict(type='FocalLossCost', weight=20.0, binary_input=True),
                          dice_cost=dict(type='DiceCost', weight=1.0, pred_act=True, eps=1.0)),
            sampler=dict(type='MaskPseudoSampler')),
        test_cfg=dict(panoptic_on=True, semantic_on=False, instance_on=True, max_per_image=20,
                      object_mask_thr=0.8, iou_thr=0.8, filter_low_score=False),
        init_cfg=None)


def metas():
    """Two images in a 64 x 64 batch, the second padded (56 x 60, original 48 x 50)."""
    return [dict(img_shape=(64, 64, 3), ori_shape=(64, 64, 3), pad_shape=(64, 64, 3),
                 scale_factor=np.ones(4, dtype=np.float32), flip=False,
                 batch_input_shape=(64, 64)),
            dict(img_shape=(56, 60, 3), ori_shape=(48, 50, 3), pad_shape=(64, 64, 3),
                 scale_factor=np.array([1.2, 1.1666, 1.2, 1.1666], dtype=np.float32),
                 flip=False, batch_input_shape=(64, 64))]


def panoptic_batch(panoptic=True, dtype=torch.float32):
    """forward_train kwargs: things 0, 1 (image 0) and 2 (image 1); stuff 3, 4 in the
    semantic maps (255 elsewhere); ``panoptic=False``: no semantic maps (instances only)."""
    from ckptzoo.core.mask import BitmapMasks
    g = torch.Generator().manual_seed(0)
    m1 = np.zeros((2, 64, 64), np.uint8)
    m1[0, 8:40, 10:40] = 1
    m1[1, 30:60, 4:30] = 1
    m2 = np.zeros((1, 56, 60), np.uint8)
    m2[0, 5:30, 5:52] = 1
    seg = torch.full((2, 1, 64, 64), 255, dtype=torch.uint8)
    seg[0, 0, 40:64, 30:64] = 3
    seg[0, 0, 0:8, :] = 4
    seg[1, 0, 30:56, 0:60] = 4
    seg[0, 0, 8:40, 10:40] = 0
    seg[0, 0, 30:60, 4:30] = 1
    return dict(img=torch.randn(2, 3, 64, 64, generator=g).to(dtype), img_metas=metas(),
                gt_bboxes=[torch.tensor([[10., 8., 40., 40.], [4., 30., 30., 60.]]).to(dtype),
                           torch.tensor([[5., 5., 52., 30.]]).to(dtype)],
                gt_labels=[torch.tensor([0, 1]), torch.tensor([2])],
                gt_masks=[BitmapMasks(m1, 64, 64), BitmapMasks(m2, 56, 60)],
                gt_semantic_seg=seg if panoptic else None)
