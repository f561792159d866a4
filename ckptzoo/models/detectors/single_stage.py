"""mmdet 2.x ``SingleStageDetector``: backbone -> neck -> dense head, on :class:`BaseDetector`.

Keys ``backbone.*``, ``neck.*``, ``bbox_head.*`` as mmdet, so mmdet 2.x checkpoints load.
"""
import torch.nn as nn

from ...core.bbox import bbox2result
from ...registry import MODELS
from ..utils import build_model_or_sequence
from .base import BaseDetector

__all__ = ['SingleStageDetector', 'bbox2result']


@MODELS.register_module()
class SingleStageDetector(BaseDetector):
    """Args as mmdet 2.x: ``backbone``, ``neck``, ``bbox_head`` configs; ``train_cfg`` and
    ``test_cfg`` are handed to the head; ``pretrained`` (deprecated) becomes the backbone's
    ``init_cfg=dict(type='Pretrained', checkpoint=pretrained)``."""

    def __init__(self, backbone, neck=None, bbox_head=None, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(init_cfg)
        if bbox_head is None:
            raise ValueError(f'{type(self).__name__} needs a bbox_head config')
        self.backbone = MODELS.build(self._backbone_cfg(backbone, pretrained))
        if neck is not None:
            self.neck = build_model_or_sequence(neck, MODELS)
        bbox_head = dict(bbox_head, train_cfg=train_cfg, test_cfg=test_cfg)
        self.bbox_head = MODELS.build(bbox_head)
        self.train_cfg = train_cfg
        self.test_cfg = test_cfg
        self.CLASSES = None
        self._check_levels()

    def _check_levels(self):
        """The head's strides (one per level) against the neck's outputs, at construction:
        mmdet found the mismatch at the first training step (or zipped the levels short)."""
        neck = getattr(self, 'neck', None)
        if isinstance(neck, nn.Sequential) and len(neck):
            neck = neck[-1]
        num_outs = getattr(neck, 'num_outs', None)
        generator = getattr(self.bbox_head, 'prior_generator', None)
        num_levels = getattr(generator, 'num_levels', None)
        if isinstance(num_outs, int) and isinstance(num_levels, int) and num_outs != num_levels:
            strides = [s if isinstance(s, (int, float)) else
                       (s[0] if len(set(s)) == 1 else tuple(s))
                       for s in getattr(generator, 'strides', [])]
            raise ValueError(
                f'{type(self.bbox_head).__name__} has {num_levels} levels (strides {strides}) '
                f'but the neck {type(neck).__name__} gives {num_outs} (num_outs={num_outs}): '
                f'give the head one stride per neck output')

    def forward_dummy(self, img):
        """The raw head outputs (for FLOP counting)."""
        return self.bbox_head(self.extract_feat(img))

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        """``dict(loss_cls=[per level], loss_bbox=[per level])``.

        Args:
            img (Tensor[B, 3, H, W]): padded batch.
            img_metas (list[dict]): per image, mmdet 2.x keys (``img_shape``, ``pad_shape``,
                ``scale_factor``, ...).
            gt_bboxes (list[Tensor[n_i, 4]]): x1y1x2y2 in input-image pixels.
            gt_labels (list[Tensor[n_i]]): 0-based class indices.
            gt_bboxes_ignore (list[Tensor[m_i, 4]] | None): regions whose anchors are ignored.
        """
        if len(img_metas) != img.size(0):
            raise ValueError(f'got {len(img_metas)} img_metas for a batch of {img.size(0)}')
        self._set_batch_input_shape(img, img_metas)
        x = self.extract_feat(img)
        return self.bbox_head.forward_train(x, img_metas, gt_bboxes, gt_labels,
                                            gt_bboxes_ignore)

    def simple_test(self, img, img_metas, rescale=False):
        """Per image, per class, a float32 numpy array ``[k, 5]`` (x1, y1, x2, y2, score)."""
        feat = self.extract_feat(img)
        results = self.bbox_head.simple_test(feat, img_metas, rescale=rescale)
        return [bbox2result(bboxes, labels, self.bbox_head.num_classes)
                for bboxes, labels in results]

    def aug_test(self, imgs, img_metas, rescale=False):
        """Test-time augmentation of one image (mmdet 2.x): ``imgs`` a list over augmentations
        of ``[1, 3, H, W]`` tensors, ``img_metas`` a list of one-dict lists."""
        if not hasattr(self.bbox_head, 'aug_test'):
            raise NotImplementedError(f'{type(self.bbox_head).__name__} has no aug_test')
        if any(img.size(0) != 1 for img in imgs):
            raise ValueError(f'aug_test takes one image per augmentation, got batches of '
                             f'{[img.size(0) for img in imgs]}')
        feats = [self.extract_feat(img) for img in imgs]
        results = self.bbox_head.aug_test(feats, img_metas, rescale=rescale)
        return [bbox2result(bboxes, labels, self.bbox_head.num_classes)
                for bboxes, labels in results]
