"""mmdet 2.x ``PointRendRoIHead`` (PointRend, Kirillov et al. 2020): a
:class:`StandardRoIHead` whose coarse mask (``CoarseMaskHead``) a ``MaskPointHead`` refines at
chosen points from fine-grained FPN features.

Training adds ``loss_point`` (to the mask losses) on ``num_points`` points per positive, chosen
by importance sampling (``oversample_ratio``, ``importance_sample_ratio``) from torch's
generator, in mmdet's order. At test the coarse mask is upsampled ``subdivision_steps`` times
by ``scale_factor`` and, each time, its ``subdivision_num_points`` most uncertain cells are
replaced by the point head's logits.

Checkpoint units: ``bbox`` and ``mask`` as :class:`StandardRoIHead`, then ``point`` (the
fine-grained point features and the whole point head). The random point draws happen before
the ``point`` unit, so no recompute draws again.
"""
import numpy as np
import torch
import torch.nn.functional as F

from ...core.bbox import bbox2roi, bbox_mapping
from ...core.post_processing import aug_flip, merge_aug_masks
from ...ops import point_sample, rel_roi_point_to_rel_img_point
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointUnit, unit_step
from .standard_roi_head import StandardRoIHead

__all__ = ['PointRendRoIHead']


@MODELS.register_module()
class PointRendRoIHead(StandardRoIHead):
    """Args: ``point_head`` (dict, required), then :class:`StandardRoIHead`'s (a box and a
    mask branch are both needed). ``train_cfg`` also takes ``num_points``,
    ``oversample_ratio``, ``importance_sample_ratio``; ``test_cfg`` ``subdivision_steps``,
    ``subdivision_num_points``, ``scale_factor``."""

    TRAIN_CFG_KEYS = StandardRoIHead.TRAIN_CFG_KEYS + ('num_points', 'oversample_ratio',
                                                       'importance_sample_ratio')
    TEST_CFG_KEYS = StandardRoIHead.TEST_CFG_KEYS + ('subdivision_steps',
                                                     'subdivision_num_points', 'scale_factor')

    def __init__(self, point_head, *args, **kwargs):
        if kwargs.get('mask_head') is None:
            raise ValueError('PointRendRoIHead needs a mask_head config (the coarse mask)')
        super().__init__(*args, **kwargs)
        self.init_point_head(point_head)
        self.point_unit = CheckpointUnit.from_flag(kwargs.get('with_cp', False),
                                                   kwargs.get('cp_use_reentrant', False))

    def init_point_head(self, point_head):
        self.point_head = MODELS.build(point_head)

    def _checkpoint_steps(self):
        """``bbox``, ``mask``, then ``point``: each a chain of one step."""
        return super()._checkpoint_steps() + [[unit_step('point', self.point_unit,
                                                         self._point_forward_unit,
                                                         self.point_head)]]

    # ------------------------------------------------------------------------------ points
    def _get_fine_grained_point_feats(self, x, rois, rel_roi_points, img_metas=None):
        """``(n, C * levels, p)``: every mask-extractor level read at each RoI's points
        (``x`` holds the images of the RoIs' indices; ``img_metas`` is unused, kept for
        mmdet's signature)."""
        fine_grained = []
        for idx in range(self.mask_roi_extractor.num_inputs):
            feats = x[idx]
            spatial_scale = 1. / float(self.mask_roi_extractor.featmap_strides[idx])
            point_feats = []
            for batch_ind in range(feats.size(0)):
                feat = feats[batch_ind].unsqueeze(0)
                inds = rois[:, 0].long() == batch_ind
                if inds.any():
                    rel_img_points = rel_roi_point_to_rel_img_point(
                        rois[inds], rel_roi_points[inds], feat.shape[2:],
                        spatial_scale).unsqueeze(0)
                    point_feats.append(point_sample(feat, rel_img_points).squeeze(0)
                                       .transpose(0, 1))
            if not point_feats:  # no RoI at all (mmdet fails on the empty concatenation)
                point_feats = [feats.new_zeros(0, feats.size(1), rel_roi_points.size(1))]
            fine_grained.append(torch.cat(point_feats, dim=0))
        return torch.cat(fine_grained, dim=1)

    def _point_forward_unit(self, rois, rel_roi_points, mask_pred, *feats):
        fine = self._get_fine_grained_point_feats(feats, rois, rel_roi_points)
        return self.point_head(fine, point_sample(mask_pred, rel_roi_points))

    def _point_forward(self, x, rois, rel_roi_points, mask_pred):
        """Point logits ``(n, classes, p)``, through the ``point`` unit."""
        feats = tuple(x[:self.mask_roi_extractor.num_inputs])
        return self.point_unit(self._point_forward_unit, rois, rel_roi_points, mask_pred, *feats,
                               module=self.point_head)

    # ---------------------------------------------------------------------------- training
    def _mask_forward_train(self, x, sampling_results, bbox_feats, gt_masks, img_metas):
        mask_results = super()._mask_forward_train(x, sampling_results, bbox_feats, gt_masks,
                                                   img_metas)
        mask_results['loss_mask'].update(self._mask_point_forward_train(
            x, sampling_results, mask_results['mask_pred'], gt_masks, img_metas))
        return mask_results

    def _mask_point_forward_train(self, x, sampling_results, mask_pred, gt_masks, img_metas):
        """``dict(loss_point=...)`` of the positives' importance-sampled points."""
        pos_labels = torch.cat([res.pos_gt_labels for res in sampling_results])
        rel_roi_points = self.point_head.get_roi_rel_points_train(mask_pred, pos_labels,
                                                                  cfg=self.train_cfg)
        rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        mask_point_pred = self._point_forward(x, rois, rel_roi_points, mask_pred)
        mask_point_target = self.point_head.get_targets(rois, rel_roi_points, sampling_results,
                                                        gt_masks, self.train_cfg)
        return self.point_head.loss(mask_point_pred, mask_point_target, pos_labels)

    # -------------------------------------------------------------------------------- test
    def _mask_point_forward_test(self, x, rois, label_pred, mask_pred, img_metas=None):
        """The coarse ``mask_pred`` upsampled ``subdivision_steps`` times, its most uncertain
        cells replaced by point logits each time (steps whose every cell would be a point are
        skipped, but the last)."""
        cfg = self.test_cfg
        steps = cfg_get(cfg, 'subdivision_steps')
        scale = cfg_get(cfg, 'scale_factor')
        num_points = cfg_get(cfg, 'subdivision_num_points')
        refined = mask_pred.clone()
        for step in range(steps):
            refined = F.interpolate(refined, scale_factor=scale, mode='bilinear',
                                    align_corners=False)
            num_rois, channels, height, width = refined.shape
            if num_points >= scale**2 * height * width and step < steps - 1:
                continue
            point_indices, rel_roi_points = self.point_head.get_roi_rel_points_test(
                refined, label_pred, cfg=cfg)
            point_pred = self._point_forward(x, rois, rel_roi_points, mask_pred)
            point_indices = point_indices.unsqueeze(1).expand(-1, channels, -1)
            refined = refined.reshape(num_rois, channels, height * width)
            refined = refined.scatter_(2, point_indices, point_pred)
            refined = refined.view(num_rois, channels, height, width)
        return refined

    def simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale=False):
        """Per image, the refined masks of its detections (``get_seg_masks``)."""
        num_classes = self.mask_head.num_classes
        if all(det_bbox.shape[0] == 0 for det_bbox in det_bboxes):
            return [[[] for _ in range(num_classes)] for _ in det_bboxes]
        ori_shapes = tuple(meta['ori_shape'] for meta in img_metas)
        scale_factors = [meta['scale_factor'] for meta in img_metas]
        if isinstance(scale_factors[0], float):
            scale_factors = [np.full(4, s, dtype=np.float32) for s in scale_factors]
        _bboxes = [det_bboxes[i][:, :4] for i in range(len(det_bboxes))]
        if rescale:
            scale_factors = [s.to(det_bboxes[0].device) if isinstance(s, torch.Tensor)
                             else torch.from_numpy(np.asarray(s)).to(det_bboxes[0].device)
                             for s in scale_factors]
            _bboxes = [_bboxes[i] * scale_factors[i] for i in range(len(_bboxes))]
        mask_rois = bbox2roi(_bboxes)
        mask_pred = self._mask_forward(x, mask_rois)['mask_pred']
        num_per_img = [len(det_bbox) for det_bbox in det_bboxes]
        mask_preds = mask_pred.split(num_per_img, 0)
        mask_rois = mask_rois.split(num_per_img, 0)
        segm_results = []
        for i in range(len(det_bboxes)):
            if det_bboxes[i].shape[0] == 0:
                segm_results.append([[] for _ in range(num_classes)])
                continue
            x_i = [level[[i]] for level in x]
            rois_i = mask_rois[i].clone()
            rois_i[:, 0] = 0  # the image's features alone
            mask_pred_i = self._mask_point_forward_test(x_i, rois_i, det_labels[i],
                                                        mask_preds[i], [img_metas])
            segm_results.append(self.mask_head.get_seg_masks(
                mask_pred_i, _bboxes[i], det_labels[i], self.test_cfg, ori_shapes[i],
                scale_factors[i], rescale))
        return segm_results

    def aug_test_mask(self, feats, img_metas, det_bboxes, det_labels, rescale=True):
        """As :meth:`StandardRoIHead.aug_test_mask`, each view's coarse masks refined first
        (mmdet pastes into the original image, ``rescale``; without it, into the first
        view's scale)."""
        if det_bboxes.shape[0] == 0:
            return [[] for _ in range(self.mask_head.num_classes)]
        aug_masks = []
        for x, aug_metas in zip(feats, img_metas):
            flip, direction = aug_flip(aug_metas)
            meta = aug_metas[0]
            rois = bbox2roi([bbox_mapping(det_bboxes[:, :4], meta['img_shape'],
                                          meta['scale_factor'], flip,
                                          direction or 'horizontal')])
            mask_pred = self._mask_forward(x, rois)['mask_pred']
            mask_pred = self._mask_point_forward_test(x, rois, det_labels, mask_pred, aug_metas)
            aug_masks.append(mask_pred.sigmoid().cpu().numpy())
        merged_masks = merge_aug_masks(aug_masks, img_metas, self.test_cfg)
        ori_shape = img_metas[0][0]['ori_shape']
        if rescale:
            bboxes, scale_factor = det_bboxes, det_bboxes.new_ones(4)
        else:
            scale_factor = det_bboxes.new_tensor(img_metas[0][0]['scale_factor']).expand(4)
            bboxes = det_bboxes[:, :4] * scale_factor
        return self.mask_head.get_seg_masks(merged_masks, bboxes, det_labels, self.test_cfg,
                                            ori_shape, scale_factor=scale_factor, rescale=False)
