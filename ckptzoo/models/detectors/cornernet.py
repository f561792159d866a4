"""mmdet 2.x ``CornerNet`` (Law & Deng 2018): a :class:`SingleStageDetector` with a CornerHead
(or CentripetalHead), whose test-time augmentation decodes each image and its flip, maps the
boxes back to the original image and joins them under the head's NMS."""
import torch

from ...core.bbox import bbox2result, bbox_mapping_back
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['CornerNet']


@MODELS.register_module()
class CornerNet(SingleStageDetector):
    """CornerNet; arguments as mmdet 2.x ``CornerNet``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)

    def merge_aug_results(self, aug_results, img_metas):
        """Boxes of each augmentation mapped back (``img_shape``, ``scale_factor``, flip),
        joined and suppressed: ``(bboxes [k, 5], labels [k])``."""
        recovered, labels_all = [], []
        for (bboxes, labels), metas in zip(aug_results, img_metas):
            meta = metas[0]
            boxes = bbox_mapping_back(bboxes[:, :4], meta['img_shape'], meta['scale_factor'],
                                      meta['flip'], meta.get('flip_direction') or 'horizontal')
            recovered.append(torch.cat([boxes, bboxes[:, -1:]], dim=-1))
            labels_all.append(labels)
        bboxes, labels = torch.cat(recovered, dim=0), torch.cat(labels_all)
        if bboxes.shape[0] > 0:
            return self.bbox_head._bboxes_nms(bboxes, labels, self.bbox_head.test_cfg)
        return bboxes, labels

    def aug_test(self, imgs, img_metas, rescale=False):
        """``imgs`` / ``img_metas`` in pairs (image, its flip): one image's results."""
        if len(imgs) % 2 or not (img_metas[0][0]['flip'] or img_metas[1][0]['flip']):
            raise ValueError('CornerNet aug_test needs pairs of images, one of each flipped')
        aug_results = []
        for ind in range(0, len(imgs), 2):
            outs = self.bbox_head(self.extract_feat(torch.cat([imgs[ind], imgs[ind + 1]])))
            aug_results += self.bbox_head.get_bboxes(
                *outs, [img_metas[ind], img_metas[ind + 1]], False, False)
        bboxes, labels = self.merge_aug_results(aug_results, img_metas)
        return [bbox2result(bboxes, labels, self.bbox_head.num_classes)]
