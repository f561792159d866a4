"""mmdet 2.x ``SingleStageInstanceSegmentor``: backbone -> neck -> (optional bbox head) ->
mask head, for box-free instance segmentation (SOLO, SOLOv2).

Keys ``backbone.*``, ``neck.*``, ``bbox_head.*``, ``mask_head.*`` as mmdet. ``simple_test``
returns, per image, ``(bbox_results, segm_results)`` as mmdet: ``bbox_results`` a list over
classes of float32 ``(k, 5)`` arrays (zero boxes and the score when the head gives no boxes,
as mmdet), ``segm_results`` a list over classes of lists of bool ``(H, W)`` masks, so the
COCO ``segm`` evaluation reads them unchanged.
"""
import copy

import numpy as np
import torch

from ...registry import MODELS
from ..utils import build_model_or_sequence
from .base import BaseDetector

__all__ = ['SingleStageInstanceSegmentor']


def _field(results, name, default=None):
    """A field of one image's results: a dict (ours) or an object with attributes (mmdet's
    ``InstanceData``)."""
    if isinstance(results, dict):
        return results.get(name, default)
    return getattr(results, name, default)


@MODELS.register_module()
class SingleStageInstanceSegmentor(BaseDetector):
    """Args as mmdet 2.x: ``backbone``, ``neck``, ``bbox_head`` (optional), ``mask_head``
    (required) configs; ``train_cfg`` / ``test_cfg`` are handed to both heads;
    ``pretrained`` (deprecated) becomes the backbone's ``init_cfg``.

    Heads' interface (mmdet's): a bbox head has ``loss(*outs, gt_bboxes=, gt_labels=,
    gt_masks=, img_metas=, gt_bboxes_ignore=)`` returning ``(losses, positive_infos)`` and
    ``get_results(*outs, img_metas=, cfg=, rescale=)``; the mask head has
    ``forward_train(x, gt_labels, gt_masks, img_metas, positive_infos=, gt_bboxes=,
    gt_bboxes_ignore=)`` and ``simple_test(x, img_metas, rescale=, instances_list=)``
    returning per image a dict (or object) with ``scores``, ``labels``, ``masks`` and
    optionally ``bboxes``."""

    def __init__(self, backbone, neck=None, bbox_head=None, mask_head=None, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None):
        super().__init__(init_cfg)
        if not mask_head:
            raise ValueError(f'{type(self).__name__} needs a mask_head config')
        self.backbone = MODELS.build(self._backbone_cfg(backbone, pretrained))
        self.neck = build_model_or_sequence(neck, MODELS) if neck is not None else None
        if bbox_head is not None:
            self.bbox_head = MODELS.build(dict(bbox_head, train_cfg=copy.deepcopy(train_cfg),
                                               test_cfg=copy.deepcopy(test_cfg)))
        else:
            self.bbox_head = None
        self.mask_head = MODELS.build(dict(mask_head, train_cfg=copy.deepcopy(train_cfg),
                                           test_cfg=copy.deepcopy(test_cfg)))
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.CLASSES = None

    def forward_dummy(self, img):
        raise NotImplementedError(f'forward_dummy is not implemented in {type(self).__name__}'
                                  ' (as mmdet)')

    @staticmethod
    def _masks_to_tensor(gt_masks, device):
        """``BitmapMasks`` (or tensors / arrays ``(n, H, W)``) to bool tensors."""
        out = []
        for masks in gt_masks:
            if hasattr(masks, 'to_tensor'):
                out.append(masks.to_tensor(dtype=torch.bool, device=device))
            else:
                out.append(torch.as_tensor(masks, device=device).bool())
        return out

    def forward_train(self, img, img_metas, gt_masks, gt_labels, gt_bboxes=None,
                      gt_bboxes_ignore=None, **kwargs):
        """Losses of the bbox head (if any) and the mask head, one dict.

        Args:
            img (Tensor[B, 3, H, W]): padded batch.
            img_metas (list[dict]): per image, mmdet 2.x keys.
            gt_masks (list[BitmapMasks]): per image ``(n_i, H, W)`` instance masks.
            gt_labels (list[Tensor[n_i]]): 0-based class indices.
            gt_bboxes (list[Tensor[n_i, 4]] | None), gt_bboxes_ignore: handed to the heads.
        """
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        gt_masks = self._masks_to_tensor(gt_masks, img.device)
        x = self.extract_feat(img)
        losses = dict()
        positive_infos = None
        if self.bbox_head is not None:
            outs = self.bbox_head(x)
            det_losses, positive_infos = self.bbox_head.loss(
                *outs, gt_bboxes=gt_bboxes, gt_labels=gt_labels, gt_masks=gt_masks,
                img_metas=img_metas, gt_bboxes_ignore=gt_bboxes_ignore, **kwargs)
            losses.update(det_losses)
        mask_losses = self.mask_head.forward_train(
            x, gt_labels, gt_masks, img_metas, positive_infos=positive_infos,
            gt_bboxes=gt_bboxes, gt_bboxes_ignore=gt_bboxes_ignore, **kwargs)
        clash = set(mask_losses) & set(losses)
        if clash:
            raise KeyError(f'the mask head and the bbox head both give losses {sorted(clash)}')
        losses.update(mask_losses)
        return losses

    def simple_test(self, img, img_metas, rescale=False):
        """Per image ``(bbox_results, segm_results)`` (see the module docstring)."""
        feat = self.extract_feat(img)
        results_list = None
        if self.bbox_head is not None:
            outs = self.bbox_head(feat)
            results_list = self.bbox_head.get_results(*outs, img_metas=img_metas,
                                                      cfg=self.test_cfg, rescale=rescale)
        results_list = self.mask_head.simple_test(feat, img_metas, rescale=rescale,
                                                  instances_list=results_list)
        return [self.format_results(results) for results in results_list]

    def format_results(self, results):
        """One image's ``scores (k,)``, ``labels (k,)``, ``masks (k, H, W)`` (and optional
        ``bboxes (k, 4)``) to mmdet's ``(bbox_results, segm_results)``."""
        num_classes = self.mask_head.num_classes
        scores, labels = _field(results, 'scores'), _field(results, 'labels')
        masks = _field(results, 'masks')
        if scores is None or labels is None or masks is None:
            raise KeyError('results must hold scores, labels and masks')
        segm_results = [[] for _ in range(num_classes)]
        if len(scores) == 0:
            return [np.zeros((0, 5), dtype=np.float32) for _ in range(num_classes)], \
                segm_results
        labels = labels.detach().cpu().numpy()
        bboxes = _field(results, 'bboxes')
        if bboxes is None:  # mmdet: dummy boxes carry the scores
            bboxes = scores.new_zeros(len(scores), 4)
        dets = torch.cat([bboxes, scores[:, None]], dim=-1).detach().float().cpu().numpy()
        bbox_results = [dets[labels == i, :] for i in range(num_classes)]
        masks = masks.detach().cpu().numpy()
        for mask, label in zip(masks, labels):
            segm_results[label].append(mask)
        return bbox_results, segm_results

    def aug_test(self, imgs, img_metas, rescale=False):
        raise NotImplementedError(f'{type(self).__name__} has no test-time augmentation '
                                  '(as mmdet)')

    def show_result(self, img, result, score_thr=0.3, **kwargs):
        """As :meth:`BaseDetector.show_result`; all-zero boxes (the mask head gave none) are
        replaced by each mask's extent first, as mmdet does."""
        if isinstance(result, tuple) and len(result) == 2:
            bbox_result, segm_result = result
            bbox_result = [np.array(b, dtype=np.float32, copy=True).reshape(-1, 5)
                           for b in bbox_result]
            for boxes, masks in zip(bbox_result, segm_result):
                for i, mask in enumerate(masks):
                    if i < len(boxes) and not boxes[i, :4].any():
                        ys, xs = np.nonzero(np.asarray(mask))
                        if len(xs):
                            boxes[i, :4] = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            result = (bbox_result, segm_result)
        return super().show_result(img, result, score_thr=score_thr, **kwargs)
