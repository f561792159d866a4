"""mmdet 2.x ``TwoStagePanopticSegmentor``: a :class:`TwoStageDetector` (RPN + RoI head with a
mask branch) plus a ``semantic_head`` (stuff) and a ``panoptic_fusion_head`` that merges both
into one panoptic map per image.

Keys ``backbone.*``, ``neck.*``, ``rpn_head.*``, ``roi_head.*``, ``semantic_head.*`` as mmdet,
so mmdet 2.x checkpoints load. ``simple_test`` returns ``[dict(pan_results=(H, W) int32)]``,
each pixel ``label + instance_id * INSTANCE_OFFSET`` (stuff: instance id 0; void:
``num_classes``), as mmdet 2.28.2.

Test-time memory: mmdet pastes every instance mask as a float image (K x H x W x 4 bytes)
and upsamples all semantic logits at once; here masks are pasted and thresholded in chunks of
at most ``GPU_MEM_LIMIT`` bytes of float masks (only the (K, H, W) bool masks are kept) and
the semantic arg-max is taken a chunk of channels at a time
(:meth:`BaseSemanticHead.simple_test_labels`). The results are the same.
"""
import math

import numpy as np
import torch

from ...core.bbox import bbox2roi
from ...core.post_processing import multiclass_nms
from ...evaluation.panoptic_utils import INSTANCE_OFFSET
from ...registry import MODELS
from ..roi_heads.mask_heads.fcn_mask_head import BYTES_PER_FLOAT, GPU_MEM_LIMIT, paste_masks
from .two_stage import TwoStageDetector

__all__ = ['BasePanopticSegmentor', 'TwoStagePanopticSegmentor']


def _sub(cfg, key):
    return None if cfg is None else cfg.get(key)


class BasePanopticSegmentor:
    """What panoptic detectors share (not an mmdet class): the heads' presence, the class
    counts of the fusion head, and drawing ``dict(pan_results=...)``."""

    @property
    def with_semantic_head(self):
        return getattr(self, 'semantic_head', None) is not None

    @property
    def with_panoptic_fusion_head(self):
        """mmdet 2.28.2 looks for ``panoptic_fusion_heads`` (a typo: always False); this is
        True when the model has its ``panoptic_fusion_head``."""
        return getattr(self, 'panoptic_fusion_head', None) is not None

    def _take_fusion_classes(self):
        self.num_things_classes = self.panoptic_fusion_head.num_things_classes
        self.num_stuff_classes = self.panoptic_fusion_head.num_stuff_classes
        self.num_classes = self.panoptic_fusion_head.num_classes

    def show_result(self, img, result, score_thr=0.3, bbox_color=(72, 101, 241),
                    text_color=(72, 101, 241), mask_color=None, thickness=2, font_size=13,
                    win_name='', show=False, wait_time=0, out_file=None):
        """Draw ``result['pan_results']`` on ``img`` (mmdet's arguments): every segment but
        void, instances ahead, labelled with its class. mmdet writes the label at the mask's
        centre; here each segment is labelled on its bounding box (what the shared drawing
        function draws)."""
        if not isinstance(result, dict) or 'pan_results' not in result:
            return super().show_result(img, result, score_thr, bbox_color, text_color,
                                       mask_color, thickness, font_size, win_name, show,
                                       wait_time, out_file)
        from ...visualization import imshow_det_bboxes
        pan_results = np.asarray(result['pan_results'])
        ids = np.unique(pan_results)[::-1]
        ids = ids[ids != self.num_classes]  # void
        labels = (ids % INSTANCE_OFFSET).astype(np.int64)
        segms = pan_results[None] == ids[:, None, None]
        bboxes = np.zeros((len(ids), 4), np.float32)
        for i, segm in enumerate(segms):
            rows, cols = np.nonzero(segm.any(axis=1))[0], np.nonzero(segm.any(axis=0))[0]
            bboxes[i] = (cols[0], rows[0], cols[-1] + 1, rows[-1] + 1)
        if out_file is not None:
            show = False
        img = imshow_det_bboxes(img, bboxes, labels, segms, class_names=self.CLASSES,
                                bbox_color=bbox_color, text_color=text_color,
                                mask_color=mask_color, thickness=thickness,
                                font_size=font_size, win_name=win_name, show=show,
                                wait_time=wait_time, out_file=out_file)
        if not (show or out_file):
            return img
        return None


