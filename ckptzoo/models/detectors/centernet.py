"""mmdet 2.x ``CenterNet``: a :class:`SingleStageDetector` (CTResNetNeck, CenterNetHead) whose
test-time augmentation averages the heatmaps and sizes of each image with its flip before
decoding."""
import torch

from ...core.utils import flip_tensor
from ...registry import MODELS
from .single_stage import SingleStageDetector, bbox2result

__all__ = ['CenterNet']


@MODELS.register_module()
class CenterNet(SingleStageDetector):
    """CenterNet (Zhou et al. 2019); arguments as mmdet 2.x ``CenterNet``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)

    def merge_aug_results(self, aug_results, with_nms):
        """Every augmentation pair's ``(bboxes, labels)`` concatenated, NMS'd with
        ``with_nms``."""
        bboxes = torch.cat([r[0][0] for r in aug_results], dim=0).contiguous()
        labels = torch.cat([r[0][1] for r in aug_results]).contiguous()
        if with_nms:
            return self.bbox_head._bboxes_nms(bboxes, labels, self.bbox_head.test_cfg)
        return bboxes, labels

    def aug_test(self, imgs, img_metas, rescale=True):
        """mmdet 2.x: ``imgs`` come as (image, flipped image) pairs; per pair the flipped
        heatmap and sizes are flipped back and averaged with the image's (the offsets are
        the image's), decoded without NMS; all pairs merged, with NMS where ``test_cfg`` has
        ``nms_cfg``. One image per augmentation."""
        if len(imgs) % 2 or not all(bool(img_metas[i + 1][0].get('flip')) !=
                                    bool(img_metas[i][0].get('flip'))
                                    for i in range(0, len(imgs), 2)):
            raise ValueError('CenterNet aug_test takes (image, flipped image) pairs of '
                             'augmentations')
        aug_results = []
        for ind in range(0, len(imgs), 2):
            flip_direction = img_metas[ind + 1][0]['flip_direction']
            x = self.extract_feat(torch.cat([imgs[ind], imgs[ind + 1]]))
            heatmaps, whs, offsets = self.bbox_head(x)
            heatmaps[0] = (heatmaps[0][0:1] + flip_tensor(heatmaps[0][1:2], flip_direction)) / 2
            whs[0] = (whs[0][0:1] + flip_tensor(whs[0][1:2], flip_direction)) / 2
            aug_results.append(self.bbox_head.get_bboxes(heatmaps, whs, [offsets[0][0:1]],
                                                         img_metas[ind], rescale=rescale,
                                                         with_nms=False))
        with_nms = self.bbox_head.test_cfg.get('nms_cfg', None) is not None
        bboxes, labels = self.merge_aug_results(aug_results, with_nms)
        return [bbox2result(bboxes, labels, self.bbox_head.num_classes)]
