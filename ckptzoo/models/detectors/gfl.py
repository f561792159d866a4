"""mmdet 2.x ``GFL``: a :class:`SingleStageDetector` with a GFLHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['GFL']


@MODELS.register_module()
class GFL(SingleStageDetector):
    """Generalized Focal Loss (Li et al. 2020); arguments as mmdet 2.x ``GFL``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
