"""mmdet 2.x ``MaskFormerFusionHead``: MaskFormer's / Mask2Former's query predictions as results.

- panoptic (``test_cfg.panoptic_on``, default True): queries whose best class is not
  no-object and scores above ``object_mask_thr`` (0.8) compete per pixel by
  ``score * sigmoid(mask)``; a query keeps its pixels only if they are at least ``iou_thr``
  (0.8) of its own mask (``sigmoid >= 0.5``); things get ``label + id * INSTANCE_OFFSET``
  (ids from 1 in query order), stuff its label, the rest ``num_classes`` (void).
  ``filter_low_score`` also drops pixels where the query's own mask is below 0.5.
- instance (``instance_on``): the ``max_per_image`` best (query, class) scores of the thing
  classes, masks ``mask > 0``, scores times the mean sigmoid inside the mask, boxes around the
  masks: ``(labels, bboxes (k, 5), masks (k, H, W) bool)``.

Results equal mmdet's. Memory: mmdet upsamples every query's mask to the batch input (and
again to the original size with ``rescale``) at once (open-mmlab/mmdetection#9424, evaluation
out of memory). Here ``simple_test`` also takes the low-resolution masks (what the detector
passes) and makes the full-size masks of at most ``mask_mem_limit`` bytes (default
``GPU_MEM_LIMIT``, 1 GiB of float32; a multiple of 16 queries when 16 fit, so the CPU rounds
them as mmdet's all-at-once resize does) at a time: the panoptic map keeps a running maximum
and argmax (``H x W``), the instance masks only the selected queries' bool masks. Peak extra memory is about three chunks
(resize, crop, rescale) plus the ``H x W`` running maps, whatever ``num_queries``.
"""
import torch
import torch.nn.functional as F

from ....core.mask import mask2bbox
from ....evaluation.panoptic_utils import INSTANCE_OFFSET
from ....registry import MODELS
from ...dense_heads.maskformer_head import chunk_step
from ...roi_heads.mask_heads.fcn_mask_head import BYTES_PER_FLOAT, GPU_MEM_LIMIT
from .base_panoptic_fusion_head import BasePanopticFusionHead

__all__ = ['MaskFormerFusionHead']


