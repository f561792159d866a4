"""Shared pieces of the RetinaNet-variant head tests (RetinaSepBNHead, FreeAnchor, PISA, FSAF,
YOLOF): tiny head configs over two pyramid levels, inputs, and a seeded loss + backward that
returns every gradient (the every-checkpoint-mode comparisons)."""
import numpy as np
import torch

from ckptzoo.registry import build_head

TRAIN_CFG = dict(assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.5, neg_iou_thr=0.4,
                               min_pos_iou=0, ignore_iof_thr=-1),
                 allowed_border=-1, pos_weight=-1, debug=False)
TEST_CFG = dict(nms_pre=1000, min_bbox_size=0, score_thr=0.05,
                nms=dict(type='nms', iou_threshold=0.5), max_per_img=100)
STRIDES = (8, 16)


def retina_head_cfg(**kw):
    cfg = dict(type='RetinaHead', num_classes=3, in_channels=8, stacked_convs=2, feat_channels=8,
               anchor_generator=dict(type='AnchorGenerator', octave_base_scale=4,
                                     scales_per_octave=2, ratios=[0.5, 1.0],
                                     strides=list(STRIDES)),
               bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0] * 4,
                               target_stds=[1.0] * 4),
               loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                             loss_weight=1.0),
               loss_bbox=dict(type='L1Loss', loss_weight=1.0),
               train_cfg=TRAIN_CFG, test_cfg=TEST_CFG)
    cfg.update(kw)
    return cfg


def build(cfg, seed=0):
    torch.manual_seed(seed)
    return build_head(cfg)


def meta(h=64, w=64, scale=1.0):
    return dict(img_shape=(h, w, 3), pad_shape=(64, 64, 3), ori_shape=(h, w, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=False)


def inputs(channels=8, strides=STRIDES, size=64, empty_second=False):
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(2, channels, size // s, size // s, generator=g).requires_grad_()
             for s in strides]
    gt_bboxes = [torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                 torch.tensor([[5., 5., 52., 52.]])]
    gt_labels = [torch.tensor([0, 2]), torch.tensor([1])]
    if empty_second:
        gt_bboxes[1], gt_labels[1] = torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
    return feats, [meta(), meta(56, 60)], gt_bboxes, gt_labels


def loss_and_grads(head, seed=5, **input_kw):
    """Seeded ``forward_train`` + backward: ``(losses as floats, grads incl. the inputs')``."""
    head.zero_grad(set_to_none=True)
    feats, metas, gt_bboxes, gt_labels = inputs(**input_kw)
    torch.manual_seed(seed)
    losses = head.forward_train(feats, metas, gt_bboxes, gt_labels)
    flat = {k: (v if isinstance(v, (list, tuple)) else [v]) for k, v in losses.items()}
    sum(sum(x.sum() for x in v) for v in flat.values()).backward()
    grads = {n: p.grad.clone() for n, p in head.named_parameters() if p.grad is not None}
    grads.update({f'feat{i}': f.grad.clone() for i, f in enumerate(feats)})
    buffers = {n: b.clone() for n, b in head.named_buffers()}
    return {k: [float(x.detach()) for x in v] for k, v in flat.items()}, grads, buffers


def assert_modes_exact(make_head, mode, **input_kw):
    """``make_head()`` twice: the plain run and the run with every unit in ``mode`` give the
    same losses, gradients and buffers, bit for bit."""
    ref = loss_and_grads(make_head(), **input_kw)
    head = make_head()
    head.set_checkpoint_plan({'*': mode})
    got = loss_and_grads(head, **input_kw)
    assert got[0] == ref[0]
    assert got[1].keys() == ref[1].keys()
    for k in ref[1]:
        assert torch.equal(got[1][k], ref[1][k]), k
    for k in ref[2]:
        assert torch.equal(got[2][k], ref[2][k]), k
    return head
