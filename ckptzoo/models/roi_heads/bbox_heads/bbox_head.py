"""mmdet 2.x ``BBoxHead``: per-RoI classification (``num_classes`` + background) and
box regression, their training targets and losses, and the detections of one image.

Fixes over mmdet, which leave its results otherwise equal: without ``with_avg_pool`` the RoI
features are flattened before ``fc_cls`` / ``fc_reg`` (mmdet's plain ``BBoxHead`` passed
``[K, C, h, w]`` to them and failed); without a regression branch ``get_bboxes`` really clips
the RoIs to the image (mmdet's in-place clamp hit a copy).
"""
import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules.utils import _pair

from ....core.post_processing import multiclass_nms
from ....registry import MODELS, TASK_UTILS
from ....runner.fp16 import auto_fp16, force_fp32
from ....utils.cfg_get import cfg_get
from ...losses import accuracy
from ...utils import apply_init_cfg, build_linear_layer
from ...utils.pretrained import load_pretrained

__all__ = ['BBoxHead']


@MODELS.register_module()
class BBoxHead(nn.Module):
    """The simplest RoI box head: optional average pooling, then ``fc_cls`` and ``fc_reg``.

    Args (mmdet 2.x's):
        with_avg_pool (bool): average-pool the ``roi_feat_size`` features to 1x1 first.
        with_cls, with_reg (bool): build the classification / regression branch.
        roi_feat_size (int | tuple): spatial size of the RoI features.
        in_channels (int): channels of the RoI features.
        num_classes (int): foreground classes; label ``num_classes`` is background.
        bbox_coder (dict): box coder (default deltas with stds 0.1, 0.1, 0.2, 0.2).
        reg_class_agnostic (bool): one box per RoI instead of one per class.
        reg_decoded_bbox (bool): the regression loss compares decoded boxes (IoU losses).
        reg_predictor_cfg, cls_predictor_cfg (dict): ``dict(type='Linear')``.
        loss_cls, loss_bbox (dict): loss configs.
        init_cfg (dict | list | None): default Normal std 0.01 on ``fc_cls``, std 0.001 on
            ``fc_reg`` (mmdet's), applied at construction; ``Pretrained`` in ``init_weights``.
    """

    def __init__(self, with_avg_pool=False, with_cls=True, with_reg=True, roi_feat_size=7,
                 in_channels=256, num_classes=80,
                 bbox_coder=dict(type='DeltaXYWHBBoxCoder', clip_border=True,
                                 target_means=[0., 0., 0., 0.],
                                 target_stds=[0.1, 0.1, 0.2, 0.2]),
                 reg_class_agnostic=False, reg_decoded_bbox=False,
                 reg_predictor_cfg=dict(type='Linear'), cls_predictor_cfg=dict(type='Linear'),
                 loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                 loss_bbox=dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0),
                 init_cfg=None):
        super().__init__()
        if not (with_cls or with_reg):
            raise ValueError(f'{type(self).__name__} needs with_cls or with_reg')
        if not (isinstance(num_classes, numbers.Integral) and num_classes > 0):
            raise ValueError(f'num_classes must be a positive int, got {num_classes!r}')
        self.with_avg_pool = with_avg_pool
        self.with_cls = with_cls
        self.with_reg = with_reg
        self.roi_feat_size = _pair(roi_feat_size)
        self.roi_feat_area = self.roi_feat_size[0] * self.roi_feat_size[1]
        self.in_channels = in_channels
        self.num_classes = num_classes
        self.reg_class_agnostic = reg_class_agnostic
        self.reg_decoded_bbox = reg_decoded_bbox
        self.reg_predictor_cfg = reg_predictor_cfg
        self.cls_predictor_cfg = cls_predictor_cfg
        self.fp16_enabled = False
        self.bbox_coder = TASK_UTILS.build(bbox_coder)
        self.loss_cls = MODELS.build(loss_cls)
        self.loss_bbox = MODELS.build(loss_bbox)
        self._init_layers()
        self.init_cfg = self._default_init_cfg() if init_cfg is None else init_cfg
        apply_init_cfg(self, self.init_cfg)

    def _init_layers(self):
        in_channels = self.in_channels
        if self.with_avg_pool:
            self.avg_pool = nn.AvgPool2d(self.roi_feat_size)
        else:
            in_channels *= self.roi_feat_area
        if self.with_cls:
            self.fc_cls = build_linear_layer(self.cls_predictor_cfg, in_channels,
                                             self.cls_channels)
        if self.with_reg:
            self.fc_reg = build_linear_layer(self.reg_predictor_cfg, in_channels,
                                             4 if self.reg_class_agnostic
                                             else 4 * self.num_classes)

    def _default_init_cfg(self):
        return ([dict(type='Normal', std=0.01, override=dict(name='fc_cls'))]
                if self.with_cls else []) + \
            ([dict(type='Normal', std=0.001, override=dict(name='fc_reg'))]
             if self.with_reg else [])

    # The custom-classifier protocol of mmdet 2.x (a loss such as SeesawLoss declares it):
    # ``fc_cls`` gets ``loss_cls.get_cls_channels(num_classes)`` outputs, scores come from
    # ``loss_cls.get_activation`` and the accuracies from ``loss_cls.get_accuracy``.
    @property
    def custom_cls_channels(self):
        """Whether ``loss_cls`` sets the classifier's outputs (:attr:`cls_channels`)."""
        return getattr(self.loss_cls, 'custom_cls_channels', False)

    @property
    def custom_activation(self):
        """Whether ``loss_cls`` turns the raw scores into probabilities itself (mmdet's
        Seesaw loss); the cascade then takes its labels from ``get_activation``."""
        return getattr(self.loss_cls, 'custom_activation', False)

    @property
    def custom_accuracy(self):
        """Whether ``loss_cls`` computes its own accuracies (``get_accuracy``)."""
        return getattr(self.loss_cls, 'custom_accuracy', False)

    @property
    def cls_channels(self):
        """``fc_cls`` outputs: ``num_classes + 1``, or what a custom ``loss_cls`` asks."""
        return self.loss_cls.get_cls_channels(self.num_classes) \
            if self.custom_cls_channels else self.num_classes + 1

    def scores_of(self, cls_score):
        """Per-RoI class probabilities ``[K, num_classes + 1]`` (softmax, or the custom
        loss's activation; None for None)."""
        if cls_score is None:
            return None
        return self.loss_cls.get_activation(cls_score) if self.custom_cls_channels \
            else F.softmax(cls_score, dim=-1)

    def init_weights(self):
        """Load a ``Pretrained`` init_cfg; the other kinds were applied at construction."""
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained(self, self.init_cfg, type(self).__name__)

    @auto_fp16()
    def forward(self, x):
        """``x [K, C, h, w]`` -> ``(cls_score [K, num_classes + 1] | None,
        bbox_pred [K, 4 or 4 * num_classes] | None)``."""
        if self.with_avg_pool:
            x = self.avg_pool(x)
        x = x.flatten(1)
        cls_score = self.fc_cls(x) if self.with_cls else None
        bbox_pred = self.fc_reg(x) if self.with_reg else None
        return cls_score, bbox_pred

    # ------------------------------------------------------------------------------- targets
    def _get_target_single(self, pos_bboxes, neg_bboxes, pos_gt_bboxes, pos_gt_labels, cfg):
        """Targets of one image's sampled RoIs, positives first: labels (background
        ``num_classes`` for negatives), label weights (``pos_weight`` for positives when > 0,
        else 1), box targets and weights (positives only)."""
        num_pos, num_neg = pos_bboxes.size(0), neg_bboxes.size(0)
        num_samples = num_pos + num_neg
        labels = pos_bboxes.new_full((num_samples, ), self.num_classes, dtype=torch.long)
        label_weights = pos_bboxes.new_zeros(num_samples)
        bbox_targets = pos_bboxes.new_zeros(num_samples, 4)
        bbox_weights = pos_bboxes.new_zeros(num_samples, 4)
        if num_pos > 0:
            labels[:num_pos] = pos_gt_labels
            pos_weight = cfg_get(cfg, 'pos_weight', -1)
            label_weights[:num_pos] = 1.0 if pos_weight <= 0 else pos_weight
            bbox_targets[:num_pos, :] = pos_gt_bboxes if self.reg_decoded_bbox \
                else self.bbox_coder.encode(pos_bboxes, pos_gt_bboxes)
            bbox_weights[:num_pos, :] = 1
        if num_neg > 0:
            label_weights[-num_neg:] = 1.0
        return labels, label_weights, bbox_targets, bbox_weights

    def get_targets(self, sampling_results, gt_bboxes, gt_labels, rcnn_train_cfg, concat=True):
        """``(labels, label_weights, bbox_targets, bbox_weights)`` of every image's sampled
        RoIs (each image positives first, then negatives: the order of ``bbox2roi``),
        concatenated over images unless ``concat=False``. ``gt_bboxes`` and ``gt_labels`` are
        unused (the sampling results hold the matched ones), as in mmdet."""
        per_image = [self._get_target_single(res.pos_bboxes, res.neg_bboxes, res.pos_gt_bboxes,
                                             res.pos_gt_labels, rcnn_train_cfg)
                     for res in sampling_results]
        targets = tuple(list(t) for t in zip(*per_image)) if per_image else ([], [], [], [])
        if concat:
            targets = tuple(torch.cat(t, 0) for t in targets)
        return targets

    # ---------------------------------------------------------------------------------- loss
    @force_fp32(apply_to=('cls_score', 'bbox_pred'))
    def loss(self, cls_score, bbox_pred, rois, labels, label_weights, bbox_targets,
             bbox_weights, reduction_override=None):
        """mmdet 2.x's losses: ``loss_cls`` averaged over the RoIs with a label weight (at least
        1), ``acc`` (percent of RoIs classified right, background included), ``loss_bbox``
        over the positives' boxes of their class, averaged over *all* sampled RoIs."""
        losses = dict()
        if cls_score is not None:
            avg_factor = max(torch.sum(label_weights > 0).float().item(), 1.)
            if cls_score.numel() > 0:
                loss_cls = self.loss_cls(cls_score, labels, label_weights,
                                         avg_factor=avg_factor,
                                         reduction_override=reduction_override)
                if isinstance(loss_cls, dict):  # e.g. SeesawLoss's two terms
                    losses.update(loss_cls)
                else:
                    losses['loss_cls'] = loss_cls
                if self.custom_activation:  # mmdet keys custom accuracies on this flag
                    losses.update(self.loss_cls.get_accuracy(cls_score, labels))
                else:
                    losses['acc'] = accuracy(cls_score, labels)
        if bbox_pred is not None:
            pos_inds = (labels >= 0) & (labels < self.num_classes)
            if pos_inds.any():
                if self.reg_decoded_bbox:
                    bbox_pred = self.bbox_coder.decode(rois[:, 1:], bbox_pred)
                if self.reg_class_agnostic:
                    pos_bbox_pred = bbox_pred.view(bbox_pred.size(0), 4)[pos_inds]
                else:
                    pos_bbox_pred = bbox_pred.view(bbox_pred.size(0), -1, 4)[
                        pos_inds, labels[pos_inds]]
                losses['loss_bbox'] = self.loss_bbox(pos_bbox_pred, bbox_targets[pos_inds],
                                                     bbox_weights[pos_inds],
                                                     avg_factor=bbox_targets.size(0),
                                                     reduction_override=reduction_override)
            else:
                losses['loss_bbox'] = bbox_pred[pos_inds].sum()
        return losses

    # ----------------------------------------------------------------------------- inference
    @force_fp32(apply_to=('cls_score', 'bbox_pred'))
    def get_bboxes(self, rois, cls_score, bbox_pred, img_shape, scale_factor, rescale=False,
                   cfg=None):
        """One image's detections: scores (:meth:`scores_of`), boxes decoded from ``rois [K, 5]`` and
        clipped to ``img_shape``, divided by ``scale_factor`` when ``rescale``, then
        :func:`multiclass_nms` with ``cfg`` (``score_thr``, ``nms``, ``max_per_img``).

        Returns ``(det_bboxes [k, 5], det_labels [k])``; with ``cfg=None`` the boxes
        ``[K, 4 or 4 * num_classes]`` and scores ``[K, num_classes + 1]`` before NMS.
        """
        scores = self.scores_of(cls_score)
        if bbox_pred is not None:
            bboxes = self.bbox_coder.decode(rois[..., 1:], bbox_pred, max_shape=img_shape)
        else:
            bboxes = rois[:, 1:].clone()
            if img_shape is not None:
                bboxes[:, [0, 2]] = bboxes[:, [0, 2]].clamp(min=0, max=img_shape[1])
                bboxes[:, [1, 3]] = bboxes[:, [1, 3]].clamp(min=0, max=img_shape[0])
        if rescale and bboxes.size(0) > 0:
            scale_factor = bboxes.new_tensor(scale_factor)
            bboxes = (bboxes.view(bboxes.size(0), -1, 4) / scale_factor).view(
                bboxes.size(0), -1)
        if cfg is None:
            return bboxes, scores
        return multiclass_nms(bboxes, scores, cfg_get(cfg, 'score_thr'), cfg_get(cfg, 'nms'),
                              cfg_get(cfg, 'max_per_img', -1))

    # ------------------------------------------------------------------------------ cascade
    def refine_bboxes(self, rois, labels, bbox_preds, pos_is_gts, img_metas):
        """The next cascade stage's proposals, per image (mmdet 2.x's): each sampled RoI
        regressed by its label's deltas (:meth:`regress_by_class`), less the ground truths
        the sampler added as positives (``pos_is_gts``, positives coming first per image).

        Args:
            rois (Tensor): ``[n, 5]`` sampled RoIs of the batch (image index first).
            labels (Tensor): ``[n]`` the class whose deltas apply to each RoI.
            bbox_preds (Tensor): ``[n, 4]`` or ``[n, 4 * num_classes]``.
            pos_is_gts (list[Tensor]): per image, a flag per positive RoI.
            img_metas (list[dict]): per image (``img_shape`` clips the boxes).

        Returns:
            list[Tensor]: per image, ``[k, 4]`` boxes.
        """
        if rois.shape[0] and int(rois[:, 0].max()) >= len(img_metas):
            raise ValueError(f'rois name image {int(rois[:, 0].max())} of a batch of '
                             f'{len(img_metas)} img_metas')
        if len(pos_is_gts) != len(img_metas):
            raise ValueError(f'pos_is_gts needs one entry per image ({len(img_metas)}), got '
                             f'{len(pos_is_gts)}')
        bboxes_list = []
        for i, img_meta in enumerate(img_metas):
            inds = torch.nonzero(rois[:, 0] == i, as_tuple=False).squeeze(1)
            bboxes = self.regress_by_class(rois[inds, 1:], labels[inds], bbox_preds[inds],
                                           img_meta)
            keep = pos_is_gts[i].new_ones(inds.numel())
            keep[:len(pos_is_gts[i])] = 1 - pos_is_gts[i]
            bboxes_list.append(bboxes[keep.bool()])
        return bboxes_list

    @force_fp32(apply_to=('bbox_pred', ))
    def regress_by_class(self, rois, label, bbox_pred, img_meta):
        """``rois`` (``[n, 4]``, or ``[n, 5]`` whose image index is kept) moved by the deltas
        of class ``label`` (all of ``bbox_pred`` when class-agnostic), decoded with this
        head's coder and clipped to ``img_meta['img_shape']``."""
        if rois.dim() != 2 or rois.size(1) not in (4, 5):
            raise ValueError(f'regress_by_class takes rois of [n, 4] or [n, 5], got '
                             f'{tuple(rois.shape)}')
        if not self.reg_class_agnostic:
            label = label * 4
            inds = torch.stack((label, label + 1, label + 2, label + 3), 1)
            bbox_pred = torch.gather(bbox_pred, 1, inds)
        if bbox_pred.size(1) != 4:
            raise ValueError(f'regress_by_class needs 4 deltas per RoI, got '
                             f'{tuple(bbox_pred.shape)}')
        max_shape = img_meta['img_shape']
        if rois.size(1) == 4:
            return self.bbox_coder.decode(rois, bbox_pred, max_shape=max_shape)
        bboxes = self.bbox_coder.decode(rois[:, 1:], bbox_pred, max_shape=max_shape)
        return torch.cat((rois[:, [0]], bboxes), dim=1)
