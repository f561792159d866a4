"""mmdet 2.x ``MaskFormer`` (and, in ``mask2former.py``, ``Mask2Former``): backbone, optional
neck, a ``panoptic_head`` (MaskFormerHead / Mask2FormerHead) and a ``panoptic_fusion_head``
(MaskFormerFusionHead). Keys ``backbone.*``, ``neck.*``, ``panoptic_head.*`` as mmdet.

``simple_test`` results are mmdet's: per image ``dict(pan_results=(H, W) int64 numpy array,
ins_results=(bbox_results, mask_results))`` as the fusion head's ``test_cfg`` enables them;
with no stuff classes (instance segmentation) only the ``(bbox_results, mask_results)``
pairs, as mmdet's Mask R-CNN-like result. The head's low-resolution masks go to the fusion
head, which makes the full-size masks per chunk of queries (bounded memory, see
:class:`MaskFormerFusionHead`).
"""
from ...core.bbox import bbox2result
from ...registry import MODELS
from .base import BaseDetector
from .panoptic_two_stage_segmentor import BasePanopticSegmentor

__all__ = ['MaskFormer']


@MODELS.register_module()
class MaskFormer(BasePanopticSegmentor, BaseDetector):
    """Args (mmdet's): ``backbone``, ``neck``, ``panoptic_head``, ``panoptic_fusion_head``,
    ``train_cfg``, ``test_cfg``, ``init_cfg``. ``show_result`` draws a panoptic result's
    segments (the panoptic segmentors' drawing), an instance result as other detectors."""

    def __init__(self, backbone, neck=None, panoptic_head=None, panoptic_fusion_head=None,
                 train_cfg=None, test_cfg=None, init_cfg=None):
        super().__init__(init_cfg)
        for name, cfg in (('panoptic_head', panoptic_head),
                          ('panoptic_fusion_head', panoptic_fusion_head)):
            if not isinstance(cfg, dict):
                raise ValueError(f'{type(self).__name__} needs a {name} config, got {cfg!r}')
        self.backbone = MODELS.build(backbone)
        if neck is not None:
            self.neck = MODELS.build(neck)
        self.panoptic_head = MODELS.build(dict(panoptic_head, train_cfg=train_cfg,
                                               test_cfg=test_cfg))
        self.panoptic_fusion_head = MODELS.build(dict(panoptic_fusion_head,
                                                      test_cfg=test_cfg))
        self.num_things_classes = self.panoptic_head.num_things_classes
        self.num_stuff_classes = self.panoptic_head.num_stuff_classes
        self.num_classes = self.panoptic_head.num_classes
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg

    def forward_dummy(self, img, img_metas):
        """The raw head outputs (for FLOP counting)."""
        self._set_batch_input_shape(img, img_metas)
        return self.panoptic_head(self.extract_feat(img), img_metas)

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_masks,
                      gt_semantic_seg=None, gt_bboxes_ignore=None, **kwargs):
        """The head's loss dict. ``gt_masks``: BitmapMasks per image; ``gt_semantic_seg``:
        ``(bs, 1, H, W)`` (panoptic) or None (instance segmentation)."""
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        return self.panoptic_head.forward_train(x, img_metas, gt_bboxes, gt_labels, gt_masks,
                                                gt_semantic_seg, gt_bboxes_ignore)

    def simple_test(self, img, img_metas, rescale=False, **kwargs):
        """See the module docstring."""
        feats = self.extract_feat(img)
        mask_cls, mask_pred = self.panoptic_head.simple_test_low_res(feats, img_metas)
        results = self.panoptic_fusion_head.simple_test(mask_cls, mask_pred, img_metas,
                                                        rescale=rescale)
        for result in results:
            if 'pan_results' in result:
                result['pan_results'] = result['pan_results'].detach().cpu().numpy()
            if 'ins_results' in result:
                labels, bboxes, masks = result['ins_results']
                bbox_results = bbox2result(bboxes, labels, self.num_things_classes)
                mask_results = [[] for _ in range(self.num_things_classes)]
                for mask, label in zip(masks.detach().cpu().numpy(), labels.tolist()):
                    mask_results[label].append(mask)
                result['ins_results'] = bbox_results, mask_results
        if self.num_stuff_classes == 0:
            results = [result['ins_results'] for result in results]
        return results

    def aug_test(self, imgs, img_metas, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} has no test-time augmentation '
                                  '(as mmdet)')