@MODELS.register_module()
class TwoStagePanopticSegmentor(BasePanopticSegmentor, TwoStageDetector):
    """Args as mmdet 2.x: :class:`TwoStageDetector`'s, then ``semantic_head`` and
    ``panoptic_fusion_head`` configs; the fusion head gets ``test_cfg.panoptic`` (keys
    ``score_thr``, ``nms``, ``max_per_img`` for the instances, ``mask_thr_binary``,
    ``mask_overlap``, ``stuff_area_limit`` for the fusion)."""

    TEST_CFG_KEYS = ('rpn', 'rcnn', 'panoptic')

    def __init__(self, backbone, neck=None, rpn_head=None, roi_head=None, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None, semantic_head=None,
                 panoptic_fusion_head=None):
        super().__init__(backbone, neck, rpn_head, roi_head, train_cfg, test_cfg, pretrained,
                         init_cfg)
        if semantic_head is not None:
            self.semantic_head = MODELS.build(semantic_head)
        if panoptic_fusion_head is not None:
            self.panoptic_fusion_head = MODELS.build(
                dict(panoptic_fusion_head, test_cfg=_sub(test_cfg, 'panoptic')))
            self._take_fusion_classes()

    def forward_dummy(self, img):
        raise NotImplementedError(f'`forward_dummy` is not implemented in '
                                  f'{type(self).__name__} (as mmdet)')

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None,
                      gt_masks=None, gt_semantic_seg=None, proposals=None, **kwargs):
        """The RPN, RoI head and semantic head losses (``loss_seg``).

        Args: as :meth:`TwoStageDetector.forward_train`, plus ``gt_semantic_seg``
        ((N, 1, H, W) per-pixel labels: things ``0 .. num_things - 1``, stuff after them,
        255 ignored)."""
        self._need_roi_head('train')
        if not self.with_semantic_head:
            raise ValueError(f'{type(self).__name__} needs a semantic_head to train')
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        losses = dict()
        if self.with_rpn:
            proposal_cfg = _sub(self.train_cfg, 'rpn_proposal')
            if proposal_cfg is None:
                proposal_cfg = self.test_cfg['rpn']
            rpn_losses, proposal_list = self.rpn_head.forward_train(
                x, img_metas, gt_bboxes, gt_labels=None, gt_bboxes_ignore=gt_bboxes_ignore,
                proposal_cfg=proposal_cfg)
            losses.update(rpn_losses)
        elif proposals is None:
            raise ValueError(f'{type(self).__name__} without an rpn_head needs proposals')
        else:
            proposal_list = proposals
        losses.update(self.roi_head.forward_train(x, img_metas, proposal_list, gt_bboxes,
                                                  gt_labels, gt_bboxes_ignore, gt_masks,
                                                  **kwargs))
        losses.update(self.semantic_head.forward_train(x, gt_semantic_seg))
        return losses

    def simple_test_mask(self, x, img_metas, det_bboxes, det_labels, rescale=False):
        """Per image the (K, H, W) bool masks of its detections, pasted into the original
        image (``rescale``) or the padded input, thresholded at ``mask_thr_binary`` of
        ``test_cfg.panoptic``; chunks of at most ``GPU_MEM_LIMIT`` bytes of float masks."""
        thr = self._panoptic_cfg('mask_thr_binary')
        img_shapes = [meta['ori_shape' if rescale else 'pad_shape'][:2] for meta in img_metas]
        boxes = [b[:, :4] for b in det_bboxes]
        if rescale:
            boxes = [b * b.new_tensor(np.asarray(meta['scale_factor'], dtype=np.float32))
                     for b, meta in zip(boxes, img_metas)]
        if all(len(b) == 0 for b in boxes):
            return [det_bboxes[i].new_zeros((0, ) + tuple(shape), dtype=torch.bool)
                    for i, shape in enumerate(img_shapes)]
        mask_pred = self.roi_head._mask_forward(x, bbox2roi(boxes))['mask_pred']
        mask_preds = mask_pred.split([len(b) for b in boxes], 0)
        class_agnostic = mask_pred.size(1) == 1
        masks = []
        for pred, dets, labels, (h, w) in zip(mask_preds, det_bboxes, det_labels, img_shapes):
            num = pred.size(0)
            pred = pred.sigmoid()
            pred = pred[torch.arange(num, device=pred.device),
                        0 if class_agnostic else labels.long()][:, None]
            out = torch.zeros((num, h, w), dtype=torch.bool, device=pred.device)
            chunks = max(1, min(num, math.ceil(num * h * w * BYTES_PER_FLOAT / GPU_MEM_LIMIT)))
            for inds in torch.chunk(torch.arange(num, device=pred.device), chunks):
                pasted, _ = paste_masks(pred[inds], dets[inds, :4], h, w, skip_empty=False)
                out[inds] = pasted >= thr
            masks.append(out)
        return masks

    def _panoptic_cfg(self, key):
        value = _sub(_sub(self.test_cfg, 'panoptic'), key)
        if value is None:
            raise ValueError(f'{type(self).__name__} needs test_cfg.panoptic.{key} to test '
                             f'(score_thr, nms, max_per_img, mask_thr_binary, mask_overlap, '
                             f'stuff_area_limit), got test_cfg={self.test_cfg!r}')
        return value

    def simple_test(self, img, img_metas, proposals=None, rescale=False):
        """Per image ``dict(pan_results=(H, W) int32 ndarray)`` at the original size
        (``rescale``) or the padded input size, as mmdet 2.28.2."""
        if not (self.with_bbox and self.with_mask and self.with_semantic_head and
                self.with_panoptic_fusion_head):
            raise ValueError(f'{type(self).__name__} needs a roi_head with a bbox_head and a '
                             f'mask_head, a semantic_head and a panoptic_fusion_head to test')
        x = self.extract_feat(img)
        if proposals is None:
            if not self.with_rpn:
                raise ValueError(f'{type(self).__name__} without an rpn_head needs proposals')
            proposal_list = self.rpn_head.simple_test_rpn(x, img_metas)
        else:
            proposal_list = proposals
        bboxes, scores = self.roi_head.simple_test_bboxes(x, img_metas, proposal_list, None,
                                                          rescale=rescale)
        score_thr, nms = self._panoptic_cfg('score_thr'), self._panoptic_cfg('nms')
        max_per_img = self._panoptic_cfg('max_per_img')
        det_bboxes, det_labels = [], []
        for bbox, score in zip(bboxes, scores):
            det_bbox, det_label = multiclass_nms(bbox, score, score_thr, nms, max_per_img)
            det_bboxes.append(det_bbox)
            det_labels.append(det_label)
        masks = self.simple_test_mask(x, img_metas, det_bboxes, det_labels, rescale=rescale)
        seg_labels = self.semantic_head.simple_test_labels(x, img_metas, rescale)
        results = []
        for i in range(len(det_bboxes)):
            pan_results = self.panoptic_fusion_head.simple_test(det_bboxes[i], det_labels[i],
                                                                masks[i], seg_labels[i])
            results.append(dict(pan_results=pan_results.int().detach().cpu().numpy()))
        return results

    def aug_test(self, imgs, img_metas, rescale=False):
        raise NotImplementedError(f'{type(self).__name__} has no test-time augmentation '
                                  '(mmdet 2.28.2 has none for panoptic results either)')
