"""mmdet 2.x ``FasterRCNN``: a :class:`TwoStageDetector` (RPNHead + StandardRoIHead)."""
from ...registry import MODELS
from .two_stage import TwoStageDetector

__all__ = ['FasterRCNN']


@MODELS.register_module()
class FasterRCNN(TwoStageDetector):
    """Faster R-CNN (Ren et al. 2015); arguments as mmdet 2.x ``FasterRCNN``."""

    def __init__(self, backbone, rpn_head, roi_head, train_cfg, test_cfg, neck=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone=backbone, neck=neck, rpn_head=rpn_head, roi_head=roi_head,
                         train_cfg=train_cfg, test_cfg=test_cfg, pretrained=pretrained,
                         init_cfg=init_cfg)
