"""Tiny detector configs (RPN, two-stage), batches and mmdet state-dict layouts."""
import copy

import numpy as np
import torch

from ckptzoo.registry import build_detector


RPN_TRAIN_CFG = dict(
    assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.7, neg_iou_thr=0.3, min_pos_iou=0.3,
                  match_low_quality=True, ignore_iof_thr=-1),
    sampler=dict(type='RandomSampler', num=256, pos_fraction=0.5, neg_pos_ub=-1,
                 add_gt_as_proposals=False),
    allowed_border=-1, pos_weight=-1, debug=False)


RPN_TEST_CFG = dict(nms_pre=1000, max_per_img=1000, nms=dict(type='nms', iou_threshold=0.7),
                    min_bbox_size=0)


def resnet_cfg(depth=18, base_channels=8, **kw):
    return dict(type='ResNet', depth=depth, base_channels=base_channels,
                out_indices=(0, 1, 2, 3), norm_cfg=dict(type='BN', requires_grad=True),
                norm_eval=False, style='pytorch', **kw)


def rpn_head_cfg(channels=16, **kw):
    return dict(type='RPNHead', in_channels=channels, feat_channels=channels,
                anchor_generator=dict(type='AnchorGenerator', scales=[8],
                                      ratios=[0.5, 1.0, 2.0], strides=[4, 8, 16, 32, 64]),
                bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[.0, .0, .0, .0],
                                target_stds=[1.0, 1.0, 1.0, 1.0]),
                loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                loss_bbox=dict(type='L1Loss', loss_weight=1.0), **kw)


def rpn_cfg(backbone_kw=None, head_kw=None):
    return dict(type='RPN', backbone=resnet_cfg(**(backbone_kw or {})),
                neck=dict(type='FPN', in_channels=[8, 16, 32, 64], out_channels=16,
                          num_outs=5),
                rpn_head=rpn_head_cfg(**(head_kw or {})),
                train_cfg=dict(rpn=RPN_TRAIN_CFG), test_cfg=dict(rpn=RPN_TEST_CFG))


def build_rpn(**kw):
    torch.manual_seed(0)
    return build_detector(rpn_cfg(**kw))


def img_meta(h=64, w=64, scale=1.0, flip=False):
    return dict(filename='x.jpg', ori_filename='x.jpg', ori_shape=(h, w, 3),
                img_shape=(h, w, 3), pad_shape=(64, 64, 3),
                scale_factor=np.full(4, scale, dtype=np.float32), flip=flip,
                flip_direction='horizontal' if flip else None,
                img_norm_cfg=dict(mean=np.zeros(3), std=np.ones(3), to_rgb=True))


def rpn_batch():
    g = torch.Generator().manual_seed(0)
    return dict(img=torch.randn(2, 3, 64, 64, generator=g),
                img_metas=[img_meta(), img_meta(56, 60)],
                gt_bboxes=[torch.tensor([[8., 10., 40., 50.], [30., 4., 60., 30.]]),
                           torch.zeros(0, 4)])


def resnet50_fpn_keys():
    """``{key: shape}`` of mmdet 2.x's ResNet-50 (pytorch style) and FPN (256 channels, 4
    lateral and 4 output convs), written from mmdet's module structure."""
    keys = {}

    def bn(name, c):
        keys.update({f'{name}.weight': (c, ), f'{name}.bias': (c, ),
                     f'{name}.running_mean': (c, ), f'{name}.running_var': (c, ),
                     f'{name}.num_batches_tracked': ()})

    keys['backbone.conv1.weight'] = (64, 3, 7, 7)
    bn('backbone.bn1', 64)
    inplanes = 64
    for stage, blocks in enumerate((3, 4, 6, 3), 1):
        planes = 64 * 2**(stage - 1)
        for b in range(blocks):
            p = f'backbone.layer{stage}.{b}'
            keys[f'{p}.conv1.weight'] = (planes, inplanes, 1, 1)
            bn(f'{p}.bn1', planes)
            keys[f'{p}.conv2.weight'] = (planes, planes, 3, 3)
            bn(f'{p}.bn2', planes)
            keys[f'{p}.conv3.weight'] = (planes * 4, planes, 1, 1)
            bn(f'{p}.bn3', planes * 4)
            if b == 0:
                keys[f'{p}.downsample.0.weight'] = (planes * 4, inplanes, 1, 1)
                bn(f'{p}.downsample.1', planes * 4)
            inplanes = planes * 4
    for i, c in enumerate((256, 512, 1024, 2048)):
        keys[f'neck.lateral_convs.{i}.conv.weight'] = (256, c, 1, 1)
        keys[f'neck.lateral_convs.{i}.conv.bias'] = (256, )
        keys[f'neck.fpn_convs.{i}.conv.weight'] = (256, 256, 3, 3)
        keys[f'neck.fpn_convs.{i}.conv.bias'] = (256, )
    return keys


