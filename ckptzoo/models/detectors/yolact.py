"""mmdet 2.x ``YOLACT`` (Bolya et al. 2019): a :class:`SingleStageDetector` whose box head also
predicts mask coefficients, a ``segm_head`` (training-only semantic loss) and a ``mask_head``
(the prototype network). Keys ``backbone.*``, ``neck.*``, ``bbox_head.*``, ``segm_head.*``,
``mask_head.*`` as mmdet, so mmdet 2.x YOLACT checkpoints load."""
import torch

from ...core.bbox import bbox2result
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['YOLACT']


@MODELS.register_module()
class YOLACT(SingleStageDetector):
    """YOLACT; arguments as mmdet 2.x (``segm_head`` and ``mask_head`` are required)."""

    def __init__(self, backbone, neck, bbox_head, segm_head, mask_head, train_cfg=None,
                 test_cfg=None, pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
        self.segm_head = MODELS.build(segm_head)
        self.mask_head = MODELS.build(mask_head)

    def forward_dummy(self, img):
        """The box head's outputs and the prototypes (for FLOP counting)."""
        feat = self.extract_feat(img)
        return self.bbox_head(feat), self.mask_head.forward_dummy(feat[0])

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None,
                      gt_masks=None):
        """``loss_cls``, ``loss_bbox`` (per image with OHEM), ``loss_segm`` and ``loss_mask``
        (per image). ``gt_masks``: per image BitmapMasks / PolygonMasks or a ``[n, H, W]``
        tensor at the input's (padded) size."""
        if gt_masks is None:
            raise ValueError('YOLACT trains on instance masks: forward_train needs gt_masks')
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        gt_masks = [m.to(img.device, torch.uint8) if isinstance(m, torch.Tensor)
                    else m.to_tensor(dtype=torch.uint8, device=img.device) for m in gt_masks]
        x = self.extract_feat(img)
        cls_score, bbox_pred, coeff_pred = self.bbox_head(x)
        losses, sampling_results = self.bbox_head.loss(cls_score, bbox_pred, gt_bboxes, gt_labels,
                                                       img_metas,
                                                       gt_bboxes_ignore=gt_bboxes_ignore)
        losses.update(self.segm_head.loss(self.segm_head(x[0]), gt_masks, gt_labels))
        mask_pred = self.mask_head(x[0], coeff_pred, gt_bboxes, img_metas, sampling_results)
        losses.update(self.mask_head.loss(mask_pred, gt_masks, gt_bboxes, img_metas,
                                          sampling_results))
        for name, values in losses.items():
            if not torch.isfinite(torch.stack([v.reshape(()) for v in values])).all():
                raise FloatingPointError(f'YOLACT: {name} became infinite or NaN')
        return losses

    def simple_test(self, img, img_metas, rescale=False):
        """Per image ``(bbox_results, segm_results)``: per class a float32 ``[k, 5]`` array,
        and per class a list of uint8 masks (mmdet 2.x's instance segmentation format)."""
        feat = self.extract_feat(img)
        det_bboxes, det_labels, det_coeffs = self.bbox_head.simple_test(feat, img_metas,
                                                                        rescale=rescale)
        bbox_results = [bbox2result(b, labels, self.bbox_head.num_classes)
                        for b, labels in zip(det_bboxes, det_labels)]
        segm_results = self.mask_head.simple_test(feat, det_bboxes, det_labels, det_coeffs,
                                                  img_metas, rescale=rescale)
        return list(zip(bbox_results, segm_results))

    def aug_test(self, imgs, img_metas, rescale=False):
        raise NotImplementedError('YOLACT does not support test-time augmentation (as mmdet)')
