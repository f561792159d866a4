"""mmdet 2.x ``CenterNet`` (Objects as Points): a :class:`SingleStageDetector` with a
CenterNetHead, whose test-time augmentation averages the heatmaps and sizes of each image and
its flip before decoding (pairs of images, the second flipped), then joins the pairs'
detections (NMS when ``test_cfg`` has ``nms_cfg``)."""
import torch

from ...core.bbox import bbox2result
from ...registry import MODELS
from ...utils.cfg_get import cfg_get
from .single_stage import SingleStageDetector

__all__ = ['CenterNet', 'flip_tensor']


def flip_tensor(src, flip_direction):
    """``src [B, C, H, W]`` flipped ``'horizontal'`` (W), ``'vertical'`` (H) or
    ``'diagonal'`` (both)."""
    dims = {'horizontal': [3], 'vertical': [2], 'diagonal': [2, 3]}
    if flip_direction not in dims:
        raise ValueError(f'flip_direction must be one of {", ".join(dims)}, '
                         f'got {flip_direction!r}')
    return torch.flip(src, dims[flip_direction])


@MODELS.register_module()
class CenterNet(SingleStageDetector):
    """CenterNet (Zhou et al. 2019); arguments as mmdet 2.x ``CenterNet``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)

    def merge_aug_results(self, aug_results, with_nms):
        bboxes = torch.cat([r[0][0] for r in aug_results], dim=0).contiguous()
        labels = torch.cat([r[0][1] for r in aug_results]).contiguous()
        if with_nms:
            return self.bbox_head._bboxes_nms(bboxes, labels, self.bbox_head.test_cfg)
        return bboxes, labels

    def aug_test(self, imgs, img_metas, rescale=True):
        """``imgs`` / ``img_metas`` in pairs (image, its flip): one image's results."""
        if len(imgs) % 2 or not all(img_metas[i + 1][0].get('flip', False)
                                    for i in range(0, len(imgs), 2)):
            raise ValueError('CenterNet aug_test needs pairs of images, the second of each '
                             'flipped (flip=True in its meta)')
        head = self.bbox_head
        aug_results = []
        for ind in range(0, len(imgs), 2):
            direction = img_metas[ind + 1][0]['flip_direction']
            x = self.extract_feat(torch.cat([imgs[ind], imgs[ind + 1]]))
            heatmaps, whs, offsets = head(x)
            heatmap = (heatmaps[0][0:1] + flip_tensor(heatmaps[0][1:2], direction)) / 2
            wh = (whs[0][0:1] + flip_tensor(whs[0][1:2], direction)) / 2
            aug_results.append(head.get_bboxes([heatmap], [wh], [offsets[0][0:1]],
                                               img_metas[ind], rescale=rescale,
                                               with_nms=False))
        with_nms = cfg_get(head.test_cfg, 'nms_cfg', None) is not None
        bboxes, labels = self.merge_aug_results(aug_results, with_nms)
        return [bbox2result(bboxes, labels, head.num_classes)]
