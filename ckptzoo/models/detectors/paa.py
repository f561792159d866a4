"""mmdet 2.x ``PAA``: a :class:`SingleStageDetector` with a PAAHead."""
from ...registry import MODELS
from .single_stage import SingleStageDetector

__all__ = ['PAA']


@MODELS.register_module()
class PAA(SingleStageDetector):
    """PAA (Kim & Lee 2020); arguments as mmdet 2.x ``PAA``."""

    def __init__(self, backbone, neck, bbox_head, train_cfg=None, test_cfg=None,
                 pretrained=None, init_cfg=None):
        super().__init__(backbone, neck, bbox_head, train_cfg, test_cfg, pretrained, init_cfg)