class _FullMasks:
    """One image's mask logits at full size, made on demand for a subset of queries: resized
    to the batch input (if given smaller), cropped to ``img_shape``, resized to ``ori_shape``
    with ``rescale`` (mmdet's steps, in its order)."""

    def __init__(self, masks, meta, rescale, limit):
        self.masks = masks
        self.batch_shape = tuple(meta.get('batch_input_shape', masks.shape[-2:]))
        self.img_hw = tuple(meta['img_shape'][:2])
        self.out_hw = tuple(meta['ori_shape'][:2]) if rescale else self.img_hw
        self.rescale = rescale
        largest = max(self.batch_shape[0] * self.batch_shape[1], self.out_hw[0] * self.out_hw[1])
        self.step = chunk_step(int(limit // (largest * BYTES_PER_FLOAT)))

    def __call__(self, inds):
        x = self.masks[inds]
        if tuple(x.shape[-2:]) != self.batch_shape:
            x = F.interpolate(x[None], size=self.batch_shape, mode='bilinear',
                              align_corners=False)[0]
        x = x[:, :self.img_hw[0], :self.img_hw[1]]
        if self.rescale:
            x = F.interpolate(x[:, None], size=self.out_hw, mode='bilinear',
                              align_corners=False)[:, 0]
        return x

    def chunks(self, inds):
        """``(start, full masks of inds[start:start + step])`` over ``inds``."""
        for s in range(0, len(inds), self.step):
            yield s, self(inds[s:s + self.step])


@MODELS.register_module()
class MaskFormerFusionHead(BasePanopticFusionHead):
    """Args (mmdet's): ``num_things_classes`` (80), ``num_stuff_classes`` (53), ``test_cfg``
    (``panoptic_on``, ``instance_on``, ``semantic_on`` (unsupported, as mmdet),
    ``object_mask_thr``, ``iou_thr``, ``filter_low_score``, ``max_per_image``),
    ``loss_panoptic``, ``init_cfg``. ``mask_mem_limit``: ours, bytes of full-size float
    masks made at once (``GPU_MEM_LIMIT``, 1 GiB)."""

    def __init__(self, num_things_classes=80, num_stuff_classes=53, test_cfg=None,
                 loss_panoptic=None, init_cfg=None, mask_mem_limit=GPU_MEM_LIMIT, **kwargs):
        super().__init__(num_things_classes, num_stuff_classes, test_cfg, loss_panoptic,
                         init_cfg, **kwargs)
        if not (isinstance(mask_mem_limit, int) and mask_mem_limit > 0):
            raise ValueError(f'mask_mem_limit must be a positive int (bytes), got '
                             f'{mask_mem_limit!r}')
        self.mask_mem_limit = mask_mem_limit

    def forward_train(self, **kwargs):
        """No loss (mmdet's): an empty dict."""
        return dict()

    def _cfg(self, key, default):
        return (self.test_cfg or {}).get(key, default)

    def panoptic_postprocess(self, mask_cls, mask_pred):
        """mmdet's signature: ``mask_pred (q, H, W)`` logits at the output size; the map
        ``(H, W)`` int32."""
        full = _FullMasks(mask_pred, dict(img_shape=mask_pred.shape[-2:],
                                          ori_shape=mask_pred.shape[-2:]), False,
                          self.mask_mem_limit)
        return self._panoptic(mask_cls, full)

    def _panoptic(self, mask_cls, full):
        object_mask_thr = self._cfg('object_mask_thr', 0.8)
        iou_thr = self._cfg('iou_thr', 0.8)
        filter_low_score = self._cfg('filter_low_score', False)
        scores, labels = F.softmax(mask_cls, dim=-1).max(-1)
        keep = torch.nonzero(labels.ne(self.num_classes) & (scores > object_mask_thr),
                             as_tuple=False).squeeze(1)
        h, w = full.out_hw
        device = mask_cls.device
        panoptic_seg = torch.full((h, w), self.num_classes, dtype=torch.int32, device=device)
        if keep.numel() == 0:
            return panoptic_seg
        cur_scores, cur_classes = scores[keep], labels[keep]
        best = ids = None
        original_area = []
        for start, logits in full.chunks(keep):
            probs = logits.sigmoid()
            original_area += (probs >= 0.5).flatten(1).sum(1).tolist()
            prob_masks = cur_scores[start:start + len(probs)].view(-1, 1, 1) * probs
            chunk_best, chunk_ids = prob_masks.max(0)
            chunk_ids = chunk_ids + start
            if best is None:
                best, ids = chunk_best, chunk_ids
            else:  # ties keep the earlier query, as one argmax over all
                later = chunk_best > best
                best = torch.where(later, chunk_best, best)
                ids = torch.where(later, chunk_ids, ids)
        own = None
        instance_id = 1
        for k in range(cur_classes.shape[0]):
            pred_class = int(cur_classes[k].item())
            mask = ids == k
            mask_area = mask.sum().item()
            if filter_low_score:
                own = full(keep[k:k + 1])[0].sigmoid() >= 0.5
                mask = mask & own
            if mask_area > 0 and original_area[k] > 0:
                if mask_area / original_area[k] < iou_thr:
                    continue
                if pred_class < self.num_things_classes:
                    panoptic_seg[mask] = pred_class + instance_id * INSTANCE_OFFSET
                    instance_id += 1
                else:
                    panoptic_seg[mask] = pred_class
        return panoptic_seg

    def semantic_postprocess(self, mask_cls, mask_pred):
        raise NotImplementedError('MaskFormerFusionHead gives no semantic results (as mmdet)')

    def instance_postprocess(self, mask_cls, mask_pred):
        """mmdet's signature: ``(labels (k,), bboxes (k, 5), masks (k, H, W) bool)``."""
        full = _FullMasks(mask_pred, dict(img_shape=mask_pred.shape[-2:],
                                          ori_shape=mask_pred.shape[-2:]), False,
                          self.mask_mem_limit)
        return self._instance(mask_cls, full)

    def _instance(self, mask_cls, full):
        max_per_image = self._cfg('max_per_image', 100)
        num_queries = mask_cls.shape[0]
        scores = F.softmax(mask_cls, dim=-1)[:, :-1]
        labels = torch.arange(self.num_classes, device=mask_cls.device).unsqueeze(0).repeat(
            num_queries, 1).flatten(0, 1)
        scores_per_image, top_indices = scores.flatten(0, 1).topk(max_per_image, sorted=False)
        labels_per_image = labels[top_indices]
        query_indices = top_indices // self.num_classes
        is_thing = labels_per_image < self.num_things_classes
        scores_per_image = scores_per_image[is_thing]
        labels_per_image = labels_per_image[is_thing]
        query_indices = query_indices[is_thing]
        h, w = full.out_hw
        binary = torch.zeros((len(query_indices), h, w), dtype=torch.bool,
                             device=mask_cls.device)
        mask_scores = scores_per_image.new_zeros(len(query_indices))
        for start, logits in full.chunks(query_indices):
            chunk_bin = (logits > 0).float()  # float32, as mmdet (its eps 1e-6 in float32)
            end = start + len(logits)
            mask_scores[start:end] = (logits.sigmoid() * chunk_bin).flatten(1).sum(1) / (
                chunk_bin.flatten(1).sum(1) + 1e-6)
            binary[start:end] = chunk_bin.bool()
        det_scores = scores_per_image * mask_scores
        bboxes = torch.cat([mask2bbox(binary), det_scores[:, None]], dim=-1)
        return labels_per_image, bboxes, binary

    def simple_test(self, mask_cls_results, mask_pred_results, img_metas, rescale=False,
                    **kwargs):
        """Per image ``dict(pan_results=(H, W) int32, ins_results=(labels, bboxes, masks))``
        as enabled by ``test_cfg``. ``mask_pred_results``: ``(bs, q, h, w)`` logits at the
        batch input size (mmdet's head output) or smaller (upsampled here per chunk)."""
        panoptic_on = self._cfg('panoptic_on', True)
        instance_on = self._cfg('instance_on', False)
        if self._cfg('semantic_on', False):
            raise NotImplementedError('MaskFormerFusionHead gives no semantic results '
                                      '(test_cfg semantic_on=True), as mmdet')
        results = []
        for mask_cls, mask_pred, meta in zip(mask_cls_results, mask_pred_results, img_metas):
            full = _FullMasks(mask_pred, meta, rescale, self.mask_mem_limit)
            result = dict()
            if panoptic_on:
                result['pan_results'] = self._panoptic(mask_cls, full)
            if instance_on:
                result['ins_results'] = self._instance(mask_cls, full)
            results.append(result)
        return results
