"""mmdet 2.x ``GridRoIHead`` (Grid R-CNN): a :class:`StandardRoIHead` whose boxes are located
by a :class:`~ckptzoo.models.roi_heads.mask_heads.GridHead` (the box head only classifies:
``with_reg=False`` in mmdet's configs).

Training: after the box losses, the positives are jittered (each image's ``pos_bboxes``
replaced in place, so a mask head after it sees them jittered too, as mmdet), at most
``train_cfg.max_num_grid`` (192) of them drawn at random, and ``loss_grid`` added to the box
losses. Test: the detections' grid heatmaps refine each box (``GridHead.get_bboxes``).

Checkpoint units: ``bbox`` as :class:`StandardRoIHead`, then ``grid`` (the grid RoI
extraction, or only the head with a shared head, and the whole grid head), then ``mask``.
"""
import numpy as np
import torch

from ...core.bbox import bbox2result, bbox2roi
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from ..checkpointing import CheckpointUnit, unit_step
from .standard_roi_head import StandardRoIHead

__all__ = ['GridRoIHead']


@MODELS.register_module()
class GridRoIHead(StandardRoIHead):
    """Args: ``grid_roi_extractor`` (dict | None: None shares the box extractor),
    ``grid_head`` (dict, required), then :class:`StandardRoIHead`'s. ``train_cfg`` also takes
    ``pos_radius`` (of the target discs) and ``max_num_grid`` (default 192)."""

    TRAIN_CFG_KEYS = StandardRoIHead.TRAIN_CFG_KEYS + ('pos_radius', 'max_num_grid')

    def __init__(self, grid_roi_extractor, grid_head, **kwargs):
        if grid_head is None:
            raise ValueError('GridRoIHead needs a grid_head config')
        super().__init__(**kwargs)
        if grid_roi_extractor is not None:
            self.grid_roi_extractor = MODELS.build(grid_roi_extractor)
            self.share_grid_extractor = False
        else:
            self.grid_roi_extractor = self.bbox_roi_extractor
            self.share_grid_extractor = True
        self.grid_head = MODELS.build(grid_head)
        self.grid_unit = CheckpointUnit.from_flag(kwargs.get('with_cp', False),
                                                  kwargs.get('cp_use_reentrant', False))

    # ----------------------------------------------------------------------- checkpoint units
    def _grid_modules(self):
        return [self.grid_head] if self.with_shared_head \
            else [self.grid_roi_extractor, self.grid_head]

    def _checkpoint_steps(self):
        """``bbox``, ``grid``, then ``mask`` (with a mask head): each a chain of one step (a
        shared head's blocks first, as :class:`StandardRoIHead`)."""
        steps = super()._checkpoint_steps()
        fn = self.grid_head if self.with_shared_head else self._grid_forward_unit
        grid = [[unit_step('grid', self.grid_unit, fn, self._grid_modules())]]
        at = len(steps) - 1 if self.with_mask else len(steps)
        return steps[:at] + grid + steps[at:]

    def _grid_forward_unit(self, rois, sample_idx, *feats):
        grid_feats = self.grid_roi_extractor(list(feats), rois)
        if sample_idx is not None:
            grid_feats = grid_feats[sample_idx]
        pred = self.grid_head(grid_feats)
        return pred['fused'], pred['unfused']

    def _grid_forward(self, x, rois, sample_idx=None):
        """The grid heatmaps ``dict(fused, unfused)`` of ``rois`` (the rows ``sample_idx`` of
        them when given), through the ``grid`` unit."""
        feats = tuple(x[:self.grid_roi_extractor.num_inputs])
        if self.with_shared_head:
            grid_feats = self._shared_forward(self.grid_roi_extractor(list(feats), rois))
            if sample_idx is not None:
                grid_feats = grid_feats[sample_idx]
            pred = self.grid_unit(self.grid_head, grid_feats, module=self.grid_head)
            return pred
        fused, unfused = self.grid_unit(self._grid_forward_unit, rois, sample_idx, *feats,
                                        module=self._grid_modules())
        return dict(fused=fused, unfused=unfused)

    # ------------------------------------------------------------------------------ forward
    def _random_jitter(self, sampling_results, img_metas, amplitude=0.15):
        """Jitter each image's positives at random (centre by up to ``amplitude`` of the
        size, size by up to ``1 +- amplitude``), clipped to the image; in place."""
        for res, meta in zip(sampling_results, img_metas):
            bboxes = res.pos_bboxes
            offsets = bboxes.new_empty(bboxes.shape[0], 4).uniform_(-amplitude, amplitude)
            cxcy = (bboxes[:, 2:4] + bboxes[:, :2]) / 2
            wh = (bboxes[:, 2:4] - bboxes[:, :2]).abs()
            new_cxcy = cxcy + wh * offsets[:, :2]
            new_wh = wh * (1 + offsets[:, 2:])
            new = torch.cat([new_cxcy - new_wh / 2, new_cxcy + new_wh / 2], dim=1)
            max_shape = meta['img_shape']
            if max_shape is not None:
                new[:, 0::2].clamp_(min=0, max=max_shape[1] - 1)
                new[:, 1::2].clamp_(min=0, max=max_shape[0] - 1)
            res.pos_bboxes = new
        return sampling_results

    def forward_dummy(self, x, proposals):
        """cls_score, bbox_pred, the grid heatmaps of the first 100 RoIs (and their masks)."""
        rois = bbox2roi([proposals])
        bbox_results = self._bbox_forward(x, rois)
        outs = (bbox_results['cls_score'], bbox_results['bbox_pred'],
                self._grid_forward(x, rois[:100]))
        if self.with_mask:
            outs = outs + (self._mask_forward(x, rois[:100])['mask_pred'], )
        return outs

    def _bbox_forward_train(self, x, sampling_results, gt_bboxes, gt_labels, img_metas):
        bbox_results = super()._bbox_forward_train(x, sampling_results, gt_bboxes, gt_labels,
                                                   img_metas)
        sampling_results = self._random_jitter(sampling_results, img_metas)
        pos_rois = bbox2roi([res.pos_bboxes for res in sampling_results])
        if pos_rois.shape[0] == 0:  # GN takes no empty batch: no loss_grid, as mmdet
            return bbox_results
        max_num = cfg_get(self.train_cfg, 'max_num_grid', 192)
        num = pos_rois.shape[0]
        sample_idx = torch.randperm(num)[:min(num, max_num)]  # the order mmdet draws in
        grid_pred = self._grid_forward(x, pos_rois, sample_idx)
        grid_targets = self.grid_head.get_targets(sampling_results, self.train_cfg)
        bbox_results['loss_bbox'].update(
            self.grid_head.loss(grid_pred, grid_targets[sample_idx]))
        return bbox_results

    # --------------------------------------------------------------------------------- test
    def _empty_results(self, num_imgs):
        return [[np.zeros((0, 5), dtype=np.float32) for _ in range(self.bbox_head.num_classes)]
                for _ in range(num_imgs)]

    def simple_test(self, x, proposal_list, img_metas, proposals=None, rescale=False):
        """As :meth:`StandardRoIHead.simple_test`, each image's boxes refined by the grid
        head (the masks, if any, of the boxes before the refinement, as mmdet)."""
        if proposals is not None:
            raise ValueError('GridRoIHead.simple_test takes the proposals as proposal_list; '
                             'proposals= must be None')
        if not self.test_cfg:
            raise ValueError('GridRoIHead.simple_test needs test_cfg (score_thr, nms, '
                             f'max_per_img), got {self.test_cfg!r}')
        det_bboxes, det_labels = self.simple_test_bboxes(x, img_metas, proposal_list,
                                                         self.test_cfg, rescale=False)
        grid_rois = bbox2roi([det_bbox[:, :4] for det_bbox in det_bboxes])
        bbox_results = self._empty_results(len(det_bboxes))
        if grid_rois.shape[0] != 0:
            self.grid_head.test_mode = True
            fused = self._grid_forward(x, grid_rois)['fused']
            fused = fused.split(tuple(len(d) for d in det_bboxes), 0)
            for i, meta in enumerate(img_metas):
                if det_bboxes[i].shape[0] == 0:
                    continue
                det_bbox = self.grid_head.get_bboxes(det_bboxes[i], fused[i], [meta])
                if rescale:
                    det_bbox[:, :4] /= det_bbox.new_tensor(meta['scale_factor'])
                bbox_results[i] = bbox2result(det_bbox, det_labels[i],
                                              self.bbox_head.num_classes)
        if not self.with_mask:
            return bbox_results
        segm_results = self.simple_test_mask(x, img_metas, det_bboxes, det_labels,
                                             rescale=rescale)
        return list(zip(bbox_results, segm_results))
