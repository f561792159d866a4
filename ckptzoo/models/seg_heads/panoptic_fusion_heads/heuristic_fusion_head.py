"""mmdet 2.x ``HeuristicFusionHead`` (Panoptic FPN's fusion): instance masks are laid in order
of score, each keeping the pixels not taken yet unless more than ``mask_overlap`` of it is
taken; the remaining pixels get the semantic head's stuff label; stuff segments smaller than
``stuff_area_limit`` pixels become void (``num_classes``)."""
import torch

from ....evaluation.panoptic_utils import INSTANCE_OFFSET
from ....registry import MODELS
from ....utils.cfg_get import cfg_get
from .base_panoptic_fusion_head import BasePanopticFusionHead

__all__ = ['HeuristicFusionHead']


@MODELS.register_module()
class HeuristicFusionHead(BasePanopticFusionHead):
    """Args as mmdet 2.x (``num_things_classes``, ``num_stuff_classes``, ``test_cfg``,
    ``init_cfg``); ``test_cfg`` (the detector's ``test_cfg.panoptic``) needs
    ``mask_thr_binary``, ``mask_overlap``, ``stuff_area_limit`` at test time. No loss."""

    def __init__(self, num_things_classes=80, num_stuff_classes=53, test_cfg=None,
                 init_cfg=None, **kwargs):
        super().__init__(num_things_classes, num_stuff_classes, test_cfg, None, init_cfg,
                         **kwargs)

    def forward_train(self, gt_masks=None, gt_semantic_seg=None, **kwargs):
        """No training loss: ``{}``."""
        return dict()

    def _lay_masks(self, bboxes, labels, masks, overlap_thr=0.5):
        """``(id_map (H, W) int64, labels of the laid instances)``: instance ``j`` (1-based,
        in order of score) on its pixels, 0 elsewhere.

        Args:
            bboxes (Tensor): (K, 5) boxes with scores; labels (Tensor): (K, ).
            masks (Tensor): (K, H, W) bool.
        """
        id_map = torch.zeros(masks.shape[-2:], device=bboxes.device, dtype=torch.long)
        if bboxes.shape[0] == 0:
            return id_map, labels
        order = torch.argsort(-bboxes[:, -1])
        labels = labels[order]
        left_labels = []
        for idx, k in enumerate(order.tolist()):  # no reordered copy of the masks
            mask = masks[k]
            area = mask.sum()
            if area == 0:
                continue
            pasted = id_map > 0
            intersect = (mask & pasted).sum()
            if intersect / (area + 1e-5) > overlap_thr:
                continue
            id_map[mask & ~pasted] = len(left_labels) + 1
            left_labels.append(labels[idx])
        if left_labels:
            return id_map, torch.stack(left_labels)
        return id_map, bboxes.new_zeros((0, ), dtype=torch.long)

    def _cfg(self, key):
        value = cfg_get(self.test_cfg, key)
        if value is None:
            raise ValueError(f'HeuristicFusionHead needs test_cfg.panoptic.{key} to test '
                             f'(mask_thr_binary, mask_overlap, stuff_area_limit), got '
                             f'{self.test_cfg!r}')
        return value

    def simple_test(self, det_bboxes, det_labels, mask_preds, seg_preds, **kwargs):
        """The (H, W) int64 panoptic map of one image.

        Args:
            det_bboxes (Tensor): (K, 5) boxes with scores; det_labels (Tensor): (K, ).
            mask_preds (Tensor): (K, H, W) mask probabilities (thresholded at
                ``mask_thr_binary``), or bool masks already thresholded.
            seg_preds (Tensor): (num_stuff + 1, H, W) semantic logits, or their (H, W)
                arg-max (what the detector passes, computed in chunks).
        """
        if mask_preds.dtype != torch.bool:
            mask_preds = mask_preds >= self._cfg('mask_thr_binary')
        id_map, labels = self._lay_masks(det_bboxes, det_labels, mask_preds,
                                         self._cfg('mask_overlap'))
        stuff_area_limit = self._cfg('stuff_area_limit')
        seg_results = seg_preds if seg_preds.dim() == 2 else seg_preds.argmax(dim=0)
        pan_results = seg_results.long() + self.num_things_classes
        for idx in range(labels.shape[0]):
            # trust the detection: the instance's pixels take its class
            pan_results[id_map == idx + 1] = labels[idx] + (idx + 1) * INSTANCE_OFFSET
        ids, counts = torch.unique(pan_results % INSTANCE_OFFSET, return_counts=True)
        small_stuff = ids[(ids >= self.num_things_classes) & (counts < stuff_area_limit)]
        pan_results[torch.isin(pan_results, small_stuff)] = self.num_classes
        return pan_results
