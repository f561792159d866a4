"""mmdet 2.x ``DynamicRoIHead`` (Dynamic R-CNN, Zhang et al. 2020): the box assigner's IoU
threshold and the SmoothL1 ``beta`` follow the training statistics.

Every iteration records the ``iou_topk``-th largest proposal IoU of each image (their mean)
and the ``beta_topk * num_imgs``-th smallest absolute centre-delta target of the positives;
every ``update_iter_interval`` iterations the assigner's ``pos_iou_thr`` / ``neg_iou_thr`` /
``min_pos_iou`` become ``max(initial_iou, mean IoU)`` and ``loss_bbox.beta`` becomes
``min(initial_beta, median target)`` (kept when that median is below 1e-15). The histories are
plain attributes, as mmdet's (not in the state dict).

Fixes over mmdet, which leave its results otherwise equal: an image without proposals adds no
IoU, and a batch without positives no beta (mmdet failed on both); an interval without any
beta keeps the beta.

Checkpoint units: :class:`StandardRoIHead`'s.
"""
import numpy as np
import torch

from ...core.bbox import bbox2roi
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from ..losses import SmoothL1Loss
from .standard_roi_head import StandardRoIHead

__all__ = ['DynamicRoIHead']

EPS = 1e-15
_DYNAMIC_KEYS = ('iou_topk', 'beta_topk', 'update_iter_interval', 'initial_iou', 'initial_beta')


@MODELS.register_module()
class DynamicRoIHead(StandardRoIHead):
    """Args: :class:`StandardRoIHead`'s; ``train_cfg`` also needs ``dynamic_rcnn`` (``iou_topk``,
    ``beta_topk``, ``update_iter_interval``, ``initial_iou``, ``initial_beta``). The box head's
    ``loss_bbox`` must be a ``SmoothL1Loss``."""

    TRAIN_CFG_KEYS = StandardRoIHead.TRAIN_CFG_KEYS + ('dynamic_rcnn', )

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(self.bbox_head.loss_bbox, SmoothL1Loss):
            raise TypeError(f'DynamicRoIHead needs a SmoothL1Loss loss_bbox (its beta is '
                            f'updated), got {type(self.bbox_head.loss_bbox).__name__}')
        if self.train_cfg:
            dynamic = cfg_get(self.train_cfg, 'dynamic_rcnn')
            missing = [k for k in _DYNAMIC_KEYS if cfg_get(dynamic or {}, k) is None]
            if missing:
                raise ValueError(f'DynamicRoIHead train_cfg.dynamic_rcnn needs {missing}, got '
                                 f'{dynamic!r}')
        self.iou_history = []
        self.beta_history = []

    def _dynamic_cfg(self, key):
        return cfg_get(cfg_get(self.train_cfg, 'dynamic_rcnn'), key)

    def forward_train(self, x, img_metas, proposal_list, gt_bboxes, gt_labels,
                      gt_bboxes_ignore=None, gt_masks=None, **kwargs):
        """:meth:`StandardRoIHead.forward_train`'s losses; records the IoU statistics and
        updates the hyperparameters every ``update_iter_interval`` calls."""
        if not self.train_cfg:
            raise ValueError('DynamicRoIHead.forward_train needs train_cfg, got '
                             f'{self.train_cfg!r}')
        if self.with_mask and gt_masks is None:
            raise ValueError('DynamicRoIHead with a mask head needs gt_masks to train')
        num_imgs = len(img_metas)
        if gt_bboxes_ignore is None:
            gt_bboxes_ignore = [None] * num_imgs
        sampling_results, cur_iou = [], []
        for i in range(num_imgs):
            assign_result = self.bbox_assigner.assign(proposal_list[i], gt_bboxes[i],
                                                      gt_bboxes_ignore[i], gt_labels[i])
            sampling_results.append(self.bbox_sampler.sample(
                assign_result, proposal_list[i], gt_bboxes[i], gt_labels[i],
                feats=[lvl_feat[i][None] for lvl_feat in x]))
            overlaps = assign_result.max_overlaps
            iou_topk = min(self._dynamic_cfg('iou_topk'), len(overlaps))
            if iou_topk > 0:
                cur_iou.append(torch.topk(overlaps, iou_topk)[0][-1].item())
        if cur_iou:
            self.iou_history.append(np.mean(cur_iou))
        losses = dict()
        bbox_results = self._bbox_forward_train(x, sampling_results, gt_bboxes, gt_labels,
                                                img_metas)
        losses.update(bbox_results['loss_bbox'])
        if self.with_mask:
            mask_results = self._mask_forward_train(x, sampling_results,
                                                    bbox_results['bbox_feats'], gt_masks,
                                                    img_metas)
            losses.update(mask_results['loss_mask'])
        if cur_iou and len(self.iou_history) % self._dynamic_cfg('update_iter_interval') == 0:
            self.update_hyperparameters()
        return losses

    def _bbox_forward_train(self, x, sampling_results, gt_bboxes, gt_labels, img_metas):
        rois = bbox2roi([res.bboxes for res in sampling_results])
        bbox_results = self._bbox_forward(x, rois)
        bbox_targets = self.bbox_head.get_targets(sampling_results, gt_bboxes, gt_labels,
                                                  self.train_cfg)
        pos_inds = bbox_targets[3][:, 0].nonzero().squeeze(1)
        num_pos = len(pos_inds)
        if num_pos > 0:
            cur_target = bbox_targets[2][pos_inds, :2].abs().mean(dim=1)
            beta_topk = min(self._dynamic_cfg('beta_topk') * len(img_metas), num_pos)
            self.beta_history.append(torch.kthvalue(cur_target, beta_topk)[0].item())
        loss_bbox = self.bbox_head.loss(bbox_results['cls_score'], bbox_results['bbox_pred'],
                                        rois, *bbox_targets)
        bbox_results.update(loss_bbox=loss_bbox)
        return bbox_results

    def update_hyperparameters(self):
        """Set the assigner's IoU thresholds and the SmoothL1 beta from the histories, and
        clear them; returns ``(iou_thr, beta)``."""
        new_iou_thr = max(self._dynamic_cfg('initial_iou'), np.mean(self.iou_history))
        self.iou_history = []
        self.bbox_assigner.pos_iou_thr = new_iou_thr
        self.bbox_assigner.neg_iou_thr = new_iou_thr
        self.bbox_assigner.min_pos_iou = new_iou_thr
        if not self.beta_history or np.median(self.beta_history) < EPS:
            new_beta = self.bbox_head.loss_bbox.beta
        else:
            new_beta = min(self._dynamic_cfg('initial_beta'), np.median(self.beta_history))
        self.beta_history = []
        self.bbox_head.loss_bbox.beta = new_beta
        return new_iou_thr, new_beta
