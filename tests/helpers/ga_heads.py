"""Tiny configs and inputs of the guided-anchoring and SABL heads' tests (two levels, strides
8 and 16, a 32 x 32 image)."""
import copy

import numpy as np
import torch

from ckptzoo.registry import build_head

STRIDES = [8, 16]
APPROX = dict(type='AnchorGenerator', octave_base_scale=4, scales_per_octave=3,
              ratios=[0.5, 1.0, 2.0], strides=STRIDES)
SQUARE = dict(type='AnchorGenerator', ratios=[1.0], scales=[4], strides=STRIDES)
FOCAL = dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25, loss_weight=1.0)
GA_TRAIN_CFG = dict(
    assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4, min_pos_iou=0.0,
                  ignore_iof_thr=-1),
    ga_assigner=dict(type='ApproxMaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                     min_pos_iou=0.4, ignore_iof_thr=-1),
    ga_sampler=dict(type='RandomSampler', num=64, pos_fraction=0.5, neg_pos_ub=-1,
                    add_gt_as_proposals=False),
    allowed_border=-1, pos_weight=-1, center_ratio=0.2, ignore_ratio=0.5, debug=False)
RETINA_TEST_CFG = dict(nms_pre=100, min_bbox_size=0, score_thr=0.0,
                       nms=dict(type='nms', iou_threshold=0.5), max_per_img=20)
RPN_TRAIN_CFG = dict(GA_TRAIN_CFG, assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.7,
                                                 neg_iou_thr=0.3, min_pos_iou=0.3,
                                                 ignore_iof_thr=-1),
                     sampler=dict(type='RandomSampler', num=64, pos_fraction=0.5,
                                  neg_pos_ub=-1, add_gt_as_proposals=False),
                     ga_assigner=dict(type='ApproxMaxIoUAssigner', pos_iou_thr=0.7,
                                      neg_iou_thr=0.3, min_pos_iou=0.3, ignore_iof_thr=-1))
RPN_TEST_CFG = dict(nms_pre=100, nms_post=50, max_per_img=30, min_bbox_size=0,
                    nms=dict(type='nms', iou_threshold=0.7))


def ga_head_cfg(kind='GARetinaHead', **kw):
    """mmdet's ga_retinanet / ga_rpn head configs at tiny sizes."""
    cfg = dict(type=kind, in_channels=8, feat_channels=8, approx_anchor_generator=APPROX,
               square_anchor_generator=SQUARE, deform_groups=2, loc_filter_thr=0.01,
               loss_loc=FOCAL, loss_shape=dict(type='BoundedIoULoss', beta=0.2,
                                               loss_weight=1.0))
    if kind == 'GARPNHead':
        cfg.update(loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                   loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0),
                   anchor_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                                     target_stds=[0.07, 0.07, 0.14, 0.14]),
                   bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                                   target_stds=[0.07, 0.07, 0.11, 0.11]),
                   train_cfg=RPN_TRAIN_CFG, test_cfg=RPN_TEST_CFG)
    else:
        cfg.update(num_classes=3, loss_cls=FOCAL,
                   loss_bbox=dict(type='SmoothL1Loss', beta=0.04, loss_weight=1.0),
                   train_cfg=GA_TRAIN_CFG, test_cfg=RETINA_TEST_CFG)
        if kind == 'GARetinaHead':
            cfg['stacked_convs'] = 2
    cfg.update(kw)
    return cfg


def sabl_head_cfg(**kw):
    cfg = dict(type='SABLRetinaHead', num_classes=3, in_channels=8, stacked_convs=2,
               feat_channels=8, approx_anchor_generator=APPROX, square_anchor_generator=SQUARE,
               bbox_coder=dict(type='BucketingBBoxCoder', num_buckets=14, scale_factor=3.0),
               loss_cls=FOCAL,
               loss_bbox_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.5),
               loss_bbox_reg=dict(type='SmoothL1Loss', beta=1.0 / 9.0, loss_weight=1.5),
               train_cfg=dict(assigner=dict(type='ApproxMaxIoUAssigner', pos_iou_thr=0.5,
                                            neg_iou_thr=0.4, min_pos_iou=0.0,
                                            ignore_iof_thr=-1),
                              allowed_border=-1, pos_weight=-1, debug=False),
               test_cfg=RETINA_TEST_CFG)
    cfg.update(kw)
    return cfg


def build(cfg):
    torch.manual_seed(0)
    return build_head(copy.deepcopy(cfg))


def meta(h=32, w=32, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(32, 32, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def inputs(channels=8, batch=2):
    """Features of the two levels (requiring grad), two images' metas and boxes."""
    g = torch.Generator().manual_seed(1)
    feats = [torch.randn(batch, channels, 32 // s, 32 // s, generator=g, requires_grad=True)
             for s in STRIDES]
    gts = [torch.tensor([[4., 4., 20., 22.], [10., 2., 30., 30.]]),
           torch.tensor([[2., 6., 14., 16.]])][:batch]
    labels = [torch.tensor([0, 2]), torch.tensor([1])][:batch]
    return feats, [meta(), meta(28, 30)][:batch], gts, labels


def train_run(head, seed=3, with_labels=True):
    """Seeded losses (floats per level) and every gradient (parameters and the first input)."""
    feats, metas, gts, labels = inputs(head.in_channels)
    head.train()
    head.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    losses = head.forward_train(feats, metas, gts, labels if with_labels else None)
    sum(sum(v) for v in losses.values()).backward()
    grads = {n: p.grad.clone() for n, p in head.named_parameters()}
    grads['feat0'] = feats[0].grad.clone()
    return {k: [float(x.detach()) for x in v] for k, v in losses.items()}, grads
