"""mmdet 2.x ``MaskScoringRoIHead`` (Mask Scoring R-CNN): a :class:`StandardRoIHead` with a
:class:`~ckptzoo.models.roi_heads.mask_heads.MaskIoUHead` that learns each positive mask's IoU
(``loss_mask_iou``, added to the mask losses) and at test scores every mask by its box score
times that IoU: per image ``(bbox_results, (segm_results, mask_scores))``.

Checkpoint units: ``bbox`` and ``mask`` as :class:`StandardRoIHead`, then ``mask_iou`` (the
whole MaskIoU head over the positives' mask features and predicted masks).
"""
import numpy as np
import torch

from ...core.bbox import bbox2roi
from ...registry import MODELS
from ..checkpointing import CheckpointUnit, unit_step
from .standard_roi_head import StandardRoIHead

__all__ = ['MaskScoringRoIHead']


@MODELS.register_module()
class MaskScoringRoIHead(StandardRoIHead):
    """Args: ``mask_iou_head`` (dict, required), then :class:`StandardRoIHead`'s (which needs
    a ``mask_head`` here). ``train_cfg`` also takes ``mask_thr_binary`` (the threshold the
    IoU targets binarise the predicted masks with)."""

    TRAIN_CFG_KEYS = StandardRoIHead.TRAIN_CFG_KEYS + ('mask_thr_binary', )

    def __init__(self, mask_iou_head, **kwargs):
        if mask_iou_head is None:
            raise ValueError('MaskScoringRoIHead needs a mask_iou_head config')
        if kwargs.get('mask_head') is None:
            raise ValueError('MaskScoringRoIHead needs a mask_head config (it scores masks)')
        super().__init__(**kwargs)
        self.mask_iou_head = MODELS.build(mask_iou_head)
        self.mask_iou_unit = CheckpointUnit.from_flag(kwargs.get('with_cp', False),
                                                      kwargs.get('cp_use_reentrant', False))

    def _checkpoint_steps(self):
        """``bbox``, ``mask``, then ``mask_iou``: each a chain of one step."""
        return super()._checkpoint_steps() + [[unit_step('mask_iou', self.mask_iou_unit,
                                                         self.mask_iou_head)]]

    def _mask_iou_forward(self, mask_feats, mask_pred):
        return self.mask_iou_unit(self.mask_iou_head, mask_feats, mask_pred,
                                  module=self.mask_iou_head)

    def _mask_forward_train(self, x, sampling_results, bbox_feats, gt_masks, img_metas):
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        mask_results = super()._mask_forward_train(x, sampling_results, bbox_feats, gt_masks,
                                                   img_metas)
        mask_pred = mask_results['mask_pred']
        pos_mask_pred = mask_pred[range(mask_pred.size(0)), pos_labels]
        mask_iou_pred = self._mask_iou_forward(mask_results['mask_feats'], pos_mask_pred)
        pos_mask_iou_pred = mask_iou_pred[range(mask_iou_pred.size(0)), pos_labels]
        mask_iou_targets = self.mask_iou_head.get_targets(
            sampling_results, gt_masks, pos_mask_pred, mask_results['mask_targets'],
            self.train_cfg)
        mask_results['loss_mask'].update(
            self.mask_iou_head.loss(pos_mask_iou_pred, mask_iou_targets))
        return mask_results

    def simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale=False):
        """Per image ``(segm_results, mask_scores)``: the masks as
        :meth:`StandardRoIHead.simple_test_mask`, and per class their scores (box score x
        predicted mask IoU)."""
        num_classes = self.mask_head.num_classes
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [([[] for _ in range(num_classes)], [[] for _ in range(num_classes)])
                    for _ in det_bboxes]
        ori_shapes = tuple(meta['ori_shape'] for meta in img_metas)
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if rescale and not isinstance(scale_factors[0], float):
            scale_factors = [s.to(det_bboxes[0].device) if isinstance(s, torch.Tensor)
                             else torch.from_numpy(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] * scale_factors[i] if rescale else det_bboxes[i]
                   for i in range(len(det_bboxes))]
        mask_results = self._mask_forward(x, bbox2roi(_bboxes))
        mask_pred = mask_results['mask_pred']
        labels = torch.cat(det_labels)
        mask_iou_pred = self._mask_iou_forward(mask_results['mask_feats'],
                                               mask_pred[range(labels.size(0)), labels])
        num_per_img = tuple(len(b) for b in _bboxes)
        mask_preds = mask_pred.split(num_per_img, 0)
        mask_iou_preds = mask_iou_pred.split(num_per_img, 0)
        results = []
        for i in range(len(det_bboxes)):
            if det_bboxes[i].shape[0] == 0:
                results.append(([[] for _ in range(num_classes)],
                                [[] for _ in range(num_classes)]))
                continue
            segms = self.mask_head.get_seg_masks(mask_preds[i], _bboxes[i], det_labels[i],
                                                 self.test_cfg, ori_shapes[i],
                                                 scale_factors[i], rescale)
            scores = self.mask_iou_head.get_mask_scores(mask_iou_preds[i], det_bboxes[i],
                                                        det_labels[i])
            results.append((segms, scores))
        return results