RPN_HEAD_KEYS = {'rpn_head.rpn_conv.weight': (256, 256, 3, 3), 'rpn_head.rpn_conv.bias': (256, ),
                 'rpn_head.rpn_cls.weight': (3, 256, 1, 1), 'rpn_head.rpn_cls.bias': (3, ),
                 'rpn_head.rpn_reg.weight': (12, 256, 1, 1), 'rpn_head.rpn_reg.bias': (12, )}


def load_strictly(model, expected):
    """``model`` has exactly the ``expected`` keys and shapes: a state dict made from them
    alone loads with ``strict=True``."""
    state = model.state_dict()
    assert sorted(state) == sorted(expected)
    for key, shape in expected.items():
        assert tuple(state[key].shape) == shape, key
    g = torch.Generator().manual_seed(0)
    ckpt = {k: torch.randn(shape, generator=g) if shape else torch.tensor(3)
            for k, shape in expected.items()}
    model.load_state_dict(ckpt, strict=True)
    torch.testing.assert_close(model.state_dict()['rpn_head.rpn_cls.weight'],
                               ckpt['rpn_head.rpn_cls.weight'])


def overfit(model, batch, steps=10):
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        out = model.train_step(copy.deepcopy(batch), opt)
        opt.zero_grad()
        out['loss'].backward()
        opt.step()
        losses.append(out['log_vars']['loss'])
    return losses


def det_batch():
    batch = rpn_batch()
    batch['gt_labels'] = [torch.tensor([0, 2]), torch.zeros(0, dtype=torch.long)]
    return batch


def _assigner(thr):
    return dict(type='MaxIoUAssigner', pos_iou_thr=thr, neg_iou_thr=thr, min_pos_iou=thr,
                match_low_quality=False, ignore_iof_thr=-1)


CASCADE_STDS = ([0.1, 0.1, 0.2, 0.2], [0.05, 0.05, 0.1, 0.1], [0.033, 0.033, 0.067, 0.067])


