"""mmdet 2.x ``ATSS``: a :class:`SingleStageDetector` with an ATSSHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['ATSS']


@MODELS.register_module()
class ATSS(SingleStageDetector):
    """ATSS (Zhang et al. 2020); arguments as mmdet 2.x ``ATSS``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