def cascade_cfg(num_classes=3, feat=16, fc=32, with_mask=True, num_stages=3,
                class_agnostic=True, rcnn_num=32, thrs=(0.5, 0.6, 0.7), share_extractor=False,
                score_thr=0.05, max_per_img=100, depth=18, base_channels=8, mask_convs=2):
    """mmdet's cascade_(mask_)rcnn_r50_fpn.py, its sizes as arguments (residual branches not
    zero-initialised, so that every tiny-model parameter gets a gradient)."""
    in_channels = [base_channels * 2**i * (4 if depth >= 50 else 1) for i in range(4)]

    def extractor(size):
        return dict(type='SingleRoIExtractor',
                    roi_layer=dict(type='RoIAlign', output_size=size, sampling_ratio=0),
                    out_channels=feat, featmap_strides=[4, 8, 16, 32])

    def bbox_head(stds):
        return dict(type='Shared2FCBBoxHead', in_channels=feat, fc_out_channels=fc,
                    roi_feat_size=7, num_classes=num_classes,
                    bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0., 0., 0., 0.],
                                    target_stds=stds),
                    reg_class_agnostic=class_agnostic,
                    loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                    loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0))
    roi_head = dict(type='CascadeRoIHead', num_stages=num_stages,
                    stage_loss_weights=[1, 0.5, 0.25][:num_stages],
                    bbox_roi_extractor=extractor(7),
                    bbox_head=[bbox_head(s) for s in CASCADE_STDS[:num_stages]])
    rcnn = [dict(assigner=_assigner(t),
                 sampler=dict(type='RandomSampler', num=rcnn_num, pos_fraction=0.25,
                              neg_pos_ub=-1, add_gt_as_proposals=True),
                 mask_size=28, pos_weight=-1, debug=False) for t in thrs[:num_stages]]
    if with_mask:
        roi_head.update(mask_head=dict(type='FCNMaskHead', num_convs=mask_convs,
                                       in_channels=feat, conv_out_channels=feat,
                                       num_classes=num_classes,
                                       loss_mask=dict(type='CrossEntropyLoss', use_mask=True,
                                                      loss_weight=1.0)))
        if not share_extractor:
            roi_head.update(mask_roi_extractor=extractor(14))
    return dict(
        type='CascadeRCNN',
        backbone=dict(type='ResNet', depth=depth, base_channels=base_channels, num_stages=4,
                      out_indices=(0, 1, 2, 3), norm_cfg=dict(type='BN', requires_grad=True),
                      norm_eval=False, style='pytorch', zero_init_residual=depth >= 50),
        neck=dict(type='FPN', in_channels=in_channels, out_channels=feat, num_outs=5),
        rpn_head=dict(rpn_head_cfg(feat), loss_bbox=dict(type='SmoothL1Loss', beta=1.0 / 9.0,
                                                          loss_weight=1.0)),
        roi_head=roi_head,
        train_cfg=dict(rpn=dict(RPN_TRAIN_CFG, sampler=dict(RPN_TRAIN_CFG['sampler'], num=64)),
                       rpn_proposal=dict(nms_pre=200, max_per_img=100,
                                         nms=dict(type='nms', iou_threshold=0.7),
                                         min_bbox_size=0),
                       rcnn=rcnn),
        test_cfg=dict(rpn=RPN_TEST_CFG,
                      rcnn=dict(score_thr=score_thr, nms=dict(type='nms', iou_threshold=0.5),
                                max_per_img=max_per_img, mask_thr_binary=0.5)))


def htc_cfg(with_semantic=True, interleaved=True, mask_info_flow=True, semantic_fusion=None,
            seg_classes=5, **kw):
    """mmdet's htc(_without_semantic)_r50_fpn_1x_coco.py model at ``cascade_cfg``'s sizes:
    HTCMaskHead per stage (the first without conv_res), and with ``with_semantic`` a
    FusedSemanticHead fused at stride 8."""
    cfg = cascade_cfg(**kw)
    cfg['type'] = 'HybridTaskCascade'
    roi = cfg['roi_head']
    roi.update(type='HybridTaskCascadeRoIHead', interleaved=interleaved,
               mask_info_flow=mask_info_flow)
    feat = roi['bbox_roi_extractor']['out_channels']
    if 'mask_head' in roi:
        head = roi.pop('mask_head')
        roi['mask_head'] = [dict(head, type='HTCMaskHead', with_conv_res=i > 0)
                            for i in range(roi['num_stages'])]
    if with_semantic:
        roi.update(
            semantic_roi_extractor=dict(
                type='SingleRoIExtractor',
                roi_layer=dict(type='RoIAlign', output_size=14, sampling_ratio=0),
                out_channels=feat, featmap_strides=[8]),
            semantic_head=dict(type='FusedSemanticHead', num_ins=5, fusion_level=1,
                               num_convs=2, in_channels=feat, conv_out_channels=feat,
                               num_classes=seg_classes,
                               loss_seg=dict(type='CrossEntropyLoss', ignore_index=255,
                                             loss_weight=0.2)))
        if semantic_fusion is not None:
            roi['semantic_fusion'] = semantic_fusion
    return cfg
